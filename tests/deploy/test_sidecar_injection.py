"""The sidecar added to workloads someone already has: by the kustomize Component
(deploy/kubernetes/components/sidecar) and by the Helm library chart (deploy/helm/actonce),
each rendered by the real tool onto a sample workload, then read as the kubelet would."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.render import (
    HELM_CHARTS,
    KUBE,
    Object,
    container,
    environment,
    find,
    helm_template,
    kustomize,
    pod_of,
    validate_strict,
)

SAMPLE = KUBE / "examples" / "add-to-a-deployment"
POD_IP = "10.1.2.3"


@pytest.fixture(scope="module")
def by_component() -> list[Object]:
    return kustomize(SAMPLE)


@pytest.fixture(scope="module")
def by_chart(tmp_path_factory: pytest.TempPathFactory) -> list[Object]:
    return helm_template(HELM_CHARTS / "examples" / "agent", tmp_path_factory.mktemp("chart"))


# How each way names the workload it was added to, and the agent's own container there.
WAYS = {
    "component": ("by_component", "support-agent", "worker"),
    "chart": ("by_chart", "agent", "agent"),
}


@pytest.fixture(params=sorted(WAYS))
def rendered(request: pytest.FixtureRequest) -> tuple[list[Object], Object, str]:
    fixture, workload, agent = WAYS[request.param]
    objects: list[Object] = request.getfixturevalue(fixture)
    return objects, find(objects, "Deployment", workload), agent


def sidecar_env(objects: list[Object], pod: Object) -> dict[str, str]:
    return environment(container(pod, "actonce"), objects, field_values={"status.podIP": POD_IP})


def test_actonce_is_a_native_sidecar_that_starts_before_the_workload(
    rendered: tuple[list[Object], Object, str],
) -> None:
    _, workload, agent = rendered
    pod = pod_of(workload)
    sidecar = container(pod, "actonce")
    assert sidecar["restartPolicy"] == "Always"
    assert "startupProbe" in sidecar, "without it the agent may start before actonce serves"
    assert [c["name"] for c in pod["containers"]] == [agent]
    assert pod_labels(workload)["actonce/sidecar"] == "true"


def pod_labels(workload: Object) -> dict[str, str]:
    return dict(workload["spec"]["template"]["metadata"]["labels"])


def test_the_probes_ask_grpc_health_on_the_port_bound_to_the_pods_address(
    rendered: tuple[list[Object], Object, str],
) -> None:
    objects, workload, _ = rendered
    pod = pod_of(workload)
    sidecar = container(pod, "actonce")
    env = sidecar_env(objects, pod)
    # The kubelet probes the pod's address: bound there, and there alone.
    host, _, port = env["ACTONCE_HEALTH_LISTEN"].rpartition(":")
    assert host == POD_IP
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert sidecar[probe]["grpc"]["port"] == int(port), probe
    # Readiness follows the ledger and the store; liveness only the process.
    assert sidecar["readinessProbe"]["grpc"].get("service", "") == ""
    assert sidecar["livenessProbe"]["grpc"]["service"] == "liveness"
    metrics_host, _, metrics_port = env["ACTONCE_METRICS_LISTEN"].rpartition(":")
    assert metrics_host == POD_IP
    declared = {p["name"]: p["containerPort"] for p in sidecar["ports"]}
    assert declared == {"probes": int(port), "metrics": int(metrics_port)}
    annotations = workload["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == metrics_port
    # The agent API stays on loopback, where no other pod reaches it.
    assert env["ACTONCE_LISTEN"].startswith("127.0.0.1:")


# Secret, the items the sidecar reads from it, and where it mounts them.
SECRETS = {
    "actonce-api-token": ({"token"}, "/var/run/secrets/actonce/api"),
    "actonce-store": ({"token", "ca.crt"}, "/var/run/secrets/actonce/store"),
    "actonce-audit-dsn": ({"dsn", "ca.crt"}, "/var/run/secrets/actonce/audit"),
}
# The settings that name a file, and the Secret that file comes from.
SECRET_FILES = {
    "ACTONCE_API_TOKEN_FILE": ("actonce-api-token", "token"),
    "ACTONCE_STORE_TOKEN_FILE": ("actonce-store", "token"),
    "ACTONCE_STORE_TLS_CA": ("actonce-store", "ca.crt"),
    "ACTONCE_AUDIT_DSN_FILE": ("actonce-audit-dsn", "dsn"),
}


def test_the_secrets_are_read_only_files_of_volumes_in_the_pod(
    rendered: tuple[list[Object], Object, str],
) -> None:
    objects, workload, _ = rendered
    pod = pod_of(workload)
    sidecar = container(pod, "actonce")
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in sidecar["volumeMounts"]}
    assert {m["name"] for m in mounts.values()} <= set(volumes), "a mount with no volume"
    by_secret = {v["secret"]["secretName"]: v for v in volumes.values() if "secret" in v}
    assert set(by_secret) == set(SECRETS)
    for secret, (items, mount_path) in SECRETS.items():
        volume = by_secret[secret]
        assert {i["key"] for i in volume["secret"]["items"]} == items, secret
        mount = mounts[mount_path]
        assert mount["name"] == volume["name"] and mount["readOnly"] is True, secret
    env = sidecar_env(objects, pod)
    for setting, (secret, key) in SECRET_FILES.items():
        path = Path(env[setting])
        volume = by_secret[secret]
        assert str(path.parent) == SECRETS[secret][1], setting
        (item,) = [i for i in volume["secret"]["items"] if i["key"] == key]
        assert path.name == item["path"], setting
    # No secret is a variable's value, or comes from a Secret into the environment.
    assert not [e for e in sidecar["env"] if "secretKeyRef" in e.get("valueFrom", {})]
    assert not {"ACTONCE_AUDIT_DSN", "ACTONCE_STORE_DSN"} & set(env)
    # The data and /tmp are scratch volumes of the pod.
    assert "emptyDir" in volumes["actonce-data"] and "emptyDir" in volumes["actonce-tmp"]
    assert mounts["/var/lib/actonce"]["name"] == "actonce-data"
    assert env["ACTONCE_DATA_DIR"] == "/var/lib/actonce"


def test_the_agent_is_pointed_at_the_sidecar_with_the_same_token(
    rendered: tuple[list[Object], Object, str],
) -> None:
    objects, workload, agent_name = rendered
    pod = pod_of(workload)
    sidecar = sidecar_env(objects, pod)
    agent = container(pod, agent_name)
    env = environment(agent, objects, field_values={})
    assert env["ACTONCE_TARGET"] == sidecar["ACTONCE_LISTEN"]
    assert env["ACTONCE_API_TOKEN_FILE"] == sidecar["ACTONCE_API_TOKEN_FILE"]
    (mount,) = [m for m in agent["volumeMounts"] if m["name"] == "actonce-api-token"]
    assert mount["readOnly"] is True
    assert Path(env["ACTONCE_API_TOKEN_FILE"]).parent == Path(mount["mountPath"])


def test_the_result_validates_strict_for_each_kubernetes_version(
    rendered: tuple[list[Object], Object, str],
) -> None:
    objects, _, _ = rendered
    validate_strict(objects)


def test_what_the_workload_had_is_kept(by_component: list[Object]) -> None:
    source = {
        d["metadata"]["name"]: d
        for d in yaml.safe_load_all((SAMPLE / "workloads.yaml").read_text())
    }
    before = source["support-agent"]
    after = find(by_component, "Deployment", "support-agent")
    assert after["spec"]["replicas"] == before["spec"]["replicas"]
    pod, pod_before = pod_of(after), pod_of(before)
    # The pod's own security context is the workload's: the sidecar brings its own.
    assert pod["securityContext"] == pod_before["securityContext"]
    assert {v["name"] for v in pod_before["volumes"]} < {v["name"] for v in pod["volumes"]}
    worker, worker_before = container(pod, "worker"), container(pod_before, "worker")
    assert worker["image"] == worker_before["image"]
    assert worker_before["env"][0] in worker["env"]
    assert worker_before["volumeMounts"][0] in worker["volumeMounts"]
    # The one the annotation did not ask for is untouched.
    assert find(by_component, "Deployment", "web") == source["web"]


def test_the_component_adds_the_sidecar_to_statefulsets_and_jobs_too(tmp_path: Path) -> None:
    workloads: list[dict[str, Any]] = [
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "agent-set", "annotations": {"actonce/inject": "true"}},
            "spec": {
                "serviceName": "agent-set",
                "selector": {"matchLabels": {"app": "s"}},
                "template": {
                    "metadata": {"labels": {"app": "s"}},
                    "spec": {"containers": [{"name": "a", "image": "a:1"}]},
                },
            },
        },
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "agent-run", "annotations": {"actonce/inject": "true"}},
            "spec": {
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "a", "image": "a:1"}],
                    }
                }
            },
        },
    ]
    (tmp_path / "workloads.yaml").write_text(yaml.safe_dump_all(workloads))
    # kustomize takes a component's path relative to the kustomization only.
    component = os.path.relpath(KUBE / "components" / "sidecar", tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump({"resources": ["workloads.yaml"], "components": [component]})
    )
    objects = kustomize(tmp_path)
    for kind, name in (("StatefulSet", "agent-set"), ("Job", "agent-run")):
        sidecar = container(pod_of(find(objects, kind, name)), "actonce")
        assert sidecar["restartPolicy"] == "Always", kind


def test_the_chart_adds_the_same_sidecar_as_the_component(
    by_component: list[Object], by_chart: list[Object]
) -> None:
    # Two renderings of one sidecar: a field changed in one and not the other fails here.
    component_pod = pod_of(find(by_component, "Deployment", "support-agent"))
    chart_pod = pod_of(find(by_chart, "Deployment", "agent"))
    # Each names its settings' ConfigMap its own way (a hash, the release): all else is one.
    component_sidecar, chart_sidecar = (
        container(component_pod, "actonce"),
        container(chart_pod, "actonce"),
    )
    assert settings_of(by_chart)["metadata"]["name"] == "agent-actonce"
    assert settings_of(by_component)["metadata"]["name"].startswith("actonce-")
    for sidecar, objects in ((component_sidecar, by_component), (chart_sidecar, by_chart)):
        (source,) = sidecar.pop("envFrom")
        assert source["configMapRef"]["name"] == settings_of(objects)["metadata"]["name"]
    assert chart_sidecar == component_sidecar

    def ours(pod: Object) -> list[Object]:
        return sorted(
            (v for v in pod["volumes"] if v["name"].startswith("actonce-")),
            key=lambda v: str(v["name"]),
        )

    assert ours(chart_pod) == ours(component_pod)
    assert settings_of(by_chart)["data"] == {
        name: str(value) for name, value in settings_of(by_component)["data"].items()
    }


def settings_of(objects: list[Object]) -> Object:
    (found,) = [o for o in objects if o["kind"] == "ConfigMap"]
    return found


def test_the_chart_without_a_ledger_secret_keeps_the_ledger_in_the_pod(tmp_path: Path) -> None:
    # Only for agents that use no steps, as overlays/pod-local-ledger.
    objects = helm_template(
        HELM_CHARTS / "examples" / "agent",
        tmp_path,
        values={"actonce": {"secrets": {"auditDsn": ""}}},
    )
    pod = pod_of(find(objects, "Deployment", "agent"))
    env = sidecar_env(objects, pod)
    assert "ACTONCE_AUDIT_DSN_FILE" not in env
    assert "actonce-audit-dsn" not in {v["name"] for v in pod["volumes"]}
    validate_strict(objects)
