"""A write and its audit as one commit, where the ledger shares the store's SQLite file.

The in-process client makes a write's intent, its store call and its outcome one job of its
batch thread, one transaction: all of it is durable, or none of it is, and a fenced intent
stops the job before the store is called.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from sidecar.ledger.base import AuditEvent, FencedError, LedgerError, Phase
from sidecar.ledger.sqlite import SqliteLedger
from sidecar.refstore.sqlite import SqliteStoreBackend
from sidecar.store_contract import Refusal
from sidecar.upstream.base import (
    CreateThread,
    OneCommit,
    PostMessage,
    Settle,
    StoreWrite,
    nothing,
)
from sidecar.upstream.inprocess import InProcessStoreClient


def _event(phase: str, attempt: str = "a1", derived: str = "thr-1") -> AuditEvent:
    return AuditEvent(run_id="run", attempt_id=attempt, rpc="CreateThread", phase=phase,
                      write_type="thread", derived_id=derived, occurrence=0)  # fmt: skip


@asynccontextmanager
async def one_file(path: Path) -> AsyncIterator[tuple[InProcessStoreClient, SqliteLedger]]:
    backend = SqliteStoreBackend(path)
    ledger = SqliteLedger(path, through=backend)
    client = InProcessStoreClient(backend, ledger=ledger)
    try:
        yield client, ledger
    finally:
        await client.close()
        await ledger.close()
        backend.close()


def _rows(path: Path) -> tuple[list[tuple[str, str]], list[str]]:
    with sqlite3.connect(path) as db:
        events = db.execute("SELECT phase, derived_id FROM audit_events ORDER BY seq").fetchall()
        threads = [row[0] for row in db.execute("SELECT id FROM threads ORDER BY id")]
    return [(str(p), str(d)) for p, d in events], threads


def settle_applied(answer: object) -> tuple[AuditEvent, str]:
    return _event(Phase.OUTCOME), "applied" if not isinstance(answer, Exception) else "refused"


async def commit(
    client: InProcessStoreClient,
    intent: AuditEvent,
    write: StoreWrite,
    settle: Settle[str],
    before: Callable[[], None] = nothing,
) -> str:
    """The write and its audit as one commit: what ``settle`` made of it."""
    return (await client.call(OneCommit(intent, write, settle, before), 5)).result


def test_only_a_client_whose_store_shares_the_ledger_s_file_commits_writes(
    tmp_path: Path,
) -> None:
    async def run() -> str:
        alone = InProcessStoreClient(SqliteStoreBackend(tmp_path / "store.db"))
        try:
            with pytest.raises(TypeError, match="does not share the ledger's file"):
                await commit(alone, _event(Phase.INTENT), CreateThread("thr-1", "t"),
                             settle_applied)  # fmt: skip
            async with one_file(tmp_path / "audit.db") as (shared, ledger):
                await ledger.append(_event(Phase.ATTEMPT_BEGIN))
                return await commit(shared, _event(Phase.INTENT), CreateThread("thr-1", "t"),
                                    settle_applied)  # fmt: skip
        finally:
            await alone.close()

    assert asyncio.run(run()) == "applied"


def test_the_intent_the_row_and_the_outcome_commit_together(tmp_path: Path) -> None:
    path = tmp_path / "audit.db"

    async def run() -> str:
        async with one_file(path) as (client, ledger):
            await ledger.append(_event(Phase.ATTEMPT_BEGIN))
            return await commit(client, _event(Phase.INTENT), CreateThread("thr-1", "t"),
                                settle_applied)  # fmt: skip

    assert asyncio.run(run()) == "applied"
    events, threads = _rows(path)
    assert events[1:] == [("intent", "thr-1"), ("outcome", "thr-1")]
    assert threads == ["thr-1"]


def test_a_refusal_is_an_answer_and_the_job_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "audit.db"
    seen: list[object] = []

    def settle(answer: object) -> tuple[AuditEvent, str]:
        seen.append(answer)
        return settle_applied(answer)

    async def run() -> str:
        async with one_file(path) as (client, ledger):
            await ledger.append(_event(Phase.ATTEMPT_BEGIN))
            call = PostMessage("m-1", "no-such-thread", "notice", "x", request_turn=False)
            return await commit(client, _event(Phase.INTENT, derived="m-1"), call, settle)

    assert asyncio.run(run()) == "refused"
    assert isinstance(seen[0], Refusal) and seen[0].code == "NOT_FOUND"
    events, _ = _rows(path)
    assert [phase for phase, _ in events] == ["attempt_begin", "intent", "outcome"]


def test_when_the_outcome_cannot_be_made_none_of_the_write_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "audit.db"

    def broken(answer: object) -> tuple[AuditEvent, str]:
        raise RuntimeError("no outcome")

    async def run() -> None:
        async with one_file(path) as (client, ledger):
            await ledger.append(_event(Phase.ATTEMPT_BEGIN))
            with pytest.raises(LedgerError):
                await commit(client, _event(Phase.INTENT), CreateThread("thr-1", "t"), broken)
            # The file goes on: the next write lands whole.
            await commit(client, _event(Phase.INTENT, derived="thr-2"),
                         CreateThread("thr-2", "t"), settle_applied)  # fmt: skip

    asyncio.run(run())
    events, threads = _rows(path)
    # Neither the intent nor the store's row of the first write outlived its failure.
    assert [d for p, d in events if p == "intent"] == ["thr-2"]
    assert threads == ["thr-2"]


def test_a_fenced_intent_stops_the_job_before_the_store_is_called(tmp_path: Path) -> None:
    path = tmp_path / "audit.db"
    settled: list[object] = []

    def settle(answer: object) -> tuple[AuditEvent, str]:
        settled.append(answer)
        return settle_applied(answer)

    async def run() -> None:
        async with one_file(path) as (client, ledger):
            await ledger.append(_event(Phase.ATTEMPT_BEGIN, attempt="a1"))
            await ledger.append(_event(Phase.ATTEMPT_BEGIN, attempt="a2"))  # a newer attempt
            with pytest.raises(FencedError):
                await commit(client, _event(Phase.INTENT, attempt="a1"),
                             CreateThread("thr-1", "t"), settle)  # fmt: skip

    asyncio.run(run())
    events, threads = _rows(path)
    assert [p for p, _ in events] == ["attempt_begin", "attempt_begin"]
    assert threads == []
    assert settled == []


def test_what_the_job_checks_first_refuses_it_with_nothing_written(tmp_path: Path) -> None:
    path = tmp_path / "audit.db"

    class Expired(Exception):
        pass

    def expired() -> None:
        raise Expired("the lease ran out while the job waited")

    async def run() -> None:
        async with one_file(path) as (client, ledger):
            await ledger.append(_event(Phase.ATTEMPT_BEGIN))
            with pytest.raises(LedgerError):  # a foreign error fails the job closed
                await commit(client, _event(Phase.INTENT), CreateThread("thr-1", "t"),
                             settle_applied, before=expired)  # fmt: skip

    asyncio.run(run())
    events, threads = _rows(path)
    assert [p for p, _ in events] == ["attempt_begin"]
    assert threads == []
