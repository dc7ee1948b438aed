"""`--listen unix:PATH`: the agent reaches the sidecar through a socket file, no port at all."""

from __future__ import annotations

import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from actonce_api.store.v1 import artifact_store_pb2 as spb
from actonce_api.store.v1 import artifact_store_pb2_grpc as spb_grpc
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc
from actonce_api.v1 import types_pb2

from tests.harness import begin
from tests.server.processes import start_server, wait_for_status


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # A socket's path must fit in 108 bytes; pytest's tmp_path can be longer.
    with tempfile.TemporaryDirectory(prefix="actonce-", dir="/tmp") as folder:
        yield Path(folder)


def test_the_sidecar_serves_on_a_unix_socket(tmp_path: Path, short_dir: Path) -> None:
    socket_path = short_dir / "actonce.sock"
    target = f"unix:{socket_path}"
    served = start_server(tmp_path, "serve", target)
    try:
        wait_for_status(target, "SERVING", served=served)
        assert socket_path.is_socket()
        with grpc.insecure_channel(target) as channel:
            stub = pb_grpc.RunActionsServiceStub(channel)
            attempt = begin(stub, "r", "triage", "c")
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
    store_served = start_server(tmp_path, "store", store_socket, data="store")
    api = f"unix:{short_dir / 'api.sock'}"
    sidecar = start_server(
        tmp_path, "serve", api, "--health-listen", probes, "--store-target", store_socket
    )
    try:
        wait_for_status(store_socket, "SERVING", served=store_served)
        # SERVING on the probe socket means the sidecar reached the store through its socket.
        wait_for_status(probes, "SERVING", served=sidecar)
        assert (short_dir / "probes.sock").is_socket() and (short_dir / "store.sock").is_socket()
        # A write through the API socket lands in the store behind the store's socket.
        with grpc.insecure_channel(api) as channel:
            stub = pb_grpc.RunActionsServiceStub(channel)
            attempt = begin(stub, "r", "triage", "c")
            made = stub.Create(pb.CreateRequest(attempt_id=attempt, kind="ticket", data_json="{}"))
            assert made.outcome == types_pb2.OUTCOME_APPLIED
        with grpc.insecure_channel(store_socket) as channel:
            store = spb_grpc.ArtifactStoreServiceStub(channel)
            stored = store.GetArtifact(spb.GetArtifactRequest(artifact_id=made.id)).artifact
            assert (stored.kind, stored.version) == ("ticket", 1)
    finally:
        sidecar.stop()
        store_served.stop()
