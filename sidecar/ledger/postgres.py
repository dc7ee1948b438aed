"""The PostgreSQL ledger: one ledger shared by many sidecars, group commit.

Every sidecar appends to the same hash chain. A batch takes the chain's head
row ``FOR UPDATE``, so batches from different sidecars serialize on it while
each still carries many events in one commit. The runs table is read in the
same transaction, so an attempt fenced on one sidecar by a newer attempt begun
on another is refused before its intent is written.

Connections are bounded on this side (sidecar.ops.pgbounds): a server that stops
answering fails appends closed within the busy timeout, health checks within a
probe period, and no call holds a thread for long. An idle writer connection that
the server closed (a restart, ``idle_session_timeout``) is replaced before use,
and a batch whose connection was lost before its COMMIT was sent (so nothing of
it landed) is written again once, on a fresh connection. Only a batch whose
commit is in doubt fails closed. When PostgreSQL goes away, appends fail closed;
when it returns, they succeed again without a restart of the sidecar.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import structlog

from sidecar.ledger.base import AuditEvent, LedgerError, StoredEvent
from sidecar.ledger.pgschema import ensure_schema, one_line
from sidecar.ledger.schema import readable_columns, row_to_event
from sidecar.ledger.sql import POSTGRES, SqlLedger, SqlLedgerReader, append, present_columns
from sidecar.ops import pgbounds

_CONNECT_TIMEOUT_SECONDS = 5
# A health check, and the connection it may open, answer within this: readiness turns
# NOT_SERVING within one probe period of the manifest's (5 s) when PostgreSQL does not.
PING_SECONDS = 2.0
# A read of the ledger by the sidecar (a step's earlier events) gets this long.
READ_SECONDS = 10.0
# SQLSTATE classes and codes that say the connection is gone, not the statement refused.
_CONNECTION_LOST = ("08", "57P01", "57P02", "57P03")

log = structlog.get_logger()


def _connect(
    dsn: str, *, lock_timeout_ms: int = 5000, connect_timeout: float = _CONNECT_TIMEOUT_SECONDS
) -> psycopg.Connection[Any]:
    # A ledger locked by another process must fail appends closed in bounded
    # time, as SQLite's busy timeout does, rather than hold every write.
    return psycopg.connect(
        pgbounds.conninfo(dsn, connect_timeout=connect_timeout),
        autocommit=False,
        options=f"-c lock_timeout={int(lock_timeout_ms)} "
        f"-c statement_timeout={int(lock_timeout_ms) * 2}",
    )


def _connection_lost(conn: psycopg.Connection[Any], error: psycopg.Error) -> bool:
    state = getattr(error, "sqlstate", None) or ""
    return conn.broken or state.startswith(_CONNECTION_LOST)


class PostgresLedger(SqlLedger):
    """An AuditLedger on a PostgreSQL database shared by many sidecars."""

    def __init__(self, dsn: str, *, lock_timeout_ms: int = 5000) -> None:
        # ``lock_timeout_ms`` is the busy timeout: an append fails closed within it,
        # whether PostgreSQL answers or not. The server's own lock timeout fires a
        # little earlier, so that a ledger merely locked fails the batch there, before
        # any of its appenders gives up, and no event is written after its write failed.
        super().__init__(POSTGRES, append_timeout_seconds=lock_timeout_ms / 1000)
        self.dsn = dsn
        self._lock_timeout_ms = max(1, lock_timeout_ms - min(250, lock_timeout_ms // 5))
        state = ensure_schema(dsn)
        if state.owner:
            log.warning(
                "ledger_owned_by_sidecar",
                role=state.role,
                why="this sidecar's role owns the ledger's tables (or is a superuser), so it "
                "could UPDATE or DELETE the fleet's audit: run sidecars as a writer role "
                "(actonce audit migrate --writer-role NAME)",
            )
        self._conn: psycopg.Connection[Any] | None = None
        self._read_lock = threading.Lock()
        self._reader: psycopg.Connection[Any] | None = None
        # A batch still running when all of its appenders have given up (the server
        # stopped answering) is cut on this side, so that it cannot commit later.
        self._batch_seconds = lock_timeout_ms / 1000 + 0.25
        self._watchdog = pgbounds.Watchdog("ledger")
        self._start_writer()

    def _writer_conn(self) -> psycopg.Connection[Any]:
        if self._conn is None or pgbounds.stale(self._conn):
            self._drop_writer()
            self._conn = _connect(self.dsn, lock_timeout_ms=self._lock_timeout_ms)
        return self._conn

    def _write_batch(self, events: list[AuditEvent]) -> list[int | LedgerError]:
        for retry in (False, True):
            conn = self._writer_conn()
            committing = False
            try:
                with (
                    self._watchdog.bound(conn, self._batch_seconds),
                    conn.transaction(),
                    conn.cursor() as cur,
                ):
                    results = append(cur, self._sql, events)
                    committing = True
                return results
            except psycopg.Error as exc:
                # Drop the connection: the next batch reconnects, so the ledger
                # recovers by itself when PostgreSQL comes back.
                self._drop_writer()
                # Lost before COMMIT was sent, PostgreSQL rolled the batch back: nothing
                # of it landed, and a fresh connection may take it. A commit in doubt,
                # or a statement the server refused, fails the batch closed.
                if committing or retry or not _connection_lost(conn, exc):
                    raise
                log.info("audit_batch_written_again", error=str(exc), batch=len(events))
        raise AssertionError("unreachable")

    def _drop_writer(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None

    def _close_backend(self) -> None:
        self._drop_writer()
        # A read stuck on a server that stopped answering keeps its connection; the
        # watchdog cuts it, and the process does not wait for it.
        if self._read_lock.acquire(timeout=PING_SECONDS):
            try:
                self._drop_reader()
            finally:
                self._read_lock.release()

    def _read(
        self, query: str, params: tuple[object, ...] = (), *, seconds: float = READ_SECONDS
    ) -> list[tuple[Any, ...]]:
        # Every step bounded: the lock (another read may be stuck), the connection,
        # and the query itself, so that a read never holds its thread for long.
        started = time.monotonic()
        if not self._read_lock.acquire(timeout=seconds):
            raise LedgerError(f"ledger could not be read within {seconds:g}s")
        try:
            if self._reader is None or pgbounds.stale(self._reader):
                self._drop_reader()
                self._reader = psycopg.connect(
                    pgbounds.conninfo(self.dsn, connect_timeout=min(seconds, 5)),
                    autocommit=True,
                )
            left = max(0.1, seconds - (time.monotonic() - started))
            with self._watchdog.bound(self._reader, left):
                return list(self._reader.execute(query, params).fetchall())
        except psycopg.Error as exc:
            self._drop_reader()
            raise LedgerError(f"ledger could not be read: {exc}") from exc
        finally:
            self._read_lock.release()

    def _drop_reader(self) -> None:
        if self._reader is not None:
            try:
                self._reader.close()
            finally:
                self._reader = None

    async def ping(self) -> None:
        await asyncio.to_thread(self._read, "SELECT 1", seconds=PING_SECONDS)


class PostgresLedgerReader(SqlLedgerReader[psycopg.Connection[Any]]):
    """Read-only access to a PostgreSQL ledger for ``actonce audit``."""

    def __init__(self, dsn: str) -> None:
        try:
            conn = psycopg.connect(dsn, connect_timeout=_CONNECT_TIMEOUT_SECONDS, autocommit=True)
        except psycopg.Error as exc:
            raise LedgerError(f"cannot open the PostgreSQL ledger: {one_line(exc)}") from exc
        # Every transaction this reader opens (a snapshot, a scan) reads one snapshot and
        # can write nothing.
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        conn.read_only = True
        # A ledger no sidecar has opened since its newest columns came is read as it is.
        super().__init__(conn, POSTGRES, readable_columns(present_columns(conn, POSTGRES)))

    def events(self, *, run_id: str | None = None, after: int = 0) -> Iterator[StoredEvent]:
        # A server-side cursor streams a large ledger instead of loading it whole;
        # it lives in a transaction of its own.
        query, params = self._events_query(run_id, after)
        with self._conn.transaction(), self._conn.cursor(name="audit_events_scan") as cur:
            cur.execute(query, params)
            for row in cur:
                yield row_to_event(row)

    def _has_checkpoints(self) -> bool:
        found = self._conn.execute("SELECT to_regclass('audit_checkpoints')").fetchone()
        return found is not None and found[0] is not None

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        # REPEATABLE READ, read only: the transaction's first statement fixes its snapshot;
        # a scan inside it runs in a savepoint of the same transaction.
        with self._conn.transaction(force_rollback=True):
            yield

    def close(self) -> None:
        self._conn.close()
