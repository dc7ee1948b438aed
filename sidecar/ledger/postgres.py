"""The PostgreSQL ledger: one ledger shared by many sidecars, group commit.

Every sidecar appends to the same hash chain. A batch takes the chain's head
row ``FOR UPDATE``, so batches from different sidecars serialize on it while
each still carries many events in one commit. The runs table is read in the
same transaction, so an attempt fenced on one sidecar by a newer attempt begun
on another is refused before its intent is written.

The writer's connection is re-opened by the next batch after a failure: when
PostgreSQL goes away, appends fail closed; when it returns, they succeed
again without a restart of the sidecar.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from sidecar.ledger.base import (
    GENESIS_HASH,
    AuditEvent,
    LedgerError,
    RunSummary,
    StoredEvent,
)
from sidecar.ledger.group_commit import GroupCommitLedger
from sidecar.ledger.schema import COLUMNS, chain, fenced_runs, row_to_event, tables

SCHEMA = (
    tables("BIGINT")
    + """
CREATE TABLE IF NOT EXISTS audit_head (
    id BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (id),
    seq BIGINT NOT NULL,
    hash TEXT NOT NULL
);
INSERT INTO audit_head (id, seq, hash) VALUES (TRUE, 0, '{genesis}') ON CONFLICT DO NOTHING;
"""
)

_INSERT = f"INSERT INTO audit_events ({COLUMNS}) VALUES ({', '.join(['%s'] * 19)})"
_CONNECT_TIMEOUT_SECONDS = 5


def _connect(dsn: str, *, lock_timeout_ms: int = 5000) -> psycopg.Connection[Any]:
    # A ledger locked by another process must fail appends closed in bounded
    # time, as SQLite's busy timeout does, rather than hold every write.
    return psycopg.connect(
        dsn,
        connect_timeout=_CONNECT_TIMEOUT_SECONDS,
        autocommit=False,
        options=f"-c lock_timeout={int(lock_timeout_ms)} "
        f"-c statement_timeout={int(lock_timeout_ms) * 2}",
    )


def ensure_schema(dsn: str) -> None:
    """Create the ledger's tables if missing; safe to run from many sidecars at once."""
    with _connect(dsn) as conn:
        # The advisory lock keeps two sidecars starting together from racing
        # on CREATE TABLE IF NOT EXISTS, which is not atomic in PostgreSQL.
        conn.execute("SELECT pg_advisory_xact_lock(7263001)")
        conn.execute(SCHEMA.replace("{genesis}", GENESIS_HASH))
        conn.commit()


class PostgresLedger(GroupCommitLedger):
    """An AuditLedger on a PostgreSQL database shared by many sidecars."""

    def __init__(self, dsn: str, *, lock_timeout_ms: int = 5000) -> None:
        super().__init__()
        self.dsn = dsn
        self._lock_timeout_ms = lock_timeout_ms
        try:
            ensure_schema(dsn)
        except psycopg.Error as exc:
            raise LedgerError(f"cannot open the PostgreSQL ledger: {exc}") from exc
        self._conn: psycopg.Connection[Any] | None = None
        self._read_lock = threading.Lock()
        self._reader: psycopg.Connection[Any] | None = None
        self._start_writer()

    def _writer_conn(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = _connect(self.dsn, lock_timeout_ms=self._lock_timeout_ms)
        return self._conn

    def _write_batch(self, events: list[AuditEvent]) -> list[int | LedgerError]:
        try:
            conn = self._writer_conn()
            with conn.transaction(), conn.cursor() as cur:
                cur.execute("SELECT seq, hash FROM audit_head WHERE id FOR UPDATE")
                head = cur.fetchone()
                assert head is not None
                seq, prev = int(head[0]), str(head[1])
                # One round trip for the newest attempt of every run the batch fences,
                # not one per intent.
                runs = fenced_runs(events)
                newest: dict[str, str] = {}
                if runs:
                    cur.execute(
                        "SELECT run_id, attempt_id FROM audit_runs WHERE run_id = ANY(%s)",
                        (runs,),
                    )
                    newest.update((str(r), str(a)) for r, a in cur.fetchall())
                batch = chain(events, seq, prev, newest)
                if batch.begun:
                    cur.executemany(
                        "INSERT INTO audit_runs (run_id, attempt_id) VALUES (%s, %s) "
                        "ON CONFLICT (run_id) DO UPDATE SET attempt_id = EXCLUDED.attempt_id",
                        batch.begun,
                    )
                if batch.rows:
                    cur.executemany(_INSERT, batch.rows)
                    cur.execute(
                        "UPDATE audit_head SET seq = %s, hash = %s WHERE id",
                        (batch.seq, batch.head),
                    )
            return batch.results
        except psycopg.Error:
            # Drop the connection: the next batch reconnects, so the ledger
            # recovers by itself when PostgreSQL comes back.
            self._drop_writer()
            raise

    def _drop_writer(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None

    def _close_backend(self) -> None:
        self._drop_writer()
        with self._read_lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None

    def _query(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        with self._read_lock:
            try:
                if self._reader is None or self._reader.closed or self._reader.broken:
                    self._reader = psycopg.connect(
                        self.dsn, connect_timeout=_CONNECT_TIMEOUT_SECONDS, autocommit=True
                    )
                return list(self._reader.execute(sql, params).fetchall())
            except psycopg.Error as exc:
                if self._reader is not None:
                    self._reader.close()
                    self._reader = None
                raise LedgerError(f"ledger could not be read: {exc}") from exc

    async def events_for(self, derived_id: str) -> list[StoredEvent]:
        rows = await asyncio.to_thread(
            self._query,
            f"SELECT {COLUMNS} FROM audit_events WHERE derived_id = %s ORDER BY seq",
            (derived_id,),
        )
        return [row_to_event(row) for row in rows]

    async def ping(self) -> None:
        await asyncio.to_thread(self._query, "SELECT 1")


class PostgresLedgerReader:
    """Read-only access to a PostgreSQL ledger for ``actonce audit``."""

    def __init__(self, dsn: str) -> None:
        try:
            self._conn = psycopg.connect(
                dsn, connect_timeout=_CONNECT_TIMEOUT_SECONDS, autocommit=True
            )
        except psycopg.Error as exc:
            raise LedgerError(f"cannot open the PostgreSQL ledger: {exc}") from exc
        # Every transaction this reader opens (a snapshot, a scan) reads one snapshot and
        # can write nothing.
        self._conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        self._conn.read_only = True

    def runs(self) -> list[RunSummary]:
        rows = self._conn.execute(
            "SELECT run_id, MAX(rule), COUNT(DISTINCT attempt_id), COUNT(*), MIN(ts), MAX(ts) "
            "FROM audit_events GROUP BY run_id ORDER BY MAX(seq) DESC"
        ).fetchall()
        return [RunSummary(str(r[0]), str(r[1]), int(r[2]), int(r[3]), str(r[4]), str(r[5]))
                for r in rows]  # fmt: skip

    def events(self, *, run_id: str | None = None, after: int = 0) -> Iterator[StoredEvent]:
        # A server-side cursor streams a large ledger instead of loading it whole;
        # it lives in a transaction of its own.
        with self._conn.transaction(), self._conn.cursor(name="audit_events_scan") as cur:
            if run_id is None:
                cur.execute(
                    f"SELECT {COLUMNS} FROM audit_events WHERE seq > %s ORDER BY seq", (after,)
                )
            else:
                cur.execute(
                    f"SELECT {COLUMNS} FROM audit_events WHERE run_id = %s AND seq > %s "
                    "ORDER BY seq",
                    (run_id, after),
                )
            for row in cur:
                yield row_to_event(row)

    def count(self) -> int:
        row = self._conn.execute("SELECT COUNT(*) FROM audit_events").fetchone()
        return int(row[0]) if row else 0

    def head(self) -> tuple[int, str]:
        row = self._conn.execute("SELECT seq, hash FROM audit_head WHERE id").fetchone()
        return (int(row[0]), str(row[1])) if row else (0, GENESIS_HASH)

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        # REPEATABLE READ, read only: the transaction's first statement fixes its snapshot;
        # a scan inside it runs in a savepoint of the same transaction.
        with self._conn.transaction(force_rollback=True):
            yield

    def close(self) -> None:
        self._conn.close()
