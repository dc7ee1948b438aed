"""deploy/kubernetes/quickstart, the first deploy: one apply renders an agent with the sidecar,
the embedded store and a SQLite ledger on a claim, and nothing to create first. Then the
sidecar is run with the environment the kubelet would hand it, and what it wrote is found
again by the sidecar of the pod that replaces it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc
from actonce_api.v1 import types_pb2

from tests.deploy.render import (
    KUBE,
    Object,
    container,
    environment,
    find,
    kustomize,
    mounted,
    pod_of,
    validate_strict,
)
from tests.deploy.test_artifact_store import start, wait_serving
from tests.harness import free_port

QUICKSTART = KUBE / "quickstart"


@pytest.fixture(scope="module")
def objects() -> list[Object]:
    return kustomize(QUICKSTART)


def _secrets_named(value: Any) -> list[str]:
    """Every Secret an object refers to, wherever in it."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, inner in value.items():
            if key in ("secret", "secretRef", "secretKeyRef"):
                found.append(str(inner.get("secretName") or inner.get("name")))
            else:
                found += _secrets_named(inner)
    elif isinstance(value, list):
        for inner in value:
            found += _secrets_named(inner)
    return found


def test_one_apply_needs_no_secret_and_validates_strict(objects: list[Object]) -> None:
    validate_strict(objects)
    assert sorted(o["kind"] for o in objects) == [
        "ConfigMap",
        "Deployment",
        "PersistentVolumeClaim",
    ]
    assert _secrets_named(objects) == [], "a Secret someone would have to create first"


def test_it_says_it_is_the_first_step_and_not_production() -> None:
    head = (QUICKSTART / "kustomization.yaml").read_text().splitlines()[0]
    assert "FIRST STEP" in head and "NOT PRODUCTION" in head


def test_one_agent_with_the_sidecar_its_store_and_its_ledger_on_the_claim(
    objects: list[Object],
) -> None:
    workload = find(objects, "Deployment", "agent")
    # One pod at a time: the claim is ReadWriteOnce, and the ledger one SQLite file.
    assert workload["spec"]["replicas"] == 1
    assert workload["spec"]["strategy"] == {"type": "Recreate"}
    pod = pod_of(workload)
    sidecar = container(pod, "actonce")
    assert sidecar["restartPolicy"] == "Always"
    env = environment(sidecar, objects, field_values={"status.podIP": "10.1.2.3"})
    # The embedded store, and the ledger in the data folder: no DSN, no target, no token.
    assert not {
        "ACTONCE_STORE_TARGET",
        "ACTONCE_STORE_DSN",
        "ACTONCE_AUDIT_DSN",
        "ACTONCE_AUDIT_DSN_FILE",
        "ACTONCE_API_TOKEN_FILE",
        "ACTONCE_STORE_TLS_CA",
    } & set(env)
    (data,) = [m for m in sidecar["volumeMounts"] if m["mountPath"] == env["ACTONCE_DATA_DIR"]]
    (volume,) = [v for v in pod["volumes"] if v["name"] == data["name"]]
    claim = find(objects, "PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert pod["securityContext"]["fsGroup"] == sidecar["securityContext"]["runAsGroup"]
    (agent,) = pod["containers"]
    assert environment(agent, objects, field_values={})["ACTONCE_TARGET"] == env["ACTONCE_LISTEN"]


def _serve(objects: list[Object], pod_root: Path, log: Path) -> tuple[str, Any]:
    """The sidecar of a pod whose claim is ``pod_root``'s, run as the image runs it."""
    pod = pod_of(find(objects, "Deployment", "agent"))
    spec = container(pod, "actonce")
    env = environment(spec, objects, field_values={"status.podIP": "127.0.0.1"})
    env = mounted(spec, pod, pod_root, {}, env)
    # Ports of this machine's choosing: the addresses' hosts stay the manifest's.
    health, listen = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    env.update(
        ACTONCE_HEALTH_LISTEN=health,
        ACTONCE_METRICS_LISTEN=f"127.0.0.1:{free_port()}",
        ACTONCE_LISTEN=listen,
    )
    running = start(["actonce", "serve"], env, log)
    try:
        with grpc.insecure_channel(health) as probes:
            wait_serving(probes, running)
    except BaseException:
        running.process.kill()
        raise
    return listen, running


def _create_once(listen: str, rule: str) -> Any:
    with grpc.insecure_channel(listen) as channel:
        stub = pb_grpc.RunActionsServiceStub(channel)
        attempt = stub.BeginAttempt(
            pb.BeginAttemptRequest(run_id="first-run", rule=rule, checkpoint="c")
        ).attempt_id
        return stub.Create(
            pb.CreateRequest(attempt_id=attempt, kind="ticket", data_json='{"subject": "hi"}')
        )


def test_what_the_sidecar_wrote_outlives_its_pod(objects: list[Object], tmp_path: Path) -> None:
    rule = find(objects, "ConfigMap", _settings_name(objects))["data"]["ACTONCE_RULES"]
    claim = tmp_path / "pod"  # the claim's folder, the same for the pod and its replacement
    listen, first = _serve(objects, claim, tmp_path / "first.log")
    try:
        created = _create_once(listen, rule)
        assert created.outcome == types_pb2.OUTCOME_APPLIED
    finally:
        first.process.kill()
        first.process.wait(10)
    listen, second = _serve(objects, claim, tmp_path / "second.log")
    try:
        again = _create_once(listen, rule)
    finally:
        second.process.kill()
        second.process.wait(10)
    # The redelivered write finds the first one: the store and the ledger were on the claim.
    assert again.id == created.id
    assert again.outcome == types_pb2.OUTCOME_ALREADY_APPLIED


def _settings_name(objects: list[Object]) -> str:
    (settings,) = [o for o in objects if o["kind"] == "ConfigMap"]
    return str(settings["metadata"]["name"])
