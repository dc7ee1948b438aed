"""The SQLite ledger: one file, WAL, ``synchronous=FULL``, group commit.

One writer thread owns the connection. Appends queue up while it commits;
it then writes every queued event in one transaction and one sync, and only
after that commit does it wake each appender. Concurrent writes thus share a
sync, and no answer is sent before its own event is on disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import queue
import sqlite3
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import structlog

from sidecar.ledger.base import (
    GENESIS_HASH,
    AuditEvent,
    LedgerError,
    StoredEvent,
    event_hash,
)

log = structlog.get_logger()

# Most events a single commit carries; bounds a batch's latency under load.
MAX_BATCH = 512

SCHEMA = """
CREATE TABLE IF NOT EXISTS audit_events (
    seq INTEGER PRIMARY KEY,
    ts TEXT NOT NULL,
    run_id TEXT NOT NULL,
    attempt_id TEXT NOT NULL,
    rpc TEXT NOT NULL,
    phase TEXT NOT NULL,
    rule TEXT NOT NULL,
    checkpoint TEXT NOT NULL,
    write_type TEXT NOT NULL,
    derived_id TEXT NOT NULL,
    request_id TEXT NOT NULL,
    occurrence INTEGER NOT NULL,
    digest TEXT NOT NULL,
    outcome TEXT NOT NULL,
    reason TEXT NOT NULL,
    failure_class TEXT NOT NULL,
    detail TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_events_run ON audit_events (run_id, seq);
CREATE INDEX IF NOT EXISTS audit_events_derived ON audit_events (derived_id);
"""

COLUMNS = (
    "seq, ts, run_id, attempt_id, rpc, phase, rule, checkpoint, write_type, derived_id, "
    "request_id, occurrence, digest, outcome, reason, failure_class, detail, prev_hash, hash"
)


def connect(path: Path, *, busy_timeout_ms: int) -> sqlite3.Connection:
    """Open a ledger file with the settings durability needs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
    conn.execute("PRAGMA journal_mode = WAL")
    # FULL: a commit in WAL mode is fsync'd before it returns; NORMAL would
    # lose the last commits on power loss, which an audit ledger must not.
    conn.execute("PRAGMA synchronous = FULL")
    conn.executescript(SCHEMA)
    return conn


def row_to_event(row: tuple[object, ...]) -> StoredEvent:
    """Decode one ``audit_events`` row (in COLUMNS order)."""
    (seq, ts, run_id, attempt_id, rpc, phase, rule, checkpoint, write_type, derived_id,
     request_id, occurrence, digest, outcome, reason, failure_class, detail, prev_hash,
     hash_) = row  # fmt: skip
    event = AuditEvent(
        run_id=str(run_id),
        attempt_id=str(attempt_id),
        rpc=str(rpc),
        phase=str(phase),
        rule=str(rule),
        checkpoint=str(checkpoint),
        write_type=str(write_type),
        derived_id=str(derived_id),
        request_id=str(request_id),
        occurrence=int(str(occurrence)),
        digest=str(digest),
        outcome=str(outcome),
        reason=str(reason),
        failure_class=str(failure_class),
        detail=json.loads(str(detail)),
    )
    return StoredEvent(int(str(seq)), str(ts), event, str(prev_hash), str(hash_))


@dataclass
class _Pending:
    event: AuditEvent
    future: asyncio.Future[int]
    loop: asyncio.AbstractEventLoop


class SqliteLedger:
    """An AuditLedger on one SQLite file."""

    def __init__(self, path: Path, *, busy_timeout_ms: int = 5000) -> None:
        self.path = path
        self._busy_timeout_ms = busy_timeout_ms
        self._conn = connect(path, busy_timeout_ms=busy_timeout_ms)
        self._queue: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()
        self._closed = False
        self._writer = threading.Thread(target=self._run, name="ledger-writer", daemon=True)
        self._writer.start()

    async def append(self, event: AuditEvent) -> int:
        if self._closed:
            raise LedgerError("ledger is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()
        self._queue.put(_Pending(event, future, loop))
        return await future

    async def events_for(self, derived_id: str) -> list[StoredEvent]:
        def query() -> list[StoredEvent]:
            conn = sqlite3.connect(self.path, timeout=self._busy_timeout_ms / 1000)
            try:
                rows = conn.execute(
                    f"SELECT {COLUMNS} FROM audit_events WHERE derived_id = ? ORDER BY seq",
                    (derived_id,),
                ).fetchall()
            finally:
                conn.close()
            return [row_to_event(row) for row in rows]

        try:
            return await asyncio.to_thread(query)
        except sqlite3.Error as exc:
            raise LedgerError(f"ledger could not be read: {exc}") from exc

    async def ping(self) -> None:
        def check() -> None:
            conn = sqlite3.connect(self.path, timeout=1.0)
            try:
                conn.execute("SELECT 1 FROM audit_events LIMIT 1").fetchall()
            finally:
                conn.close()

        try:
            await asyncio.to_thread(check)
        except sqlite3.Error as exc:
            raise LedgerError(f"ledger does not answer: {exc}") from exc

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        await asyncio.to_thread(self._writer.join)
        self._conn.close()

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            stop = False
            while len(batch) < MAX_BATCH:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                    break
                batch.append(more)
            self._commit(batch)
            if stop:
                return

    def _commit(self, batch: list[_Pending]) -> None:
        try:
            seqs = self._write(batch)
        except Exception as exc:  # every failure of the batch fails each append closed
            log.warning("audit_append_failed", error=str(exc), batch=len(batch))
            error = LedgerError(f"audit event not persisted: {exc}")
            for pending in batch:
                _wake(pending, _settle_error, error)
            return
        for pending, seq in zip(batch, seqs, strict=True):
            _wake(pending, _settle, seq)

    def _write(self, batch: list[_Pending]) -> list[int]:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Read the chain's head inside the transaction: another process
            # (an operator's tool) may have appended since our last commit.
            row = conn.execute(
                "SELECT seq, hash FROM audit_events ORDER BY seq DESC LIMIT 1"
            ).fetchone()
            seq, prev = (int(row[0]), str(row[1])) if row else (0, GENESIS_HASH)
            seqs = []
            for pending in batch:
                seq += 1
                ts = datetime.now(UTC).isoformat(timespec="microseconds")
                event = pending.event
                digest = event_hash(seq, ts, event, prev)
                conn.execute(
                    f"INSERT INTO audit_events ({COLUMNS}) VALUES "
                    "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (
                        seq, ts, event.run_id, event.attempt_id, event.rpc, event.phase,
                        event.rule, event.checkpoint, event.write_type, event.derived_id,
                        event.request_id, event.occurrence, event.digest, event.outcome,
                        event.reason, event.failure_class,
                        json.dumps(event.detail, sort_keys=True, separators=(",", ":")),
                        prev, digest,
                    ),
                )  # fmt: skip
                prev = digest
                seqs.append(seq)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return seqs


def _settle(future: asyncio.Future[int], seq: int) -> None:
    if not future.done():
        future.set_result(seq)


def _settle_error(future: asyncio.Future[int], error: LedgerError) -> None:
    if not future.done():
        future.set_exception(error)


def _wake(pending: _Pending, settle: Callable[..., None], value: object) -> None:
    # The appender's loop may be gone (its call was cancelled and the server
    # stopped); the event is durable all the same, and the writer must live on.
    with contextlib.suppress(RuntimeError):
        pending.loop.call_soon_threadsafe(settle, pending.future, value)


def read_events(path: Path, *, run_id: str | None = None) -> Iterator[StoredEvent]:
    """Every event of a ledger file in order (read-only), or one run's."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        if run_id is None:
            rows = conn.execute(f"SELECT {COLUMNS} FROM audit_events ORDER BY seq")
        else:
            rows = conn.execute(
                f"SELECT {COLUMNS} FROM audit_events WHERE run_id = ? ORDER BY seq", (run_id,)
            )
        for row in rows:
            yield row_to_event(row)
    finally:
        conn.close()
