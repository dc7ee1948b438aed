"""A store written before owners were recorded keeps working behind this sidecar.

Such a store has no GetOwner (it answers UNIMPLEMENTED, as a gRPC server does for a method it
does not know) and ignores the principal. The sidecar reads its data as unowned: a rule's
reads and writes go on as before, with no STORE_UNAVAILABLE, and the sidecar says once, in
its log, that this store gives no owners' boundary.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import structlog
from actonce_api.store.v1 import artifact_store_pb2 as spb
from actonce_api.store.v1 import artifact_store_pb2_grpc as spb_grpc
from actonce_api.v1 import run_actions_pb2 as pb

from sidecar.refstore.servicer import ArtifactStoreServicer
from sidecar.refstore.sqlite import SqliteStoreBackend
from tests.harness import Loop, sidecar_config, start_sidecar


class BeforeOwners(ArtifactStoreServicer):
    """The reference store as it was: deaf to the principal, and no GetOwner."""

    async def _call(
        self, context: Any, operation: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Any:
        kwargs.pop("principal", None)
        return await super()._call(context, operation, *args, **kwargs)

    async def GetOwner(self, request: spb.GetOwnerRequest, context: Any) -> Any:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")


@pytest.fixture
def old_store(tmp_path: Path) -> Iterator[str]:
    loop = Loop()
    backend = SqliteStoreBackend(tmp_path / "store.db")

    async def build() -> tuple[grpc.aio.Server, int]:
        server = grpc.aio.server()
        spb_grpc.add_ArtifactStoreServiceServicer_to_server(BeforeOwners(backend), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        return server, port

    server, port = loop.run(build())
    try:
        yield f"127.0.0.1:{port}"
    finally:
        loop.run(server.stop(None))
        loop.close()
        backend.close()


def test_a_store_without_get_owner_is_read_as_unowned(old_store: str, tmp_path: Path) -> None:
    sidecar = start_sidecar(sidecar_config(tmp_path / "data", store_target=old_store))
    try:
        with structlog.testing.capture_logs() as logs:
            payments = sidecar.begin("pay-1", "payments")
            thread = sidecar.stub.CreateThread(
                pb.CreateThreadRequest(attempt_id=payments, title="invoice")
            )
            sidecar.stub.Notice(
                pb.NoticeRequest(attempt_id=payments, thread_id=thread.thread_id, text="a")
            )
            chat = sidecar.begin("chat-1", "chat")
            read = sidecar.stub.Read(pb.ReadRequest(attempt_id=chat, thread_id=thread.thread_id))
            sidecar.stub.Notice(
                pb.NoticeRequest(attempt_id=chat, thread_id=thread.thread_id, text="b")
            )
    finally:
        sidecar.stop()
    assert [m.text for m in read.messages] == ["a"]  # as every store before owners answered
    said = [line for line in logs if line["event"] == "store_records_no_owners"]
    assert len(said) == 1 and said[0]["log_level"] == "warning"
