"""The tracing overlay's settings, as they are, sending a real sidecar's spans over TLS to a
receiver that speaks nothing else. Only the collector's address and the CA file's place change
(this machine's loopback and a test CA); the sampling ratio is raised so that the one traced
call is kept."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import grpc
import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc

from tests.deploy.render import KUBE, container, environment, find, kustomize, pod_of
from tests.harness import free_port
from tests.helpers.env import scrubbed_env
from tests.helpers.health import NeverAnswered, wait_serving
from tests.helpers.otlp import OtlpReceiver
from tests.server.pki import Pki, make_pki


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path / "pki")


@pytest.fixture
def tls_receiver(pki: Pki) -> Iterator[OtlpReceiver]:
    credentials = grpc.ssl_server_credentials(
        [(pki.server_key.read_bytes(), pki.server_cert.read_bytes())]
    )
    receiver = OtlpReceiver(credentials=credentials)
    try:
        yield receiver
    finally:
        receiver.stop()


def overlay_otel() -> dict[str, str]:
    objects = kustomize(KUBE / "overlays" / "tracing")
    spec = container(pod_of(find(objects, "Deployment", "agent")), "actonce")
    env = environment(spec, objects, field_values={"status.podIP": "127.0.0.1"})
    return {name: value for name, value in env.items() if name.startswith("OTEL_")}


def test_the_overlay_sends_spans_over_tls_trusting_its_ca(
    tls_receiver: OtlpReceiver, pki: Pki, tmp_path: Path
) -> None:
    otel = overlay_otel()
    endpoint = urlsplit(otel["OTEL_EXPORTER_OTLP_ENDPOINT"])
    assert endpoint.scheme == "https"
    otel |= {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"https://127.0.0.1:{tls_receiver.port}",
        "OTEL_EXPORTER_OTLP_CERTIFICATE": str(pki.ca),
        "OTEL_TRACES_SAMPLER_ARG": "1.0",
        "OTEL_BSP_SCHEDULE_DELAY": "20",
    }
    port = free_port()
    env = {**otel, "ACTONCE_LISTEN": f"127.0.0.1:{port}", "ACTONCE_DATA_DIR": str(tmp_path / "d")}
    log = tmp_path / "sidecar.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "sidecar.cli", "serve"],
            stdout=out,
            stderr=out,
            env=scrubbed_env(env),
        )
    try:
        try:
            wait_serving(f"127.0.0.1:{port}", process)
        except NeverAnswered as never:
            pytest.fail(f"the sidecar did not serve: {never}: {log.read_text()[-2000:]}")
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            pb_grpc.RunActionsServiceStub(channel).BeginAttempt(
                pb.BeginAttemptRequest(run_id="traced-run", rule="triage", checkpoint="c")
            )
        spans = tls_receiver.wait_for(
            lambda spans: any(s.name.endswith("/BeginAttempt") for s in spans)
        )
        assert {s.service for s in spans} == {otel["OTEL_SERVICE_NAME"]}
    finally:
        process.kill()
        process.wait(10)
