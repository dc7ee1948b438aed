"""The in-process store client keeps the gRPC client's contract, refusal for refusal.

Each case makes the same call through both clients to one backend: the gRPC client
reaches it through a real store server on loopback, the in-process client calls it
directly. Both must answer alike, or refuse with the same code, states and message.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from sidecar.errors import StoreDeadlineExceeded, StoreUnavailable
from sidecar.refstore.backend import NewMessage, StoreBackend
from sidecar.refstore.postgres import PostgresStoreBackend
from sidecar.refstore.server import create_store_server
from sidecar.refstore.sqlite import SqliteStoreBackend
from sidecar.store_contract import Refusal
from sidecar.upstream.base import (
    CreateArtifact,
    CreateThread,
    GetArtifact,
    ListMessages,
    PatchArtifact,
    PostMessage,
    ProposePatch,
    StoreClient,
    ping,
)
from sidecar.upstream.grpc import GrpcStoreClient
from sidecar.upstream.inprocess import InProcessStoreClient
from tests.harness import Loop
from tests.helpers import postgres as pg

HOT = '{"title":"disk full","tags":["a"]}'


@dataclass
class Clients:
    """The two clients of one backend, with the loop they run on."""

    backend: StoreBackend
    grpc: GrpcStoreClient
    inprocess: InProcessStoreClient
    loop: Loop

    def both(self, call: Callable[[StoreClient], Awaitable[Any]]) -> tuple[object, object]:
        """What each client answered, or the refusal it raised: (gRPC, in-process)."""

        async def outcome(client: StoreClient) -> object:
            try:
                return await call(client)
            except Refusal as refusal:
                return ("refused", refusal.code, refusal.states, refusal.message)

        return (self.loop.run(outcome(self.grpc)), self.loop.run(outcome(self.inprocess)))


@pytest.fixture(params=["sqlite", "postgres"])
def clients(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Clients]:
    backend: StoreBackend = (
        PostgresStoreBackend(pg.fresh_database("inprocess"))
        if request.param == "postgres"
        else SqliteStoreBackend(tmp_path / "store.db")
    )
    loop = Loop()

    async def start() -> tuple[grpc.aio.Server, GrpcStoreClient, InProcessStoreClient]:
        server, port = await create_store_server(backend, "127.0.0.1:0")
        await server.start()
        return server, GrpcStoreClient.insecure(f"127.0.0.1:{port}"), InProcessStoreClient(backend)

    server, over_grpc, inprocess = loop.run(start())
    try:
        yield Clients(backend, over_grpc, inprocess, loop)
    finally:
        loop.run(over_grpc.close())
        loop.run(inprocess.close())
        loop.run(server.stop(None))
        backend.close()
        loop.close()


def test_answers_are_the_same_messages(clients: Clients) -> None:
    over_grpc = clients.loop.run(clients.grpc.call(CreateArtifact("art-1", "ticket", HOT)))
    inprocess = clients.loop.run(clients.inprocess.call(CreateArtifact("art-2", "ticket", HOT)))
    assert type(inprocess) is type(over_grpc)
    assert (inprocess.kind, inprocess.version, inprocess.data_json, inprocess.archived) == (
        over_grpc.kind, over_grpc.version, over_grpc.data_json, over_grpc.archived,
    )  # fmt: skip
    read = clients.both(lambda c: c.call(GetArtifact("art-2")))
    assert read[0] == read[1] == inprocess


def test_patches_and_messages_answer_alike(clients: Clients) -> None:
    clients.backend.create_artifact("a", "ticket", HOT)
    clients.backend.create_artifact("b", "ticket", HOT)
    clients.backend.create_thread("t", "title")
    patch = '[{"op":"add","path":"/owner","value":"kim"}]'
    over_grpc = clients.loop.run(clients.grpc.call(PatchArtifact("a", 1, patch)))
    inprocess = clients.loop.run(clients.inprocess.call(PatchArtifact("b", 1, patch)))
    assert (over_grpc.version, over_grpc.data_json) == (inprocess.version, inprocess.data_json)
    first = clients.loop.run(
        clients.grpc.call(PostMessage("m1", "t", "notice", "hi", request_turn=False))
    )
    second = clients.loop.run(
        clients.inprocess.call(PostMessage("m2", "t", "notice", "hi", request_turn=False))
    )
    assert (first.seq, second.seq) == (1, 2)
    listed = clients.both(lambda c: c.call(ListMessages("t")))
    assert list(listed[0]) == list(listed[1])  # type: ignore[call-overload]
    assert [m.id for m in listed[1]] == ["m1", "m2"]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "case",
    [
        "used artifact id",
        "used thread id",
        "used message id",
        "stale version",
        "missing artifact",
        "missing thread",
        "not JSON",
        "not an object",
        "patch does not apply",
        "edit of an archived artifact proposed",
        "used proposal id on an archived artifact",
    ],
)
def test_refusals_are_the_same(clients: Clients, case: str) -> None:
    backend = clients.backend
    backend.create_artifact("art", "ticket", HOT)
    backend.create_thread("thr", "title")
    backend.post_message(NewMessage("msg", "thr", "notice", "hello"))
    backend.create_artifact("old", "ticket", HOT)
    backend.archive_artifact("old")
    patch = '[{"op":"add","path":"/x","value":1}]'
    calls: dict[str, Callable[[StoreClient], Awaitable[Any]]] = {
        "used artifact id": lambda c: c.call(CreateArtifact("art", "ticket", HOT)),
        "used thread id": lambda c: c.call(CreateThread("thr", "again")),
        "used message id": lambda c: c.call(
            PostMessage("msg", "thr", "notice", "x", request_turn=False)
        ),
        "stale version": lambda c: c.call(PatchArtifact("art", 7, patch)),
        "missing artifact": lambda c: c.call(GetArtifact("nope")),
        "missing thread": lambda c: c.call(ListMessages("nope")),
        "not JSON": lambda c: c.call(CreateArtifact("new", "ticket", "{nope")),
        "not an object": lambda c: c.call(CreateArtifact("new", "ticket", "[1]")),
        "patch does not apply": lambda c: c.call(
            PatchArtifact("art", 1, '[{"op":"replace","path":"/missing","value":1}]')
        ),
        "edit of an archived artifact proposed": lambda c: c.call(
            ProposePatch("p1", "old", patch, 1)
        ),
        "used proposal id on an archived artifact": lambda c: c.call(
            ProposePatch("p2", "old", patch, 1)
        ),
    }
    if case == "used proposal id on an archived artifact":
        backend.create_proposal("p2", kind="ticket", data_json=HOT)
    over_grpc, inprocess = clients.both(calls[case])
    assert isinstance(over_grpc, tuple) and over_grpc[0] == "refused", over_grpc
    assert inprocess == over_grpc


def test_a_closed_backend_is_unavailable_on_both_paths(clients: Clients) -> None:
    clients.backend.close()
    for client in (clients.grpc, clients.inprocess):
        with pytest.raises(StoreUnavailable):
            clients.loop.run(client.call(GetArtifact("art")))
        with pytest.raises(StoreUnavailable):
            clients.loop.run(ping(client))


def test_a_store_that_does_not_answer_in_time_is_a_deadline(tmp_path: Path) -> None:
    backend = SqliteStoreBackend(tmp_path / "store.db", busy_timeout_ms=3000)
    client = InProcessStoreClient(backend, timeout_seconds=0.3)
    loop = Loop()
    # Another process's write lock: the write waits on SQLite's busy timeout, past ours.
    holder = sqlite3.connect(tmp_path / "store.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreDeadlineExceeded):
            loop.run(client.call(CreateArtifact("art", "ticket", HOT)))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    # The write was still waiting, and lands once the lock is gone: as over gRPC, a
    # deadline says nothing about whether it landed, and the derived id makes a retry safe.
    loop.run(client.close())
    assert backend.get_artifact("art").version == 1
    backend.close()
    loop.close()


def test_ping_takes_a_refusal_as_an_answer(clients: Clients) -> None:
    for client in (clients.inprocess, clients.grpc):
        # The read a ping makes is refused: the store holds no artifact of the probe's id.
        with pytest.raises(Refusal) as refused:
            clients.loop.run(client.call(GetArtifact("actonce-health-probe")))
        assert refused.value.code == "NOT_FOUND"
        # That refusal is an answer, and an answer proves the store is there.
        clients.loop.run(ping(client))
