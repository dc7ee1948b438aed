"""The reference store over real gRPC: loopback port 0, Unix sockets, and the CLI's loop.

The round trip, the refusal table and the CLI's loop run on both backends (`store_place`, see
conftest.py); the rest is about the server, whatever its backend, and runs on SQLite.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
import structlog
from actonce_api.store.v1 import artifact_store_pb2 as pb
from actonce_api.store.v1 import artifact_store_pb2_grpc as pb_grpc
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from sidecar.refstore.backend import StoreBackend
from sidecar.refstore.server import (
    MAX_MESSAGE_BYTES,
    SERVICE_NAME,
    create_store_server,
    open_store_backend,
)
from sidecar.refstore.servicer import ArtifactStoreServicer
from sidecar.refstore.sqlite import SqliteStoreBackend
from tests.helpers.health import AsyncHealthStub, HealthStub
from tests.refstore.conftest import StorePlace

REPO = Path(__file__).resolve().parents[2]
T = TypeVar("T")
Stub = Any  # the generated stub is untyped


def run(coroutine: Awaitable[T]) -> T:
    async def wrapped() -> T:
        return await coroutine

    return asyncio.run(wrapped())


@dataclass
class Store:
    port: int
    channel: grpc.aio.Channel
    stub: Stub


@asynccontextmanager
async def running_store(
    tmp_path: Path,
    *,
    token: str | None = None,
    listen: str = "127.0.0.1:0",
    backend: StoreBackend | None = None,
) -> AsyncIterator[Store]:
    """A started store on `backend` (default: SQLite in `tmp_path`), closed afterwards."""
    if backend is None:
        backend = SqliteStoreBackend(tmp_path / "store.db")
    server, port = await create_store_server(backend, listen, token=token)
    await server.start()
    target = listen if listen.startswith("unix:") else f"127.0.0.1:{port}"
    # The client's own limit is raised so that only the server's limit is under test.
    channel = grpc.aio.insecure_channel(
        target,
        options=[
            ("grpc.max_receive_message_length", 64 * 1024 * 1024),
            ("grpc.max_send_message_length", 64 * 1024 * 1024),
        ],
    )
    try:
        yield Store(port, channel, pb_grpc.ArtifactStoreServiceStub(channel))
    finally:
        await channel.close()
        await server.stop(None)
        backend.close()


def error_info(error: grpc.aio.AioRpcError) -> error_details_pb2.ErrorInfo:
    """The ErrorInfo of a refused call, read from its rich status trailer."""
    details = [
        value
        for key, value in (error.trailing_metadata() or ())
        if key == "grpc-status-details-bin"
    ]
    assert len(details) == 1 and isinstance(details[0], bytes)
    status = status_pb2.Status.FromString(details[0])
    assert status.code == error.code().value[0]
    assert status.message == error.details()
    assert len(status.details) == 1
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    return info


async def create_artifact(stub: Stub, artifact_id: str, data: object = None) -> None:
    await stub.CreateArtifact(
        pb.CreateArtifactRequest(
            artifact_id=artifact_id, kind="note", data_json=json.dumps(data or {})
        )
    )


def test_every_rpc_of_the_contract_is_served() -> None:
    service = pb.DESCRIPTOR.services_by_name["ArtifactStoreService"]
    assert service.full_name == SERVICE_NAME
    for method in service.methods:
        implementation = getattr(ArtifactStoreServicer, method.name)
        assert implementation is not getattr(pb_grpc.ArtifactStoreServiceServicer, method.name)
        assert inspect.iscoroutinefunction(implementation), method.name


def test_a_round_trip_through_every_rpc(tmp_path: Path, store_place: StorePlace) -> None:
    async def scenario() -> None:
        async with running_store(tmp_path, backend=store_place.open()) as store:
            stub = store.stub
            created = await stub.CreateArtifact(
                pb.CreateArtifactRequest(artifact_id="a2", kind="note", data_json='{"n": 1}')
            )
            assert created.artifact == pb.StoredArtifact(
                id="a2", kind="note", version=1, data_json='{"n":1}'
            )
            await create_artifact(stub, "a1")
            await create_artifact(stub, "a3")

            patched = await stub.PatchArtifact(
                pb.PatchArtifactRequest(
                    artifact_id="a2",
                    expected_version=1,
                    patch_json='[{"op": "replace", "path": "/n", "value": 2}]',
                )
            )
            assert (patched.artifact.version, patched.artifact.data_json) == (2, '{"n":2}')
            read = await stub.GetArtifact(pb.GetArtifactRequest(artifact_id="a2"))
            assert read.artifact == patched.artifact

            archived = await stub.ArchiveArtifact(pb.ArchiveArtifactRequest(artifact_id="a3"))
            assert archived.artifact.archived

            first = await stub.ListArtifacts(pb.ListArtifactsRequest(kind="note", page_size=2))
            assert [a.id for a in first.artifacts] == ["a1", "a2"]
            assert first.next_page_token
            rest = await stub.ListArtifacts(
                pb.ListArtifactsRequest(kind="note", page_size=2, page_token=first.next_page_token)
            )
            assert [(a.id, a.archived) for a in rest.artifacts] == [("a3", True)]
            assert rest.next_page_token == ""

            proposal = await stub.CreateProposal(
                pb.CreateProposalRequest(
                    proposal_id="p1", artifact_id="a2", patch_json="[]", base_version=2
                )
            )
            assert proposal.proposal_id == "p1"
            recorded = await stub.GetProposal(pb.GetProposalRequest(proposal_id="p1"))
            assert recorded == pb.GetProposalResponse(
                proposal_id="p1", artifact_id="a2", patch_json="[]", base_version=2
            )

            thread = await stub.CreateThread(
                pb.CreateThreadRequest(thread_id="t1", title="Standup")
            )
            assert thread.thread_id == "t1"
            notice = await stub.PostMessage(
                pb.PostMessageRequest(message_id="n1", thread_id="t1", kind="notice", text="fyi")
            )
            assert notice.message == pb.StoredMessage(
                id="n1", thread_id="t1", kind="notice", text="fyi", seq=1
            )
            await stub.PostMessage(
                pb.PostMessageRequest(
                    message_id="m1",
                    thread_id="t1",
                    kind="message",
                    text="please",
                    request_turn=True,
                )
            )
            await stub.PostMessage(
                pb.PostMessageRequest(message_id="m2", thread_id="t1", kind="message", text="2")
            )
            messages = await stub.ListMessages(pb.ListMessagesRequest(thread_id="t1"))
            assert [(m.id, m.seq) for m in messages.messages] == [("n1", 1), ("m1", 2), ("m2", 3)]

            repeat = await stub.RequestTurn(pb.RequestTurnRequest(message_id="m1"))
            assert repeat.created is False
            fresh = await stub.RequestTurn(pb.RequestTurnRequest(message_id="m2"))
            assert fresh.created is True
            turns = await stub.ListTurnRequests(pb.ListTurnRequestsRequest(thread_id="t1"))
            assert list(turns.message_ids) == ["m1", "m2"]

    run(scenario())


async def _nothing(stub: Stub) -> None:
    pass


async def _one_artifact(stub: Stub) -> None:
    await create_artifact(stub, "a1", {"n": 1})


async def _archived_artifact_with_proposal(stub: Stub) -> None:
    await create_artifact(stub, "a1")
    await stub.CreateProposal(
        pb.CreateProposalRequest(
            proposal_id="p1", artifact_id="a1", patch_json="[]", base_version=1
        )
    )
    await stub.ArchiveArtifact(pb.ArchiveArtifactRequest(artifact_id="a1"))


def _propose_edit(proposal_id: str) -> Callable[[Stub], Awaitable[object]]:
    def call(stub: Stub) -> Awaitable[object]:
        return stub.CreateProposal(  # type: ignore[no-any-return]
            pb.CreateProposalRequest(
                proposal_id=proposal_id, artifact_id="a1", patch_json="[]", base_version=1
            )
        )

    return call


REFUSALS = [
    pytest.param(
        _nothing,
        lambda stub: stub.GetArtifact(pb.GetArtifactRequest(artifact_id="nope")),
        grpc.StatusCode.NOT_FOUND,
        "NOT_FOUND",
        None,
        id="not-found",
    ),
    pytest.param(
        _one_artifact,
        lambda stub: stub.PatchArtifact(
            pb.PatchArtifactRequest(artifact_id="a1", expected_version=2, patch_json="[]")
        ),
        grpc.StatusCode.ABORTED,
        "VERSION_CONFLICT",
        None,
        id="version-conflict",
    ),
    pytest.param(
        _nothing,
        lambda stub: stub.CreateArtifact(
            pb.CreateArtifactRequest(artifact_id="a1", kind="note", data_json="{nope")
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "VALIDATION_FAILED",
        None,
        id="validation-failed",
    ),
    pytest.param(
        _one_artifact,
        lambda stub: stub.PatchArtifact(
            pb.PatchArtifactRequest(
                artifact_id="a1",
                expected_version=1,
                patch_json='[{"op": "add", "path": "/no/parent", "value": 1}]',
            )
        ),
        grpc.StatusCode.FAILED_PRECONDITION,
        "PATCH_FAILED",
        None,
        id="patch-failed",
    ),
    pytest.param(
        _one_artifact,
        lambda stub: stub.CreateArtifact(
            pb.CreateArtifactRequest(artifact_id="a1", kind="note", data_json="{}")
        ),
        grpc.StatusCode.ALREADY_EXISTS,
        "INVALID_STATE",
        "ID_USED",
        id="id-used",
    ),
    pytest.param(
        _archived_artifact_with_proposal,
        _propose_edit("p2"),
        grpc.StatusCode.FAILED_PRECONDITION,
        "INVALID_STATE",
        "ARCHIVED",
        id="archived",
    ),
    pytest.param(
        _archived_artifact_with_proposal,
        _propose_edit("p1"),
        grpc.StatusCode.FAILED_PRECONDITION,
        "INVALID_STATE",
        "ARCHIVED,ID_USED",
        id="archived-and-id-used",
    ),
]


@pytest.mark.parametrize(("setup", "call", "status_code", "reason", "states"), REFUSALS)
def test_a_refusal_arrives_as_its_status_with_error_info(
    tmp_path: Path,
    store_place: StorePlace,
    setup: Callable[[Stub], Awaitable[None]],
    call: Callable[[Stub], Awaitable[object]],
    status_code: grpc.StatusCode,
    reason: str,
    states: str | None,
) -> None:
    async def scenario() -> grpc.aio.AioRpcError:
        async with running_store(tmp_path, backend=store_place.open()) as store:
            await setup(store.stub)
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await call(store.stub)
            return caught.value

    error = run(scenario())
    assert error.code() == status_code
    info = error_info(error)
    assert info.reason == reason
    assert info.domain == "store.actonce"
    assert dict(info.metadata) == ({} if states is None else {"states": states})


def test_a_token_is_required_when_set(tmp_path: Path) -> None:
    request = pb.GetArtifactRequest(artifact_id="a1")

    async def scenario() -> list[grpc.aio.AioRpcError]:
        errors: list[grpc.aio.AioRpcError] = []
        async with running_store(tmp_path, token="s3cret") as store:
            for metadata in [
                None,
                (("authorization", "Bearer wrong"),),
                (("authorization", "s3cret"),),
                (("authorization", "Bearer s3cret-and-more"),),
                (("authorization", "Bearer s3cret"), ("authorization", "Bearer s3cret")),
            ]:
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await store.stub.CreateArtifact(
                        pb.CreateArtifactRequest(artifact_id="a1", kind="k", data_json="{}"),
                        metadata=metadata,
                    )
                errors.append(caught.value)

            good = (("authorization", "Bearer s3cret"),)
            # Nothing was written by the refused calls: the id is still free.
            with pytest.raises(grpc.aio.AioRpcError) as missing:
                await store.stub.GetArtifact(request, metadata=good)
            assert missing.value.code() == grpc.StatusCode.NOT_FOUND
            await store.stub.CreateArtifact(
                pb.CreateArtifactRequest(artifact_id="a1", kind="k", data_json="{}"),
                metadata=good,
            )
            read = await store.stub.GetArtifact(request, metadata=good)
            assert read.artifact.id == "a1"

            # Probes carry no credentials: health stays open.
            health = AsyncHealthStub(store.channel)
            answer = await health.Check(health_pb2.HealthCheckRequest(service=SERVICE_NAME))
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
        return errors

    for error in run(scenario()):
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED
        info = error_info(error)
        assert (info.reason, info.domain, dict(info.metadata)) == (
            "FORBIDDEN",
            "store.actonce",
            {},
        )


def test_an_empty_token_is_refused_at_construction(tmp_path: Path) -> None:
    async def scenario() -> None:
        backend = SqliteStoreBackend(tmp_path / "store.db")
        try:
            with pytest.raises(ValueError, match="token"):
                await create_store_server(backend, token="")
        finally:
            backend.close()

    run(scenario())


def test_a_fault_of_the_store_is_internal_and_logged_without_detail(tmp_path: Path) -> None:
    async def scenario() -> grpc.aio.AioRpcError:
        backend = SqliteStoreBackend(tmp_path / "store.db")
        server, port = await create_store_server(backend)
        await server.start()
        # A closed database is a real fault: not a refusal, nothing the caller did.
        backend.close()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = pb_grpc.ArtifactStoreServiceStub(channel)
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await stub.CreateArtifact(
                        pb.CreateArtifactRequest(
                            artifact_id="a1", kind="k", data_json='{"note": "secret"}'
                        )
                    )
                return caught.value
        finally:
            await server.stop(None)

    with structlog.testing.capture_logs() as logs:
        error = run(scenario())
    assert error.code() == grpc.StatusCode.INTERNAL
    assert "closed" not in (error.details() or "")
    failures = [entry for entry in logs if entry["event"] == "store.failed"]
    assert [entry["rpc"] for entry in failures] == ["create_artifact"]
    assert "secret" not in repr(logs)


def test_health_is_serving_and_reflection_lists_the_service(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_store(tmp_path) as store:
            health = AsyncHealthStub(store.channel)
            for service in ["", SERVICE_NAME]:
                answer = await health.Check(health_pb2.HealthCheckRequest(service=service))
                assert answer.status == health_pb2.HealthCheckResponse.SERVING

            # The reflection package's type stubs know its stub over blocking channels only.
            reflection: Any = reflection_pb2_grpc.ServerReflectionStub(store.channel)  # type: ignore[arg-type]
            requests = [
                reflection_pb2.ServerReflectionRequest(list_services=""),
                reflection_pb2.ServerReflectionRequest(file_containing_symbol=SERVICE_NAME),
            ]
            answers = [answer async for answer in reflection.ServerReflectionInfo(iter(requests))]
            listed = {s.name for s in answers[0].list_services_response.service}
            assert {SERVICE_NAME, "grpc.health.v1.Health"} <= listed
            assert answers[1].file_descriptor_response.file_descriptor_proto

    run(scenario())


def test_messages_up_to_16_mib_are_accepted(tmp_path: Path) -> None:
    # Over gRPC's 4 MiB default, under the store's 16 MiB.
    big = json.dumps({"blob": "x" * (6 * 1024 * 1024)})
    too_big = json.dumps({"blob": "x" * MAX_MESSAGE_BYTES})

    async def scenario() -> None:
        async with running_store(tmp_path) as store:
            await store.stub.CreateArtifact(
                pb.CreateArtifactRequest(artifact_id="big", kind="note", data_json=big)
            )
            read = await store.stub.GetArtifact(pb.GetArtifactRequest(artifact_id="big"))
            assert json.loads(read.artifact.data_json) == json.loads(big)
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await store.stub.CreateArtifact(
                    pb.CreateArtifactRequest(artifact_id="huge", kind="note", data_json=too_big)
                )
            assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED

    run(scenario())


def test_a_unix_socket_binds_with_port_0(tmp_path: Path) -> None:
    async def scenario() -> None:
        backend = SqliteStoreBackend(tmp_path / "store.db")
        listen = f"unix:{tmp_path / 'store.sock'}"
        server, port = await create_store_server(backend, listen)
        assert port == 0
        await server.start()
        try:
            async with grpc.aio.insecure_channel(listen) as channel:
                stub = pb_grpc.ArtifactStoreServiceStub(channel)
                await stub.CreateThread(pb.CreateThreadRequest(thread_id="t1", title="Hi"))
                listed = await stub.ListMessages(pb.ListMessagesRequest(thread_id="t1"))
                assert list(listed.messages) == []
        finally:
            await server.stop(None)
            backend.close()

    run(scenario())


class MethodRecorder(grpc.aio.ServerInterceptor):
    """Records the method of every call it sees, then lets the call through."""

    def __init__(self) -> None:
        self.methods: list[str] = []

    async def intercept_service(self, continuation: Any, details: Any) -> Any:
        self.methods.append(details.method)
        return await continuation(details)


def test_interceptors_see_every_call(tmp_path: Path) -> None:
    recorder = MethodRecorder()

    async def scenario() -> None:
        backend = SqliteStoreBackend(tmp_path / "store.db")
        server, port = await create_store_server(backend, interceptors=[recorder])
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = pb_grpc.ArtifactStoreServiceStub(channel)
                await stub.CreateThread(pb.CreateThreadRequest(thread_id="t1", title="Hi"))
        finally:
            await server.stop(None)
            backend.close()

    run(scenario())
    assert recorder.methods == [f"/{SERVICE_NAME}/CreateThread"]


def test_a_busy_port_is_refused_with_oserror(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_store(tmp_path) as store:
            backend = SqliteStoreBackend(tmp_path / "other.db")
            try:
                with pytest.raises(OSError, match="cannot listen"):
                    await create_store_server(backend, f"127.0.0.1:{store.port}")
            finally:
                backend.close()

    run(scenario())


def test_serve_store_serves_until_sigterm_and_keeps_its_data(
    tmp_path: Path, store_place: StorePlace
) -> None:
    data_dir = tmp_path / "data" / "store"  # does not exist yet
    socket = tmp_path / "s.sock"
    listen = f"unix:{socket}"
    program = (
        "import asyncio, sys\n"
        "from pathlib import Path\n"
        "from sidecar.refstore.server import serve_store\n"
        "asyncio.run(serve_store(sys.argv[1], Path(sys.argv[2]), dsn=sys.argv[3] or None))\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", program, listen, str(data_dir), store_place.dsn or ""],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        with grpc.insecure_channel(listen) as channel:
            grpc.channel_ready_future(channel).result(timeout=30)
            health = HealthStub(channel)
            answer = health.Check(health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=10)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
            stub = pb_grpc.ArtifactStoreServiceStub(channel)
            stub.CreateArtifact(
                pb.CreateArtifactRequest(artifact_id="a1", kind="note", data_json='{"kept": true}'),
                timeout=10,
            )
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, output.decode(errors="replace")
    assert b"store.serving" in output
    assert b"store.stopped" in output
    assert b"kept" not in output  # payloads stay out of the log

    if store_place.dsn is not None:
        # The DSN wins over the data folder, which is then not even created.
        assert not data_dir.exists()
        reopened = store_place.open()
    else:
        reopened = SqliteStoreBackend(data_dir / "store.db")
    try:
        assert reopened.get_artifact("a1").data_json == '{"kept":true}'
    finally:
        reopened.close()


def test_serve_store_exits_on_sigint_too(tmp_path: Path) -> None:
    listen = f"unix:{tmp_path / 's.sock'}"
    program = (
        "import asyncio, sys\n"
        "from pathlib import Path\n"
        "from sidecar.refstore.server import serve_store\n"
        "asyncio.run(serve_store(sys.argv[1], Path(sys.argv[2]), grace_seconds=1))\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", program, listen, str(tmp_path / "data")],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        with grpc.insecure_channel(listen) as channel:
            grpc.channel_ready_future(channel).result(timeout=30)
        os.kill(process.pid, signal.SIGINT)
        output, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, output.decode(errors="replace")
    assert (tmp_path / "data" / "store.db").exists()


def test_a_store_needs_a_data_folder_or_a_dsn() -> None:
    with pytest.raises(ValueError, match="data folder or a PostgreSQL DSN"):
        open_store_backend(None)
