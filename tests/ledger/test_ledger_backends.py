"""The ledger's rules on both backends: durability, group commit, fencing, tamper evidence."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import hashlib
import json
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from sidecar.config import Config
from sidecar.ledger import inspect, schema, sql
from sidecar.ledger.audit_command import open_reader
from sidecar.ledger.base import (
    GENESIS_HASH,
    Append,
    AuditEvent,
    FencedError,
    GroupCommitLedger,
    LedgerError,
    LedgerReader,
    StoredEvent,
    event_hash,
)
from sidecar.ledger.operator import open_operator_ledger
from sidecar.ledger.postgres import PostgresLedger, PostgresLedgerReader
from sidecar.ledger.sqlite import SqliteLedger
from tests.helpers import postgres as pg
from tests.helpers.locks import ledger_locked


@dataclass
class Backend:
    name: str
    values: dict[str, Any]  # what `actonce audit` takes: audit_db or audit_dsn
    open: Callable[[], GroupCommitLedger]

    def reader(self) -> LedgerReader:
        return open_reader(self.values)

    def sql(self, statement: str, params: tuple[object, ...] = ()) -> None:
        """Tamper with the ledger as an intruder with database access would."""
        if self.name == "postgres":
            with psycopg.connect(self.values["audit_dsn"], autocommit=True) as conn:
                conn.execute(statement.replace("?", "%s"), params)
        else:
            lite = sqlite3.connect(self.values["audit_db"], isolation_level=None)
            lite.execute(statement, params)
            lite.close()

    def query(self, statement: str) -> list[tuple[Any, ...]]:
        if self.name == "postgres":
            with psycopg.connect(self.values["audit_dsn"], autocommit=True) as conn:
                return list(conn.execute(statement).fetchall())
        lite = sqlite3.connect(self.values["audit_db"])
        try:
            return list(lite.execute(statement).fetchall())
        finally:
            lite.close()

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        flag = ["--audit-dsn", self.values["audit_dsn"]] if self.name == "postgres" else [
            "--audit-db", str(self.values["audit_db"])]  # fmt: skip
        return subprocess.run(
            [sys.executable, "-m", "sidecar.cli", "audit", *args, *flag],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip


@pytest.fixture(params=["sqlite", "postgres"])
def ledger_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "postgres":
        dsn = pg.fresh_database("ledger")
        yield Backend(
            "postgres", {"audit_dsn": dsn}, lambda: PostgresLedger(dsn, lock_timeout_ms=300)
        )
        pg.drop_database(dsn)
    else:
        path = tmp_path / "audit.db"
        yield Backend("sqlite", {"audit_db": path}, lambda: SqliteLedger(path, busy_timeout_ms=300))


def _event(i: int, phase: str = "outcome", run: str = "r", attempt: str = "a") -> AuditEvent:
    return AuditEvent(run_id=run, attempt_id=attempt, rpc="Create", phase=phase,
                      derived_id=f"art_{i}", outcome="OUTCOME_APPLIED")  # fmt: skip


def _fill(backend: Backend, count: int) -> None:
    async def go() -> None:
        ledger = _patient(backend)  # filling is not about time
        for i in range(count):
            await ledger.append(_event(i))
        await ledger.close()

    asyncio.run(go())


def test_appends_are_numbered_and_survive_a_reopen(ledger_backend: Backend) -> None:
    async def go() -> list[int]:
        ledger = ledger_backend.open()
        seqs = [await ledger.append(_event(i)) for i in range(3)]
        await ledger.close()
        again = ledger_backend.open()
        seqs.append(await again.append(_event(3)))
        await again.close()
        return seqs

    assert asyncio.run(go()) == [1, 2, 3, 4]
    reader = ledger_backend.reader()
    assert [e.event.derived_id for e in reader.events()] == ["art_0", "art_1", "art_2", "art_3"]
    reader.close()


class _CountedCommits:
    """A hook that records the size of each commit, in the writer's thread."""

    def __init__(self, commits: list[int]) -> None:
        self._commits = commits

    async def append(self, event: AuditEvent, append: Append) -> int:
        return await append(event)

    @contextlib.contextmanager
    def commit(self, appends: Sequence[contextvars.Context]) -> Iterator[None]:
        yield
        self._commits.append(len(appends))


def test_concurrent_appends_share_commits_and_each_waits_for_its_own(
    ledger_backend: Backend,
) -> None:
    commits: list[int] = []

    async def go() -> list[int]:
        ledger = _patient(ledger_backend)  # 300 appends at once: about commits, not time
        ledger.watch(_CountedCommits(commits))
        seqs = await asyncio.gather(*(ledger.append(_event(i)) for i in range(300)))
        await ledger.close()
        return list(seqs)

    seqs = asyncio.run(go())
    assert sorted(seqs) == list(range(1, 301))
    assert sum(commits) == 300
    assert len(commits) < 300  # group commit: fewer commits than appends


def test_an_intent_of_a_fenced_attempt_is_refused_and_not_written(ledger_backend: Backend) -> None:
    async def go() -> None:
        ledger = ledger_backend.open()
        other = ledger_backend.open()  # a second sidecar on the same ledger
        await ledger.append(_event(0, "attempt_begin", attempt="old"))
        await ledger.append(_event(1, "intent", attempt="old"))
        await other.append(_event(2, "attempt_begin", attempt="new"))
        with pytest.raises(FencedError):
            await ledger.append(_event(3, "intent", attempt="old"))
        # The older attempt's outcome of a write already under way is still recorded.
        await ledger.append(_event(4, "outcome", attempt="old"))
        await other.append(_event(5, "intent", attempt="new"))
        await ledger.close()
        await other.close()

    asyncio.run(go())
    reader = ledger_backend.reader()
    assert [e.event.derived_id for e in reader.events()] == [
        "art_0",
        "art_1",
        "art_2",
        "art_4",
        "art_5",
    ]
    assert inspect.verify(reader).intact
    reader.close()


def test_a_locked_ledger_fails_appends_closed_and_recovers(ledger_backend: Backend) -> None:
    _fill(ledger_backend, 1)

    async def go() -> None:
        ledger = ledger_backend.open()
        with ledger_locked(Config(**ledger_backend.values)), pytest.raises(LedgerError):
            await ledger.append(_event(1))
        assert await ledger.append(_event(2)) == 2
        await ledger.close()

    asyncio.run(go())


@pytest.mark.parametrize(
    ("tamper", "first_bad"),
    [
        ("UPDATE audit_events SET outcome = 'OUTCOME_SKIPPED' WHERE seq = 3", 3),
        ("DELETE FROM audit_events WHERE seq = 4", 4),
        ("UPDATE audit_events SET seq = CASE seq WHEN 2 THEN 3 ELSE 2 END WHERE seq IN (2, 3)", 2),
        ("DELETE FROM audit_events WHERE seq = 6", 6),
    ],
    ids=["edited", "deleted", "reordered", "deleted-last"],
)
def test_verify_names_the_first_bad_event(
    ledger_backend: Backend, tamper: str, first_bad: int
) -> None:
    _fill(ledger_backend, 6)
    intact = ledger_backend.cli("verify")
    assert intact.returncode == 0, intact.stderr
    assert "ledger intact: 6 events" in intact.stdout
    if "CASE" in tamper:
        # Both databases check the primary key per row: move one out of the way first.
        ledger_backend.sql("UPDATE audit_events SET seq = -2 WHERE seq = 2")
        ledger_backend.sql("UPDATE audit_events SET seq = 2 WHERE seq = 3")
        ledger_backend.sql("UPDATE audit_events SET seq = 3 WHERE seq = -2")
    else:
        ledger_backend.sql(tamper)
    broken = ledger_backend.cli("verify")
    assert broken.returncode == 1
    assert f"first bad event #{first_bad}" in broken.stdout


def test_audit_list_show_and_export(ledger_backend: Backend) -> None:
    async def go() -> None:
        ledger = ledger_backend.open()
        await ledger.append(AuditEvent(run_id="run-9", attempt_id="att_1", rpc="BeginAttempt",
                                       phase="attempt_begin", rule="triage", checkpoint="cp"))  # fmt: skip
        await ledger.append(AuditEvent(run_id="run-9", attempt_id="att_1", rpc="Create",
                                       phase="intent", derived_id="art_x", occurrence=0))  # fmt: skip
        await ledger.append(AuditEvent(run_id="run-9", attempt_id="att_1", rpc="Create",
                                       phase="outcome", derived_id="art_x", occurrence=0,
                                       outcome="OUTCOME_APPLIED"))  # fmt: skip
        await ledger.append(AuditEvent(run_id="run-9", attempt_id="att_1", rpc="Send",
                                       phase="outcome", reason="FORBIDDEN",
                                       failure_class="PERMANENT"))  # fmt: skip
        await ledger.close()

    asyncio.run(go())
    listed = ledger_backend.cli("list")
    assert listed.returncode == 0 and "run-9" in listed.stdout and "triage" in listed.stdout
    shown = ledger_backend.cli("show", "run-9")
    assert shown.returncode == 0
    lines = shown.stdout.splitlines()
    assert "attempt att_1 began (rule triage" in lines[0]
    assert lines[2].endswith("art_x (occurrence 0): APPLIED")
    assert "refused FORBIDDEN (PERMANENT)" in lines[3]
    exported = ledger_backend.cli("export")
    assert exported.returncode == 0
    rows = [line for line in exported.stdout.splitlines() if line]
    assert len(rows) == 4 and all('"hash":' in row for row in rows)
    assert "4/4 events" in exported.stderr  # progress on stderr, JSON lines on stdout


def test_verify_of_a_missing_ledger_is_a_clear_error(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "sidecar.cli", "audit", "verify", "--audit-db", str(tmp_path / "none.db")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.strip().startswith("actonce: error: no ledger at")


def test_a_batch_whose_connection_is_lost_before_its_commit_is_written_again() -> None:
    # The writer's backend is terminated while its batch waits inside its transaction:
    # nothing of the batch committed, so it is written again on a fresh connection rather
    # than failing every write in it.
    dsn = pg.fresh_database("ledger")
    try:

        async def go() -> None:
            ledger = PostgresLedger(dsn, lock_timeout_ms=10_000)
            assert await ledger.append(_event(0)) == 1
            with psycopg.connect(dsn) as blocker, psycopg.connect(dsn, autocommit=True) as admin:
                blocker.execute("SELECT seq FROM audit_chains FOR UPDATE")
                pending = asyncio.ensure_future(ledger.append(_event(1)))
                writer = None
                for _ in range(200):
                    # Its own connection: a transaction sees one snapshot of the activity.
                    row = admin.execute(
                        "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                        "AND query LIKE '%audit_chains%' AND pid <> pg_backend_pid()"
                    ).fetchone()
                    if row:
                        writer = row[0]
                        break
                    await asyncio.sleep(0.02)
                assert writer is not None, "the batch never waited on the head"
                admin.execute("SELECT pg_terminate_backend(%s)", (writer,))
                await asyncio.sleep(0.2)
                blocker.rollback()
            assert await pending == 2
            await ledger.close()
            reader = PostgresLedgerReader(dsn)
            try:
                assert [e.event.derived_id for e in reader.events()] == ["art_0", "art_1"]
            finally:
                reader.close()

        asyncio.run(go())
    finally:
        pg.drop_database(dsn)


def _scoped(i: int, phase: str, attempt: str, scope: str) -> AuditEvent:
    return dataclasses.replace(_event(i, phase, attempt=attempt), scope=scope)


def _patient(backend: Backend) -> GroupCommitLedger:
    # The fixture's ledgers bound an append to 0.3 s, which a second sidecar's first
    # append (it connects) can exceed on a busy machine; fencing is not about time.
    if backend.name == "postgres":
        return PostgresLedger(backend.values["audit_dsn"], lock_timeout_ms=5000)
    return SqliteLedger(backend.values["audit_db"], busy_timeout_ms=5000)


def test_fencing_is_per_run_and_scope_across_sidecars(ledger_backend: Backend) -> None:
    async def go() -> None:
        ledger = _patient(ledger_backend)
        other = _patient(ledger_backend)
        await ledger.append(_scoped(0, "attempt_begin", "a1", "call_1"))
        await ledger.append(_scoped(1, "attempt_begin", "b1", "call_2"))
        await ledger.append(_scoped(2, "attempt_begin", "u1", ""))
        # Another sidecar begins a new attempt of call_1, and a new unscoped one.
        await other.append(_scoped(3, "attempt_begin", "a2", "call_1"))
        await other.append(_scoped(4, "attempt_begin", "u2", ""))
        for fenced in (_scoped(5, "intent", "a1", "call_1"), _scoped(6, "intent", "u1", "")):
            with pytest.raises(FencedError):
                await ledger.append(fenced)
        for i, attempt, scope in ((7, "b1", "call_2"), (8, "a2", "call_1"), (9, "u2", "")):
            await ledger.append(_scoped(i, "intent", attempt, scope))
        await ledger.close()
        await other.close()

    asyncio.run(go())
    reader = ledger_backend.reader()
    written = [(e.event.derived_id, e.event.scope) for e in reader.events()]
    assert [d for d, _ in written] == ["art_0", "art_1", "art_2", "art_3", "art_4", "art_7",
                                       "art_8", "art_9"]  # fmt: skip
    assert dict(written)["art_7"] == "call_2"
    assert inspect.verify(reader).intact
    reader.close()


# The ledger's table before scopes, as earlier sidecars made it.
_EVENTS_BEFORE_SCOPES = """
CREATE TABLE audit_events (
    seq {seq} PRIMARY KEY, ts TEXT NOT NULL, run_id TEXT NOT NULL, attempt_id TEXT NOT NULL,
    rpc TEXT NOT NULL, phase TEXT NOT NULL, rule TEXT NOT NULL, checkpoint TEXT NOT NULL,
    write_type TEXT NOT NULL, derived_id TEXT NOT NULL, request_id TEXT NOT NULL,
    occurrence INTEGER NOT NULL, digest TEXT NOT NULL, outcome TEXT NOT NULL,
    reason TEXT NOT NULL, failure_class TEXT NOT NULL, detail TEXT NOT NULL,
    prev_hash TEXT NOT NULL, hash TEXT NOT NULL
)"""


def _hash_before_scopes(seq: int, ts: str, event: AuditEvent, prev: str) -> str:
    # How an earlier sidecar hashed an event: every field it had, nothing else.
    content = {k: v for k, v in dataclasses.asdict(event).items()
               if k not in ("scope", "trace_id", "span_id")}  # fmt: skip
    body = json.dumps({"seq": seq, "ts": ts, **content}, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=True)  # fmt: skip
    return hashlib.sha256((prev + body).encode("ascii")).hexdigest()


def test_a_ledger_written_before_scopes_is_migrated_in_place_and_still_verifies(
    ledger_backend: Backend,
) -> None:
    # An earlier sidecar's ledger: its table without the scope column, and its chain.
    seq_type = "BIGINT" if ledger_backend.name == "postgres" else "INTEGER"
    ledger_backend.sql(_EVENTS_BEFORE_SCOPES.format(seq=seq_type))
    prev = GENESIS_HASH
    for seq, event in enumerate(
        [_event(0, "attempt_begin", attempt="old"), _event(1, "intent", attempt="old")], start=1
    ):
        ts = sql.now()
        digest = _hash_before_scopes(seq, ts, event, prev)
        assert digest == event_hash(seq, ts, event, prev)
        # No scope column then, nor the trace columns that came after it.
        row = sql.event_row(seq, ts, event, prev, digest)[: -len(schema.ADDED_COLUMNS)]
        ledger_backend.sql(
            f"INSERT INTO audit_events VALUES ({', '.join('?' * len(row))})", tuple(row)
        )
        prev = digest
    reader = ledger_backend.reader()  # a reader of a ledger not yet migrated
    assert [e.event.scope for e in reader.events()] == ["", ""]
    reader.close()

    async def go() -> None:
        ledger = ledger_backend.open()  # migrates
        await ledger.append(_event(2, "outcome", attempt="old"))
        await ledger.append(_scoped(3, "attempt_begin", "s1", "call_1"))
        await ledger.append(_scoped(4, "intent", "s1", "call_1"))
        await ledger.close()

    ledger_backend.sql("CREATE TABLE audit_head (id INTEGER PRIMARY KEY, seq INTEGER, hash TEXT)"
                       if ledger_backend.name == "sqlite" else
                       "CREATE TABLE audit_head (id BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (id), "
                       "seq BIGINT NOT NULL, hash TEXT NOT NULL)")  # fmt: skip
    ledger_backend.sql("INSERT INTO audit_head (id, seq, hash) VALUES (?, ?, ?)",
                       (1 if ledger_backend.name == "sqlite" else True, 2, prev))  # fmt: skip
    asyncio.run(go())
    reader = ledger_backend.reader()
    assert [(e.seq, e.event.scope) for e in reader.events()] == [
        (1, ""), (2, ""), (3, ""), (4, "call_1"), (5, "call_1")]  # fmt: skip
    assert inspect.verify(reader).intact
    reader.close()


_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
_SPAN = "00f067aa0ba902b7"


def _traced(i: int, phase: str = "outcome") -> AuditEvent:
    return dataclasses.replace(_event(i, phase), trace_id=_TRACE, span_id=_SPAN)


def test_a_ledger_written_before_trace_ids_gains_them_and_still_verifies(
    ledger_backend: Backend,
) -> None:
    # A ledger as the sidecars before tracing left it: a scope column, no trace columns.
    async def before() -> None:
        ledger = ledger_backend.open()
        for i in range(3):
            await ledger.append(_event(i))
        await ledger.close()

    asyncio.run(before())
    for column in ("trace_id", "span_id"):
        ledger_backend.sql(f"ALTER TABLE audit_events DROP COLUMN {column}")
    # Nor did those sidecars record schema versions.
    ledger_backend.sql("DROP TABLE audit_schema")
    reader = ledger_backend.reader()  # a reader of a ledger not yet migrated
    assert [(e.event.trace_id, e.event.span_id) for e in reader.events()] == [("", "")] * 3
    assert inspect.verify(reader).intact
    reader.close()
    # So do the operator's queries, read-only (`audit pending`, the console's counts).
    operator = open_operator_ledger(
        ledger_backend.values.get("audit_db"), ledger_backend.values.get("audit_dsn"),
        read_only=True,
    )  # fmt: skip
    try:
        assert [e.event.trace_id for e in operator.run_events("r")] == [""] * 3
        assert operator.pending() == []
    finally:
        operator.close()

    async def after() -> None:
        ledger = ledger_backend.open()  # migrates
        await ledger.append(_traced(3))
        await ledger.append(_event(4))
        await ledger.close()

    asyncio.run(after())
    reader = ledger_backend.reader()
    stored = list(reader.events())
    assert [(e.seq, e.event.trace_id, e.event.span_id) for e in stored] == [
        (1, "", ""), (2, "", ""), (3, "", ""), (4, _TRACE, _SPAN), (5, "", "")]  # fmt: skip
    assert inspect.verify(reader).intact
    # An event with no trace keeps the hash it would have had before trace ids came.
    untraced = stored[4]
    assert untraced.hash == _hash_before_traces(untraced)
    reader.close()
    # An event that holds no trace is stored with none, not with an empty string.
    assert ledger_backend.query("SELECT COUNT(*) FROM audit_events WHERE trace_id IS NULL") == [
        (4,)
    ]


def _hash_before_traces(stored: StoredEvent) -> str:
    content = {k: v for k, v in dataclasses.asdict(stored.event).items()
               if k not in ("trace_id", "span_id", "scope")}  # fmt: skip
    if stored.chain:  # the chain is hashed where it is not 0, as it was before traces
        content["chain"] = stored.chain
    body = json.dumps({"seq": stored.seq, "ts": stored.ts, **content}, sort_keys=True,
                      separators=(",", ":"), ensure_ascii=True)  # fmt: skip
    return hashlib.sha256((stored.prev_hash + body).encode("ascii")).hexdigest()


def test_an_event_pointed_at_another_trace_fails_verification(ledger_backend: Backend) -> None:
    async def go() -> None:
        ledger = ledger_backend.open()
        await ledger.append(_traced(0))
        await ledger.append(_traced(1))
        await ledger.close()

    asyncio.run(go())
    ledger_backend.sql("UPDATE audit_events SET trace_id = ? WHERE seq = 1", ("0" * 31 + "1",))
    reader = ledger_backend.reader()
    verdict = inspect.verify(reader)
    reader.close()
    assert not verdict.intact and verdict.first_bad == 1
