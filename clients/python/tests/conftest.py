"""A real `actonce serve` for the tests: a free loopback port, data in a
temporary folder, ready once its health service says SERVING."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from actonce_client import Client

SEND_RULE = "allowed-sender"


def _actonce_binary() -> str:
    # The command installed beside this interpreter (the repository's venv).
    return os.environ.get("ACTONCE_BIN") or str(Path(sys.executable).parent / "actonce")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _wait_serving(target: str, process: subprocess.Popen[bytes], limit: float) -> None:
    with grpc.insecure_channel(target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        request = health_pb2.HealthCheckRequest(service="actonce.v1.RunActionsService")
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"actonce serve exited with {process.returncode}")
            try:
                answer = health.Check(request, timeout=1)
            except grpc.RpcError:
                answer = None
            if answer is not None and answer.status == health_pb2.HealthCheckResponse.SERVING:
                return
            time.sleep(0.1)
    raise RuntimeError(f"actonce serve at {target} was not SERVING within {limit}s")


@pytest.fixture(scope="session")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    address = f"127.0.0.1:{_free_port()}"
    data = tmp_path_factory.mktemp("sidecar")
    log_path = data / "sidecar.log"
    log = log_path.open("wb")
    process = subprocess.Popen(
        [_actonce_binary(), "serve", "--listen", address, "--data-dir", str(data),
         "--send-allowlist", SEND_RULE, "--log-format", "json", "--log-level", "warning"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        try:
            _wait_serving(address, process, limit=30)
        except RuntimeError as error:
            raise RuntimeError(f"{error}\n{log_path.read_text()}") from None
        yield address
    finally:
        process.kill()
        process.wait()
        log.close()


@pytest.fixture
def client(target: str) -> Iterator[Client]:
    with Client(target) as client:
        yield client
