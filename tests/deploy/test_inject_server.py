"""`actonce inject` as the API server meets it: a real process serving HTTPS on loopback with a
certificate the test made, answered over TLS checked against that certificate's CA, as the
API server checks it against the webhook configuration's caBundle."""

from __future__ import annotations

import contextlib
import http.client
import json
import shutil
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sidecar.inject.review import answer
from sidecar.inject.template import load
from tests.deploy.test_inject_webhook import admission_review, replica_pod
from tests.harness import free_port
from tests.helpers.env import scrubbed_env
from tests.server.pki import Pki, make_pki

IMAGE = "registry.example.com/actonce:9.9.9"


class Webhook:
    def __init__(self, process: subprocess.Popen[bytes], port: int, pki: Pki) -> None:
        self.process, self.port, self.pki = process, port, pki

    def request(
        self, method: str, path: str, body: bytes | None = None, *, ca: Path | None = None
    ) -> tuple[int, dict[str, object]]:
        context = ssl.create_default_context(cafile=str(ca or self.pki.ca))
        connection = http.client.HTTPSConnection(
            "localhost", self.port, context=context, timeout=10
        )
        try:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            connection.request(method, path, body=body, headers=headers)
            reply = connection.getresponse()
            return reply.status, json.loads(reply.read())
        finally:
            connection.close()


def _wait_healthy(webhook: Webhook, log: Path) -> None:
    # Until it answers, or has exited: each try is a connection refused until it listens.
    for _ in range(600):
        if webhook.process.poll() is not None:
            raise RuntimeError(f"actonce inject exited: {log.read_text()[-2000:]}")
        try:
            if webhook.request("GET", "/healthz")[0] == 200:
                return
        except (ConnectionRefusedError, ssl.SSLError):
            # Not listening yet: wait a moment on the process itself, which ends the wait
            # at once if it exits.
            with contextlib.suppress(subprocess.TimeoutExpired):
                webhook.process.wait(0.05)
    raise RuntimeError(f"actonce inject never answered: {log.read_text()[-2000:]}")


@pytest.fixture
def webhook(tmp_path: Path) -> Iterator[Webhook]:
    pki = make_pki(tmp_path / "pki")
    port = free_port()
    log = tmp_path / "inject.log"
    args = [sys.executable, "-m", "sidecar.cli", "inject", "--listen", f"127.0.0.1:{port}",
            "--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key),
            "--image", IMAGE, "--log-format", "json"]  # fmt: skip
    with log.open("ab") as out:
        process = subprocess.Popen(args, stdout=out, stderr=out, env=scrubbed_env())
    running = Webhook(process, port, pki)
    try:
        _wait_healthy(running, log)
        yield running
    finally:
        process.kill()
        process.wait(10)


def test_it_answers_a_review_over_https_as_the_function_does(webhook: Webhook) -> None:
    pod = replica_pod({"actonce.dev/inject": "true", "actonce.dev/rules": "support"})
    review = admission_review(pod)
    status, reply = webhook.request("POST", "/inject", json.dumps(review).encode())
    assert status == 200
    assert reply == answer(review, load(), image=IMAGE)
    assert reply["response"]["patchType"] == "JSONPatch"  # type: ignore[index]


def test_a_pod_without_the_annotation_is_allowed_unchanged(webhook: Webhook) -> None:
    review = admission_review(replica_pod())
    status, reply = webhook.request("POST", "/inject", json.dumps(review).encode())
    assert status == 200
    assert reply["response"] == {"uid": review["request"]["uid"], "allowed": True}


@pytest.mark.parametrize("body", [b"not json", b'{"kind": "Pod"}'])
def test_what_is_no_review_is_a_bad_request(webhook: Webhook, body: bytes) -> None:
    status, reply = webhook.request("POST", "/inject", body)
    assert status == 400 and "error" in reply


def test_a_renewed_certificate_is_served_without_a_restart(
    webhook: Webhook, tmp_path: Path
) -> None:
    renewed = make_pki(tmp_path / "renewed")
    # As the kubelet updates a Secret's files: the new pair in place of the old.
    shutil.copyfile(renewed.server_key, webhook.pki.server_key)
    shutil.copyfile(renewed.server_cert, webhook.pki.server_cert)
    status, _ = webhook.request("GET", "/healthz", ca=renewed.ca)
    assert status == 200
    with pytest.raises(ssl.SSLCertVerificationError):
        webhook.request("GET", "/healthz", ca=webhook.pki.ca)


def test_it_will_not_serve_without_a_certificate() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sidecar.cli", "inject", "--listen", "127.0.0.1:0"],
        capture_output=True,
        text=True,
        env=scrubbed_env(),
        timeout=60,
    )
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "--tls-cert and --tls-key are required" in line
