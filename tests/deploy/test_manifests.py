"""What the pod promises: a native sidecar, probes on the port that answers them, a locked-down
container, settings the sidecar accepts, secrets as files, and an image that matches.

`make test-deploy` checks the manifests against Kubernetes' schemas; these tests check what a
schema cannot: that the pieces agree with each other and with the sidecar's own settings.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from sidecar.cli import SERVE_SETTINGS

REPO = Path(__file__).resolve().parents[2]
KUBE = REPO / "deploy" / "kubernetes"


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="module")
def pod() -> dict[str, Any]:
    deployment = load(KUBE / "base" / "deployment.yaml")
    assert deployment["kind"] == "Deployment"
    return dict(deployment["spec"]["template"]["spec"])


@pytest.fixture(scope="module")
def sidecar(pod: dict[str, Any]) -> dict[str, Any]:
    (container,) = [c for c in pod["initContainers"] if c["name"] == "actonce"]
    return dict(container)


@pytest.fixture(scope="module")
def settings() -> dict[str, str]:
    return dict(load(KUBE / "base" / "configmap.yaml")["data"])


def port_of(listen: str) -> int:
    return int(listen.rpartition(":")[2])


def test_actonce_is_a_native_sidecar_that_starts_before_the_agent(
    pod: dict[str, Any], sidecar: dict[str, Any]
) -> None:
    assert sidecar["restartPolicy"] == "Always"
    assert "startupProbe" in sidecar, "without it the agent may start before actonce serves"
    assert [c["name"] for c in pod["containers"]] == ["agent"]


def test_the_probes_ask_grpc_health_on_the_port_that_answers_it(
    sidecar: dict[str, Any], settings: dict[str, str]
) -> None:
    health_port = port_of(settings["ACTONCE_HEALTH_LISTEN"])
    assert not settings["ACTONCE_HEALTH_LISTEN"].startswith("127."), "the kubelet is not local"
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert sidecar[probe]["grpc"]["port"] == health_port, probe
    # Readiness follows the ledger and the store; liveness only the process.
    assert sidecar["readinessProbe"]["grpc"].get("service", "") == ""
    assert sidecar["livenessProbe"]["grpc"]["service"] == "liveness"
    declared = {p["containerPort"] for p in sidecar["ports"]}
    assert {health_port, port_of(settings["ACTONCE_METRICS_LISTEN"])} <= declared


def test_the_agent_api_stays_on_loopback_and_the_agent_is_pointed_at_it(
    pod: dict[str, Any], settings: dict[str, str]
) -> None:
    assert settings["ACTONCE_LISTEN"].startswith("127.0.0.1:")
    (agent,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in agent["env"]}
    assert env["ACTONCE_TARGET"] == settings["ACTONCE_LISTEN"]
    api_port = port_of(settings["ACTONCE_LISTEN"])
    assert api_port not in {p["containerPort"] for p in agent.get("ports", [])}


@pytest.mark.parametrize("container", ["actonce", "agent"])
def test_every_container_is_locked_down(pod: dict[str, Any], container: str) -> None:
    (spec,) = [c for c in pod["initContainers"] + pod["containers"] if c["name"] == container]
    context = spec["securityContext"]
    assert context["runAsNonRoot"] is True
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"]["drop"] == ["ALL"]
    assert context["seccompProfile"]["type"] == "RuntimeDefault"
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(spec["resources"][kind]), (container, kind)
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert pod["automountServiceAccountToken"] is False


def test_every_setting_in_the_configmap_is_one_the_sidecar_accepts(
    settings: dict[str, str], sidecar: dict[str, Any]
) -> None:
    # The sidecar stops at start on an unknown or malformed ACTONCE_* variable; this
    # finds such a typo before a pod does.
    by_env = {env: parse for env, parse, *_ in SERVE_SETTINGS.values()}
    inline = {e["name"]: e.get("value") for e in sidecar["env"]}
    for name, raw in {**settings, **inline}.items():
        assert name in by_env, f"{name} is no actonce setting"
        if raw and not name.endswith(("_FILE", "_CA", "_CERT", "_KEY")):
            by_env[name](raw)  # raises ValueError on a malformed value


def test_the_operator_pins_the_rules_the_sidecar_serves(settings: dict[str, str]) -> None:
    # Unset, the agent names its own rule, and with it what the send allowlist grants.
    rules = SERVE_SETTINGS["--rules"][1](settings["ACTONCE_RULES"])
    assert rules, "ACTONCE_RULES names no rule"
    allowed = {r.strip() for r in settings["ACTONCE_SEND_ALLOWLIST"].split(",") if r.strip()}
    assert allowed <= rules, "a rule allowed to Send that the sidecar does not serve"


def test_the_token_and_the_ca_are_files_from_the_secret(
    pod: dict[str, Any], sidecar: dict[str, Any]
) -> None:
    env = {e["name"]: e for e in sidecar["env"]}
    mounts = {m["name"]: m for m in sidecar["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    secret_mount = mounts["store-credentials"]
    assert secret_mount["readOnly"] is True
    items = {i["path"] for i in volumes["store-credentials"]["secret"]["items"]}
    for name in ("ACTONCE_STORE_TOKEN_FILE", "ACTONCE_STORE_TLS_CA"):
        path = Path(env[name]["value"])
        assert path.parent == Path(secret_mount["mountPath"]), name
        assert path.name in items, name
    # No setting carries a secret's value in the pod spec.
    assert not any("TOKEN" in name and "valueFrom" not in e and not name.endswith("_FILE")
                   for name, e in env.items())  # fmt: skip


def test_the_agent_and_its_sidecar_read_one_api_token_from_a_secret(
    pod: dict[str, Any], sidecar: dict[str, Any]
) -> None:
    (agent,) = pod["containers"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    secret = volumes["api-token"]["secret"]
    example = load(KUBE / "examples" / "api-token-secret.yaml")
    assert secret["secretName"] == example["metadata"]["name"]
    assert {i["key"] for i in secret["items"]} <= set(example["stringData"])
    paths = set()
    for container in (sidecar, agent):
        env = {e["name"]: e.get("value") for e in container["env"]}
        mount = {m["name"]: m for m in container["volumeMounts"]}["api-token"]
        assert mount["readOnly"] is True
        path = Path(env["ACTONCE_API_TOKEN_FILE"])
        assert path.parent == Path(mount["mountPath"])
        assert path.name in {i["path"] for i in secret["items"]}
        paths.add(path)
    assert len(paths) == 1, "the agent sends the token the sidecar expects"
    # Readable by the pod's user through its group, by nobody else.
    assert secret["defaultMode"] == 0o440 and pod["securityContext"]["fsGroup"]


def test_the_data_volume_is_where_the_image_keeps_its_data(
    pod: dict[str, Any], sidecar: dict[str, Any]
) -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    image_data_dir = re.search(r"ACTONCE_DATA_DIR=(\S+)", dockerfile)
    assert image_data_dir is not None
    (data,) = [m for m in sidecar["volumeMounts"] if m["name"] == "data"]
    assert data["mountPath"] == image_data_dir.group(1)
    assert f'VOLUME ["{data["mountPath"]}"]' in dockerfile
    assert "emptyDir" in {v["name"]: v for v in pod["volumes"]}["data"]


def test_the_pod_runs_as_the_user_the_image_declares(pod: dict[str, Any]) -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    user = re.search(r"^USER (\d+):(\d+)$", dockerfile, re.MULTILINE)
    assert user is not None, "the image's user must be numeric for runAsNonRoot"
    assert pod["securityContext"]["runAsUser"] == int(user.group(1))
    assert pod["securityContext"]["runAsGroup"] == int(user.group(2))
    assert 'ENTRYPOINT ["actonce", "serve"]' in dockerfile


def test_the_drain_fits_in_the_termination_grace_period(
    pod: dict[str, Any], settings: dict[str, str]
) -> None:
    assert float(settings["ACTONCE_GRACE_PERIOD"]) < pod["terminationGracePeriodSeconds"]


def test_the_base_keeps_the_ledger_where_it_outlives_the_pod(
    sidecar: dict[str, Any], settings: dict[str, str]
) -> None:
    # At most once for a non-idempotent step is decided from the ledger: every sidecar that can
    # run an attempt of the run (another replica, this pod's replacement) must read the same
    # one. By default that is PostgreSQL, its DSN (which holds a password) from a Secret.
    env = {e["name"]: e for e in sidecar["env"]}
    dsn = env["ACTONCE_AUDIT_DSN"]
    assert "value" not in dsn
    assert dsn["valueFrom"]["secretKeyRef"] == {"name": "actonce-audit-dsn", "key": "dsn"}
    assert "ACTONCE_AUDIT_DSN" in {env for env, *_ in SERVE_SETTINGS.values()}
    assert not {"ACTONCE_AUDIT_DSN", "ACTONCE_AUDIT_DB"} & set(settings)
    example = load(KUBE / "examples" / "audit-dsn-secret.yaml")
    assert example["metadata"]["name"] == "actonce-audit-dsn" and "dsn" in example["stringData"]


def test_a_ledger_that_goes_with_the_pod_is_an_overlay_that_says_it_is_not_for_steps() -> None:
    overlay = KUBE / "overlays" / "pod-local-ledger"
    kustomization = load(overlay / "kustomization.yaml")
    assert "../../base" in kustomization["resources"]
    warning = (overlay / "kustomization.yaml").read_text().splitlines()[0]
    assert (
        warning
        == "# ONLY FOR AGENTS THAT USE NO STEPS (BeginStep/EndStep, or the MCP gateway's tools)."
    )
    (patch_ref,) = kustomization["patches"]
    patch = load(overlay / patch_ref["path"])
    (container,) = patch["spec"]["template"]["spec"]["initContainers"]
    assert container["name"] == "actonce"
    assert container["env"] == [{"name": "ACTONCE_AUDIT_DSN", "$patch": "delete"}]


@pytest.fixture(scope="module")
def prune_job() -> dict[str, Any]:
    folder = KUBE / "audit-prune"
    kustomization = load(folder / "kustomization.yaml")
    assert kustomization["resources"] == ["exports-pvc.yaml", "cronjob.yaml"]
    cronjob = load(folder / "cronjob.yaml")
    assert cronjob["kind"] == "CronJob"
    return dict(cronjob)


def test_the_prune_cronjob_runs_audit_prune_against_the_shared_ledger(
    prune_job: dict[str, Any], tmp_path: Path
) -> None:
    from sidecar.cli import build_parser

    pod = prune_job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    # The same ledger as the sidecars: the DSN from the Secret the base reads.
    env = {e["name"]: e for e in container["env"]}
    assert env["ACTONCE_AUDIT_DSN"]["valueFrom"]["secretKeyRef"] == {
        "name": "actonce-audit-dsn", "key": "dsn"}  # fmt: skip
    # The command is one the CLI takes, and it exports onto the exports volume.
    shell, flag, script = container["command"]
    assert (shell, flag) == ("/bin/sh", "-c")
    words = shlex.split(script.replace("$(date -u +%Y%m%dT%H%M%SZ)", "20261130T031700Z"))
    assert words[:2] == ["exec", "actonce"]
    args = build_parser().parse_args(words[2:])
    assert (args.command, args.audit_command) == ("audit", "prune")
    from sidecar.ledger.retention import parse_before

    parse_before(args.before)
    (mount,) = container["volumeMounts"]
    assert args.export.parent == Path(mount["mountPath"])
    (volume,) = pod["volumes"]
    assert volume["name"] == mount["name"]
    claim = load(KUBE / "audit-prune" / "exports-pvc.yaml")
    assert volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    # A second prune never overlaps a running one, and a failed one is not retried blindly.
    assert prune_job["spec"]["concurrencyPolicy"] == "Forbid"
    assert prune_job["spec"]["jobTemplate"]["spec"]["backoffLimit"] == 0
    assert pod["restartPolicy"] == "Never"


def test_the_prune_cronjob_is_locked_down(prune_job: dict[str, Any]) -> None:
    pod = prune_job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (spec,) = pod["containers"]
    context = spec["securityContext"]
    assert context["runAsNonRoot"] is True
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"]["drop"] == ["ALL"]
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert pod["automountServiceAccountToken"] is False
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(spec["resources"][kind])


def test_traces_are_an_overlay_of_standard_otel_variables_pointing_at_a_collector(
    settings: dict[str, str],
) -> None:
    from sidecar.ops import tracing_settings

    # The base asks for no traces: the sidecar does no tracing work there.
    assert not [name for name in settings if name.startswith("OTEL_")]
    overlay = KUBE / "overlays" / "tracing"
    kustomization = load(overlay / "kustomization.yaml")
    assert "../../base" in kustomization["resources"]
    (patch_ref,) = kustomization["patches"]
    patch = load(overlay / patch_ref["path"])
    assert (patch["kind"], patch["metadata"]["name"]) == ("ConfigMap", "actonce")
    otel = dict(patch["data"])
    assert all(name in tracing_settings.READ for name in otel), otel
    assert tracing_settings.requested(otel)
    tracing_settings.check(otel)  # an exporter and protocol the sidecar offers
    assert otel["OTEL_EXPORTER_OTLP_ENDPOINT"].endswith(":4317")
