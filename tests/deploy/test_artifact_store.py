"""The cluster's artifact store (deploy/kubernetes/artifact-store) and the sidecar the
Component adds, each started as a real process with the environment its manifest gives it:
the store serves TLS alone and refuses calls without its token; the sidecar reaches it with
the CA and the token from its own Secret.

Only what this machine cannot be is changed: the pod's address is loopback, ports are free
ones, the mounted Secrets are files in a temporary folder, and the sidecar dials the store at
127.0.0.1 (which the test certificate names, as the real one names the Service).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from actonce_api.store.v1 import artifact_store_pb2 as spb
from actonce_api.store.v1 import artifact_store_pb2_grpc as spb_grpc
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc
from grpc_health.v1 import health_pb2

from tests.deploy.render import (
    KUBE,
    Object,
    container,
    environment,
    find,
    kustomize,
    mounted,
    pod_of,
)
from tests.harness import free_port
from tests.helpers.env import scrubbed_env
from tests.helpers.health import HealthStub
from tests.helpers.postgres import fresh_database
from tests.server.pki import Pki, make_pki

STORE_TOKEN = b"store-token-from-the-secret\n"
API_TOKEN = b"api-token-from-the-secret\n"


@pytest.fixture(scope="module")
def store_objects() -> list[Object]:
    return kustomize(KUBE / "artifact-store")


@dataclass
class Process:
    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text()[-3000:]


def start(command: list[str], env: Mapping[str, str], log: Path) -> Process:
    # The image's `actonce` is this checkout's, run by this interpreter.
    assert command[0] == "actonce", command
    args = [sys.executable, "-m", "sidecar.cli", *command[1:]]
    with log.open("ab") as out:
        process = subprocess.Popen(args, stdout=out, stderr=out, env=scrubbed_env(env))
    return Process(process, log)


def wait_serving(channel: grpc.Channel, running: Process, timeout: float = 30.0) -> None:
    stub = HealthStub(channel)
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        assert running.process.poll() is None, f"it exited: {running.output()}"
        try:
            answer = stub.Check(health_pb2.HealthCheckRequest(), timeout=1)
            if answer.status == health_pb2.HealthCheckResponse.SERVING:
                return
            last = str(answer.status)
        except grpc.RpcError as error:
            last = error.code().name
        time.sleep(0.1)
    pytest.fail(f"not SERVING within {timeout} s (last: {last}): {running.output()}")


@dataclass
class Store:
    target: str
    pki: Pki
    running: Process


@pytest.fixture
def store(store_objects: list[Object], tmp_path: Path) -> Iterator[Store]:
    pod = pod_of(find(store_objects, "StatefulSet", "artifact-store"))
    spec = container(pod, "store")
    env = environment(spec, store_objects, field_values={"status.podIP": "127.0.0.1"})
    host, _, port = env["ACTONCE_STORE_LISTEN"].rpartition(":")
    assert host == "127.0.0.1", "bound to the pod's address"
    assert [p["containerPort"] for p in spec["ports"]] == [int(port)]
    pki = make_pki(tmp_path / "pki")
    files = {
        "actonce-store": {"token": STORE_TOKEN},
        "artifact-store-tls": {
            "tls.crt": pki.server_cert.read_bytes(),
            "tls.key": pki.server_key.read_bytes(),
        },
    }
    env = mounted(spec, pod, tmp_path / "store-pod", files, env)
    target = f"127.0.0.1:{free_port()}"
    env["ACTONCE_STORE_LISTEN"] = target
    running = start(spec["command"], env, tmp_path / "store.log")
    try:
        with tls_channel(target, pki) as channel:
            wait_serving(channel, running)
        yield Store(target, pki, running)
    finally:
        running.process.kill()
        running.process.wait(10)


def tls_channel(target: str, pki: Pki) -> grpc.Channel:
    credentials = grpc.ssl_channel_credentials(root_certificates=pki.ca.read_bytes())
    return grpc.secure_channel(target, credentials)


def get_missing(channel: grpc.Channel, token: bytes | None) -> grpc.StatusCode:
    stub = spb_grpc.ArtifactStoreServiceStub(channel)
    metadata = (("authorization", f"Bearer {token.decode().strip()}"),) if token else ()
    try:
        stub.GetArtifact(
            spb.GetArtifactRequest(artifact_id="no-such-artifact"), metadata=metadata, timeout=5
        )
    except grpc.RpcError as error:
        return error.code()
    return grpc.StatusCode.OK


def test_the_store_serves_tls_only_and_refuses_calls_without_its_token(store: Store) -> None:
    with tls_channel(store.target, store.pki) as channel:
        assert get_missing(channel, None) == grpc.StatusCode.PERMISSION_DENIED
        assert get_missing(channel, b"another-token") == grpc.StatusCode.PERMISSION_DENIED
        # With the Secret's token the store answers the call itself.
        assert get_missing(channel, STORE_TOKEN) == grpc.StatusCode.NOT_FOUND
    with grpc.insecure_channel(store.target) as plaintext:
        assert get_missing(plaintext, STORE_TOKEN) == grpc.StatusCode.UNAVAILABLE


def test_the_sidecars_point_at_the_store_s_service_and_are_admitted_by_its_policy(
    store_objects: list[Object],
) -> None:
    service = find(store_objects, "Service", "artifact-store")
    statefulset = find(store_objects, "StatefulSet", "artifact-store")
    (port,) = service["spec"]["ports"]
    (declared,) = container(pod_of(statefulset), "store")["ports"]
    assert port["targetPort"] == declared["name"]
    name = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc.cluster.local"
    base = kustomize(KUBE / "base")
    (settings,) = [o for o in base if o["kind"] == "ConfigMap"]  # actonce-<hash of its values>
    target = settings["data"]["ACTONCE_STORE_TARGET"]
    assert target == f"{name}:{port['port']}"
    assert (
        service["spec"]["selector"].items()
        <= statefulset["spec"]["template"]["metadata"]["labels"].items()
    )
    # Its policy admits the pods the Component labels, to the store's port alone.
    policy = find(store_objects, "NetworkPolicy", "artifact-store")["spec"]
    (rule,) = policy["ingress"]
    (peer,) = rule["from"]
    agent_labels = find(base, "Deployment", "agent")["spec"]["template"]["metadata"]["labels"]
    assert peer["podSelector"]["matchLabels"].items() <= agent_labels.items()
    assert [p["port"] for p in rule["ports"]] == [declared["containerPort"]]
    assert policy["policyTypes"] == ["Ingress", "Egress"] and "egress" not in policy
    # The probes ask the port the store listens on (the kubelet's gRPC probe has no TLS).
    pod = pod_of(statefulset)
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container(pod, "store")[probe]["tcpSocket"]["port"] == declared["containerPort"]


def test_a_sidecar_configured_as_the_component_configures_it_writes_to_that_store(
    store: Store, tmp_path: Path
) -> None:
    base = kustomize(KUBE / "base")
    pod = pod_of(find(base, "Deployment", "agent"))
    spec = container(pod, "actonce")
    env = environment(spec, base, field_values={"status.podIP": "127.0.0.1"})
    files = {
        "actonce-api-token": {"token": API_TOKEN},
        "actonce-store": {"token": STORE_TOKEN, "ca.crt": store.pki.ca.read_bytes()},
        "actonce-audit-dsn": {
            "dsn": (fresh_database("deploy") + "\n").encode(),
            "ca.crt": store.pki.ca.read_bytes(),
        },
    }
    env = mounted(spec, pod, tmp_path / "agent-pod", files, env)
    health, listen = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    env.update(
        ACTONCE_HEALTH_LISTEN=health,
        ACTONCE_METRICS_LISTEN=f"127.0.0.1:{free_port()}",
        ACTONCE_LISTEN=listen,
        ACTONCE_STORE_TARGET=store.target,
    )
    # The image's entrypoint, `actonce serve`, with nothing but the environment.
    running = start(["actonce", "serve"], env, tmp_path / "sidecar.log")
    try:
        with grpc.insecure_channel(health) as probes:
            wait_serving(probes, running)
        with grpc.insecure_channel(listen) as channel:
            stub = pb_grpc.RunActionsServiceStub(channel)
            token = (("authorization", f"Bearer {API_TOKEN.decode().strip()}"),)
            attempt = stub.BeginAttempt(
                pb.BeginAttemptRequest(run_id="r", rule=env["ACTONCE_RULES"], checkpoint="c"),
                metadata=token,
            ).attempt_id
            created = stub.Create(
                pb.CreateRequest(attempt_id=attempt, kind="ticket", data_json='{"a": 1}'),
                metadata=token,
            )
            with pytest.raises(grpc.RpcError) as refused:
                stub.BeginAttempt(pb.BeginAttemptRequest(run_id="r2", rule="triage"))
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with tls_channel(store.target, store.pki) as channel:
            found = spb_grpc.ArtifactStoreServiceStub(channel).GetArtifact(
                spb.GetArtifactRequest(artifact_id=created.id),
                metadata=(("authorization", f"Bearer {STORE_TOKEN.decode().strip()}"),),
            )
        assert json.loads(found.artifact.data_json) == {"a": 1}
    finally:
        running.process.kill()
        running.process.wait(10)
