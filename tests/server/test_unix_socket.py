"""`--listen unix:PATH`: the agent reaches the sidecar through a socket file, no port at all."""

from __future__ import annotations

import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc
from actonce_api.v1 import types_pb2

from tests.server.processes import start_cli, wait_for_status


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # A socket's path must fit in 108 bytes; pytest's tmp_path can be longer.
    with tempfile.TemporaryDirectory(prefix="actonce-", dir="/tmp") as folder:
        yield Path(folder)


def test_the_sidecar_serves_on_a_unix_socket(tmp_path: Path, short_dir: Path) -> None:
    socket_path = short_dir / "actonce.sock"
    target = f"unix:{socket_path}"
    served = start_cli(
        tmp_path / "sidecar.log",
        "serve",
        "--listen",
        target,
        "--data-dir",
        str(tmp_path / "data"),
        "--log-format",
        "json",
    )
    try:
        wait_for_status(target, "SERVING", served=served)
        assert socket_path.is_socket()
        with grpc.insecure_channel(target) as channel:
            stub = pb_grpc.RunActionsServiceStub(channel)
            attempt = stub.BeginAttempt(
                pb.BeginAttemptRequest(run_id="r", rule="triage", checkpoint="c")
            ).attempt_id
            answer = stub.Create(
                pb.CreateRequest(attempt_id=attempt, kind="ticket", data_json='{"a": 1}')
            )
            assert answer.outcome == types_pb2.OUTCOME_APPLIED
        served.process.send_signal(signal.SIGTERM)
        assert served.process.wait(15) == 0
        # The socket goes with the server, so the next start can bind it again.
        assert not socket_path.exists()
    finally:
        served.stop()


def test_the_store_and_the_probes_can_be_unix_sockets_too(tmp_path: Path, short_dir: Path) -> None:
    store_socket = f"unix:{short_dir / 'store.sock'}"
    probes = f"unix:{short_dir / 'probes.sock'}"
    store_served = start_cli(
        tmp_path / "store.log",
        "store",
        "--listen",
        store_socket,
        "--data-dir",
        str(tmp_path / "store"),
        "--log-format",
        "json",
    )
    sidecar = start_cli(
        tmp_path / "sidecar.log",
        "serve",
        "--listen",
        f"unix:{short_dir / 'api.sock'}",
        "--health-listen",
        probes,
        "--store-target",
        store_socket,
        "--data-dir",
        str(tmp_path / "data"),
        "--log-format",
        "json",
    )
    try:
        wait_for_status(store_socket, "SERVING", served=store_served)
        # SERVING on the probe socket means the sidecar reached the store through its socket.
        wait_for_status(probes, "SERVING", served=sidecar)
    finally:
        sidecar.stop()
        store_served.stop()
