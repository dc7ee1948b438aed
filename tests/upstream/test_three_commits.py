"""A write and its audit committed one after another by the embedded store's client, where
the ledger has a file (or a database) of its own: one job of the client's batch thread.

Real parts: SQLite files and PostgreSQL databases, the real ledgers and store backends. The
intent is durable before the store is called, the store's row before the outcome is made; a
fenced or lost intent stops the job before the store; a batch of jobs shares its commits;
and a write wakes the event loop once, where the phases made apart wake it three times.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager
from contextvars import Context
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sidecar.core.actions import RunActions
from sidecar.core.attempts import AttemptRegistry
from sidecar.core.audit import InOrder, InTheStoresThread, LandsFor
from sidecar.core.types import Outcome, Settings
from sidecar.errors import StoreDeadlineExceeded, StoreUnavailable
from sidecar.ledger.base import (
    Append,
    AuditEvent,
    FencedError,
    GroupCommitLedger,
    LedgerError,
    Phase,
)
from sidecar.ledger.postgres import PostgresLedger
from sidecar.ledger.sqlite import SqliteLedger
from sidecar.refstore.backend import StoredThread, StoreUnavailableError
from sidecar.refstore.postgres import PostgresStoreBackend
from sidecar.refstore.sqlite import SqliteStoreBackend
from sidecar.rules.canonical import Document
from sidecar.store_contract import Principal, Refusal
from sidecar.upstream.base import (
    AuditedWrites,
    CreateThread,
    ListMessages,
    PostMessage,
    StoreWrite,
    ThreeCommits,
)
from sidecar.upstream.inprocess import InProcessStoreClient
from tests.helpers import postgres as pg

BACKENDS = ["sqlite", "postgres"]


def _event(phase: str, attempt: str = "a1", derived: str = "thr-1") -> AuditEvent:
    return AuditEvent(run_id="run", attempt_id=attempt, rpc="CreateThread", phase=phase,
                      write_type="thread", derived_id=derived, occurrence=0)  # fmt: skip


@dataclass
class Parts:
    """A ledger and a store of their own, the client given both, and a look into each."""

    client: InProcessStoreClient
    ledger: GroupCommitLedger
    backend: SqliteStoreBackend | PostgresStoreBackend
    events: Callable[[], list[tuple[str, str]]]
    threads: Callable[[], list[str]]


@contextmanager
def _databases(kind: str, folder: Path) -> Iterator[tuple[Any, ...]]:
    if kind == "sqlite":
        audit, store = folder / "audit.db", folder / "store.db"
        yield (lambda: SqliteLedger(audit), lambda: SqliteStoreBackend(store),
               _sqlite_rows(audit, "SELECT phase, derived_id FROM audit_events ORDER BY seq"),
               _sqlite_rows(store, "SELECT id FROM threads ORDER BY id"))  # fmt: skip
        return
    ledger_dsn, store_dsn = pg.fresh_database("ledger"), pg.fresh_database("store")
    try:
        yield (lambda: PostgresLedger(ledger_dsn), lambda: PostgresStoreBackend(store_dsn),
               _pg_rows(ledger_dsn, "SELECT phase, derived_id FROM audit_events ORDER BY seq"),
               _pg_rows(store_dsn, "SELECT id FROM store_threads ORDER BY id"))  # fmt: skip
    finally:
        pg.drop_database(ledger_dsn)
        pg.drop_database(store_dsn)


def _sqlite_rows(path: Path, query: str) -> Callable[[], list[Any]]:
    def rows() -> list[Any]:  # another connection: what has committed
        with sqlite3.connect(path) as db:
            found = db.execute(query).fetchall()
        return [tuple(row) if len(row) > 1 else row[0] for row in found]

    return rows


def _pg_rows(dsn: str, query: str) -> Callable[[], list[Any]]:
    import psycopg

    def rows() -> list[Any]:
        with psycopg.connect(dsn) as db:
            found = db.execute(query).fetchall()
        return [tuple(row) if len(row) > 1 else row[0] for row in found]

    return rows


@asynccontextmanager
async def apart(kind: str, folder: Path, **client: Any) -> AsyncIterator[Parts]:
    with _databases(kind, folder) as (open_ledger, open_store, events, threads):
        ledger, backend = open_ledger(), open_store()
        made = InProcessStoreClient(backend, separate_ledger=ledger, **client)
        try:
            yield Parts(made, ledger, backend, events, threads)
        finally:
            await made.close()
            await ledger.close()
            backend.close()


def _applied(answer: object) -> tuple[AuditEvent, str]:
    return _event(Phase.OUTCOME), "refused" if isinstance(answer, Exception) else "applied"


async def _three_commits(
    parts: Parts, write: StoreWrite, settle: Any = _applied, seconds: float = 5
) -> Any:
    intent = _event(Phase.INTENT, derived=write.store_id)
    return await parts.client.call(ThreeCommits(intent, write, settle), seconds)


@pytest.mark.parametrize("kind", BACKENDS)
def test_each_commit_is_durable_before_the_next_part_begins(kind: str, tmp_path: Path) -> None:
    seen: list[tuple[list[Any], list[Any]]] = []

    made: list[Parts] = []

    def settle(answer: object) -> tuple[AuditEvent, str]:
        # The store has answered: what has committed, seen from other connections.
        seen.append((made[0].events(), made[0].threads()))
        return _applied(answer)

    async def run() -> Any:
        async with apart(kind, tmp_path) as parts:
            made.append(parts)
            await parts.ledger.append(_event(Phase.ATTEMPT_BEGIN))
            done = await _three_commits(parts, CreateThread("thr-1", "t"), settle)
            return done, parts.events(), parts.threads()

    done, events, threads = asyncio.run(run())
    assert (done.result, done.outcome_lost) == ("applied", None)
    assert seen == [([("attempt_begin", "thr-1"), ("intent", "thr-1")], ["thr-1"])]
    assert events[1:] == [("intent", "thr-1"), ("outcome", "thr-1")]
    assert threads == ["thr-1"]


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_fenced_intent_stops_the_job_before_the_store(kind: str, tmp_path: Path) -> None:
    async def run() -> tuple[list[Any], list[Any]]:
        async with apart(kind, tmp_path) as parts:
            await parts.ledger.append(_event(Phase.ATTEMPT_BEGIN, attempt="a1"))
            await parts.ledger.append(_event(Phase.ATTEMPT_BEGIN, attempt="a2"))
            with pytest.raises(FencedError):
                await _three_commits(parts, CreateThread("thr-1", "t"))
            return parts.events(), parts.threads()

    events, threads = asyncio.run(run())
    assert [phase for phase, _ in events] == ["attempt_begin", "attempt_begin"]
    assert threads == []


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_refusal_is_the_write_s_answer_and_its_outcome_is_kept(kind: str, tmp_path: Path) -> None:
    async def run() -> tuple[Any, list[Any]]:
        async with apart(kind, tmp_path) as parts:
            await parts.ledger.append(_event(Phase.ATTEMPT_BEGIN))
            call = PostMessage("m-1", "no-such-thread", "notice", "x", request_turn=False)
            return await _three_commits(parts, call), parts.events()

    done, events = asyncio.run(run())
    assert isinstance(done.answer, Refusal) and done.answer.code == "NOT_FOUND"
    assert done.result == "refused"
    assert [phase for phase, _ in events] == ["attempt_begin", "intent", "outcome"]


def test_an_outcome_that_cannot_commit_is_told_once_the_store_has_acted(tmp_path: Path) -> None:
    audit = tmp_path / "audit.db"
    locker = sqlite3.connect(audit, isolation_level=None, check_same_thread=False)

    def settle(answer: object) -> tuple[AuditEvent, str]:
        # Another process takes the ledger's file once the store has acted.
        locker.execute("BEGIN IMMEDIATE")
        return _applied(answer)

    async def run() -> Any:
        ledger, backend = (
            SqliteLedger(audit, busy_timeout_ms=50),
            SqliteStoreBackend(tmp_path / "store.db"),
        )
        client = InProcessStoreClient(backend, separate_ledger=ledger)
        try:
            await ledger.append(_event(Phase.ATTEMPT_BEGIN))
            return await client.call(
                ThreeCommits(_event(Phase.INTENT), CreateThread("thr-1", "t"), settle), 5
            )
        finally:
            locker.execute("ROLLBACK")
            await client.close()
            await ledger.close()
            backend.close()

    done = asyncio.run(run())
    assert isinstance(done.outcome_lost, LedgerError)
    assert "locked" in str(done.outcome_lost)
    assert (done.answer, done.result) == (None, "applied")  # the store acted
    assert _sqlite_rows(tmp_path / "store.db", "SELECT id FROM threads")() == ["thr-1"]
    rows = _sqlite_rows(audit, "SELECT phase FROM audit_events ORDER BY seq")
    assert rows() == ["attempt_begin", "intent"]


def test_a_job_whose_intent_waits_past_its_deadline_never_calls_the_store(tmp_path: Path) -> None:
    async def run() -> list[Any]:
        async with apart("sqlite", tmp_path, timeout_seconds=5, ledger_wait_seconds=0.05) as (
            parts
        ):
            await parts.ledger.append(_event(Phase.ATTEMPT_BEGIN))
            held = parts.ledger._committing  # another commit holds the ledger's connection
            held.acquire()
            try:
                with pytest.raises(LedgerError, match="not durable within"):
                    await parts.client.call(
                        ThreeCommits(_event(Phase.INTENT), CreateThread("thr-1", "t"), _applied)
                    )
            finally:
                held.release()
            await parts.client.call(  # the batch thread goes on, and the next job lands
                ThreeCommits(
                    _event(Phase.INTENT, derived="thr-2"), CreateThread("thr-2", "t"), _applied
                )
            )
            return parts.threads()

    assert asyncio.run(run()) == ["thr-2"]


class _SlowStore(SqliteStoreBackend):
    def create_thread(
        self, thread_id: str, title: str, *, principal: Principal | None = None
    ) -> StoredThread:
        threading.Event().wait(0.4)
        return super().create_thread(thread_id, title, principal=principal)


def test_a_store_past_the_deadline_may_have_landed_and_leaves_its_outcome_to_the_caller(
    tmp_path: Path,
) -> None:
    async def run() -> tuple[list[Any], list[Any]]:
        ledger, backend = SqliteLedger(tmp_path / "audit.db"), _SlowStore(tmp_path / "store.db")
        client = InProcessStoreClient(backend, separate_ledger=ledger, ledger_wait_seconds=1)
        try:
            await ledger.append(_event(Phase.ATTEMPT_BEGIN))
            with pytest.raises(StoreDeadlineExceeded, match="may have landed") as late:
                await client.call(
                    ThreeCommits(_event(Phase.INTENT), CreateThread("thr-1", "t"), _applied), 0.1
                )
            assert not late.value.nothing_sent
        finally:
            await client.close()  # waits for the job, which goes on to the store's answer
            await ledger.close()
            backend.close()
        rows = _sqlite_rows(tmp_path / "audit.db", "SELECT phase FROM audit_events")
        return rows(), _sqlite_rows(tmp_path / "store.db", "SELECT id FROM threads")()

    events, threads = asyncio.run(run())
    # The caller records the deadline as the write's outcome (the core does, as apart); the
    # job, answered, records none of its own.
    assert events == ["attempt_begin", "intent"]
    assert threads == ["thr-1"]


def test_a_job_queued_behind_a_stuck_store_call_is_answered_at_its_deadline_unsent(
    tmp_path: Path,
) -> None:
    async def run() -> tuple[list[Any], list[Any], float]:
        ledger, backend = SqliteLedger(tmp_path / "audit.db"), _SlowStore(tmp_path / "store.db")
        client = InProcessStoreClient(backend, separate_ledger=ledger, ledger_wait_seconds=5)
        try:
            await ledger.append(_event(Phase.ATTEMPT_BEGIN))
            first = asyncio.ensure_future(client.call(
                ThreeCommits(_event(Phase.INTENT), CreateThread("thr-1", "t"), _applied), 0.2
            ))  # fmt: skip
            await asyncio.sleep(0.05)  # the first is in the store's call
            began = time.monotonic()
            with pytest.raises(StoreDeadlineExceeded, match="was not sent") as late:
                await client.call(ThreeCommits(_event(Phase.INTENT, derived="thr-2"),
                                         CreateThread("thr-2", "t"), _applied), 0.2)  # fmt: skip
            took = time.monotonic() - began
            assert late.value.nothing_sent
            with pytest.raises(StoreDeadlineExceeded):
                await first
        finally:
            await client.close()
            await ledger.close()
            backend.close()
        rows = _sqlite_rows(tmp_path / "audit.db", "SELECT derived_id FROM audit_events")
        return rows(), _sqlite_rows(tmp_path / "store.db", "SELECT id FROM threads")(), took

    events, threads, took = asyncio.run(run())
    assert took < 0.35  # its own deadline, not the ledger's wait behind the stuck call
    assert events == ["thr-1", "thr-1"] and threads == ["thr-1"]  # nothing of the second


class _FailingBatches(SqliteStoreBackend):
    """A store whose batches fail as a whole (a pool with no connection to give)."""

    def run_batch(self, calls: Sequence[Callable[[], Any]]) -> list[Any]:
        raise StoreUnavailableError("no connection to the store")


def test_a_batch_that_fails_as_a_whole_is_each_write_s_answer_and_outcome(
    tmp_path: Path,
) -> None:
    async def run() -> list[Any]:
        ledger = SqliteLedger(tmp_path / "audit.db")
        backend = _FailingBatches(tmp_path / "store.db")
        client = InProcessStoreClient(backend, separate_ledger=ledger)
        try:
            await ledger.append(_event(Phase.ATTEMPT_BEGIN))
            return list(await asyncio.gather(*(
                client.call(ThreeCommits(_event(Phase.INTENT, derived=f"thr-{i}"),
                                   CreateThread(f"thr-{i}", "t"), _applied), 5)
                for i in range(5)
            )))  # fmt: skip
        finally:
            await client.close()
            await ledger.close()
            backend.close()

    answers = asyncio.run(run())
    assert all(isinstance(a.answer, StoreUnavailable) for a in answers), answers
    assert [a.result for a in answers] == ["refused"] * 5
    rows = _sqlite_rows(tmp_path / "audit.db", "SELECT phase FROM audit_events ORDER BY seq")
    assert sorted(rows()) == ["attempt_begin"] + ["intent"] * 5 + ["outcome"] * 5


def test_a_read_answers_while_a_write_waits_for_the_ledger(tmp_path: Path) -> None:
    async def run() -> float:
        async with apart("sqlite", tmp_path) as parts:
            await parts.ledger.append(_event(Phase.ATTEMPT_BEGIN))
            await _three_commits(parts, CreateThread("thr-1", "t"))
            held = parts.ledger._committing  # the ledger stops answering
            held.acquire()
            try:
                waiting = asyncio.ensure_future(
                    _three_commits(parts, CreateThread("thr-2", "t"), seconds=30)
                )
                await asyncio.sleep(0.05)
                began = time.monotonic()
                messages = await parts.client.call(ListMessages("thr-1"), 5)
                took = time.monotonic() - began
                assert list(messages) == []
            finally:
                held.release()
            await waiting
            return took

    assert asyncio.run(run()) < 1


def test_closing_the_ledger_waits_for_a_commit_another_thread_has_under_way(
    tmp_path: Path,
) -> None:
    audit = tmp_path / "audit.db"
    locker = sqlite3.connect(audit, isolation_level=None, check_same_thread=False)

    async def run() -> list[int | LedgerError]:
        ledger = SqliteLedger(audit, busy_timeout_ms=5000)
        locker.execute("BEGIN IMMEDIATE")  # another process holds the file for a while
        appended: list[list[int | LedgerError]] = []
        thread = threading.Thread(
            target=lambda: appended.append(ledger.append_now([_event(Phase.INTENT)], [None]))
        )
        thread.start()
        await asyncio.sleep(0.1)  # the append waits for the file, holding the connection
        threading.Timer(0.3, lambda: locker.execute("ROLLBACK")).start()
        await ledger.close()
        thread.join()
        return appended[0]

    [seq] = asyncio.run(run())
    assert isinstance(seq, int), seq  # committed, not cut off by the close


def test_an_outcome_that_waits_past_the_ledger_s_bound_is_answered_lost_in_time(
    tmp_path: Path,
) -> None:
    released = threading.Event()

    def hold(ledger: GroupCommitLedger) -> None:
        with ledger._committing:  # another commit holds the ledger's connection for a while
            released.wait(2)

    async def run() -> tuple[Any, float, list[Any]]:
        async with apart("sqlite", tmp_path, ledger_wait_seconds=0.2) as parts:
            await parts.ledger.append(_event(Phase.ATTEMPT_BEGIN))
            holding: list[threading.Thread] = []

            def settle(answer: object) -> tuple[AuditEvent, str]:
                holding.append(threading.Thread(target=hold, args=(parts.ledger,)))
                holding[0].start()
                threading.Event().wait(0.05)  # the holder has the connection
                return _applied(answer)

            began = time.monotonic()
            done = await _three_commits(parts, CreateThread("thr-1", "t"), settle)
            took = time.monotonic() - began
            released.set()
            holding[0].join()
            await asyncio.sleep(0.1)  # the job goes on, and its outcome commits after all
            return done, took, parts.events()

    done, took, events = asyncio.run(run())
    assert isinstance(done.outcome_lost, LedgerError)
    assert "not durable within 0.3s" in str(done.outcome_lost)  # the wait and the grace
    assert done.result == "applied" and took < 1.5
    assert [phase for phase, _ in events] == ["attempt_begin", "intent", "outcome"]


@dataclass
class _Commits:
    """An AppendHook that counts the ledger's commits and the events each carried."""

    sizes: list[int] = field(default_factory=list)

    async def append(self, event: AuditEvent, append: Append) -> int:
        return await append(event)

    def commit(self, appends: Sequence[Context]) -> AbstractContextManager[None]:
        self.sizes.append(len(appends))
        return _nothing()


@contextmanager
def _nothing() -> Iterator[None]:
    yield


@pytest.mark.parametrize("kind", BACKENDS)
def test_concurrent_jobs_share_their_commits(kind: str, tmp_path: Path) -> None:
    commits = _Commits()

    async def run() -> tuple[list[Any], list[Any], list[Any]]:
        async with apart(kind, tmp_path) as parts:
            await parts.ledger.append(_event(Phase.ATTEMPT_BEGIN))
            parts.ledger.watch(commits)
            answers = await asyncio.gather(*(
                _three_commits(parts, CreateThread(f"thr-{i:02}", "t")) for i in range(40)
            ))  # fmt: skip
            return [a.result for a in answers], parts.events(), parts.threads()

    results, events, threads = asyncio.run(run())
    assert results == ["applied"] * 40
    assert len(events) == 81 and len(threads) == 40
    # Every event reached the ledger's commit hooks with its call's context...
    assert sum(commits.sizes) == 80
    # ...and the jobs shared commits: fewer than one a job.
    assert len(commits.sizes) < 40


class _CountingLoop(asyncio.SelectorEventLoop):
    """An event loop that counts the times another thread wakes it."""

    woken = 0

    def call_soon_threadsafe(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        self.woken += 1
        return super().call_soon_threadsafe(*args, **kwargs)


@pytest.mark.parametrize("kind", BACKENDS)
@pytest.mark.parametrize(("lands", "wakes"), [(InTheStoresThread, 1), (InOrder, 3)])
def test_a_write_s_three_commits_wake_the_event_loop_once(
    kind: str, lands: LandsFor, wakes: int, tmp_path: Path
) -> None:
    async def run(loop: _CountingLoop) -> list[int]:
        async with apart(kind, tmp_path) as parts:
            actions = RunActions(ledger=parts.ledger, store=parts.client,
                                 attempts=AttemptRegistry(), settings=Settings(),
                                 lands=lands)  # fmt: skip
            attempt = await actions.begin_attempt(
                run_id="run", rule="r", checkpoint="cp", lease_deadline=None
            )
            woken = []
            for n in range(3):
                before = loop.woken
                made = await actions.create(attempt_id=attempt.attempt_id, kind="ticket",
                                            data=Document.parse('{"n":1}', "data_json"),
                                            propose=False, request_id=f"r{n}")  # fmt: skip
                assert made.outcome is Outcome.APPLIED
                woken.append(loop.woken - before)
            return woken

    loop = _CountingLoop()
    try:
        assert loop.run_until_complete(run(loop)) == [wakes] * 3
    finally:
        loop.close()


def test_the_client_says_how_it_takes_a_write_with_its_audit(tmp_path: Path) -> None:
    async def run() -> list[AuditedWrites]:
        shared_backend = SqliteStoreBackend(tmp_path / "one.db")
        shared = SqliteLedger(tmp_path / "one.db", through=shared_backend)
        ledger, backend = SqliteLedger(tmp_path / "audit.db"), SqliteStoreBackend(tmp_path / "s.db")
        clients = [
            InProcessStoreClient(shared_backend, ledger=shared),
            InProcessStoreClient(backend, separate_ledger=ledger),
            InProcessStoreClient(backend),
        ]
        try:
            return [client.audited_writes for client in clients]
        finally:
            for client in clients:
                await client.close()
            for closing in (shared, ledger):
                await closing.close()
            shared_backend.close()
            backend.close()

    assert asyncio.run(run()) == [
        AuditedWrites.AS_ONE,
        AuditedWrites.THREE_COMMITS,
        AuditedWrites.APART,
    ]
