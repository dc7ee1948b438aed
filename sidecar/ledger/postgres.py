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

A sidecar holds at most ``pool_size`` server connections (``--audit-pool-size``, 2 by
default): one appends, the others serve the sidecar's reads, its heartbeat and its health
checks. Nothing needs a session of its own, so a pooler in transaction mode (PgBouncer) can
stand between the fleet and the server: each append's timeouts are set in its transaction
(``SET LOCAL``), no statement is prepared, no lock outlives its transaction. Health asks
the connection that appends, so that a sidecar that cannot write is NOT_SERVING.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
import structlog

from sidecar.ledger import liveness
from sidecar.ledger.base import AuditEvent, Beats, LedgerError, StoredEvent
from sidecar.ledger.pgschema import ensure_schema, one_line
from sidecar.ledger.schema import POSTGRES, present_columns, readable_columns
from sidecar.ledger.sql import SqlLedger, SqlLedgerReader, row_to_event
from sidecar.ops import pgbounds

_CONNECT_TIMEOUT_SECONDS = 5
# A health check, and the connection it may open, answer within this: readiness becomes
# NOT_SERVING within one probe period of the manifest's (5 s) when PostgreSQL does not.
PING_SECONDS = 2.0
# A read of the ledger by the sidecar (a step's earlier events) gets this long.
READ_SECONDS = 10.0
# SQLSTATE classes and codes that say the connection is gone, not the statement refused.
_CONNECTION_LOST = ("08", "57P01", "57P02", "57P03")

log = structlog.get_logger()

_T = TypeVar("_T")


def _connect(dsn: str, *, autocommit: bool, seconds: float = _CONNECT_TIMEOUT_SECONDS) -> Any:
    return pgbounds.connect(
        dsn, connect_timeout=seconds, autocommit=autocommit, application_name="actonce-ledger"
    )


# A ledger locked by another process must fail appends closed in bounded time, as SQLite's
# busy timeout does, rather than hold every write: set in each append's transaction, since a
# pooler in transaction mode keeps no session's settings.
_BOUNDED = "SELECT set_config('lock_timeout', %s, true), set_config('statement_timeout', %s, true)"
# Whether an append's transaction could write, and the head it would read.
_WRITABLE = (
    "SELECT current_setting('transaction_read_only') = 'off', "
    "(SELECT seq FROM audit_chains LIMIT 1)"
)


def _connection_lost(conn: psycopg.Connection[Any], error: psycopg.Error) -> bool:
    state = getattr(error, "sqlstate", None) or ""
    return conn.broken or state.startswith(_CONNECTION_LOST)


class PostgresLedger(SqlLedger):
    """An AuditLedger on a PostgreSQL database shared by many sidecars."""

    def __init__(self, dsn: str, *, lock_timeout_ms: int = 5000, pool_size: int = 2) -> None:
        # ``lock_timeout_ms`` is the busy timeout: an append fails closed within it,
        # whether PostgreSQL answers or not. The server's own lock timeout fires a
        # little earlier, so that a ledger merely locked fails the batch there, before
        # any of its appenders gives up, and no event is written after its write failed.
        super().__init__(POSTGRES, append_timeout_seconds=lock_timeout_ms / 1000)
        if pool_size < 2:
            raise ValueError("a PostgreSQL ledger needs 2 connections: one appends, one reads")
        self.dsn = dsn
        lock_ms = max(1, lock_timeout_ms - min(250, lock_timeout_ms // 5))
        self._bounds = (f"{lock_ms}ms", f"{lock_ms * 2}ms")
        state = ensure_schema(dsn)
        self._chains = state.chains
        if state.owner:
            log.warning(
                "ledger_owned_by_sidecar",
                role=state.role,
                why="this sidecar's role owns the ledger's tables (or is a superuser), so it "
                "could UPDATE or DELETE the fleet's audit: run sidecars as a writer role "
                "(actonce audit migrate --writer-role NAME)",
            )
        self._conn: psycopg.Connection[Any] | None = None
        # When an append last committed: a health check then needs no round trip of its own.
        self._committed_at: float | None = None
        # A batch still running when all of its appenders have given up (the server
        # stopped answering) is cut on this side, so that it cannot commit later.
        self._batch_seconds = lock_timeout_ms / 1000 + 0.25
        self._watchdog = pgbounds.Watchdog("ledger")
        self._readers = _Readers(dsn, pool_size - 1, self._watchdog)
        self._start_writer()

    def _writer_conn(self, seconds: float = _CONNECT_TIMEOUT_SECONDS) -> psycopg.Connection[Any]:
        if self._conn is None or pgbounds.stale(self._conn):
            self._drop_writer()
            self._conn = _connect(self.dsn, autocommit=False, seconds=seconds)
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
                    cur.execute(_BOUNDED, self._bounds)
                    results = self.append_in(cur, events)
                    committing = True
                self._committed_at = time.monotonic()
                return results
            except psycopg.Error as exc:
                self._committed_at = None
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
        self._readers.close()

    def _read(
        self, query: str, params: tuple[object, ...] = (), *, seconds: float = READ_SECONDS
    ) -> list[tuple[Any, ...]]:
        return self._readers.run(lambda conn: list(conn.execute(query, params).fetchall()), seconds)

    def beats(self) -> Beats:
        """What the sidecar's heartbeat writes through: a connection of the pool's readers,
        not one of its own (sidecar.ledger.liveness.Heartbeat)."""
        return _Beats(self._readers)

    async def ping(self) -> None:
        """Answer only when the connection that appends does: a sidecar whose writes cannot
        reach the ledger (a pooler that refuses them, say) is not ready, whatever its reads
        do. An append that committed within the last moments answers for it."""
        await asyncio.to_thread(self._ping_writer)

    def _ping_writer(self) -> None:
        done = self._committed_at
        if done is not None and time.monotonic() - done < PING_SECONDS:
            return
        if not self._committing.acquire(timeout=PING_SECONDS):
            raise LedgerError(f"the ledger's writer did not come free within {PING_SECONDS:g}s")
        try:
            conn = self._writer_conn(PING_SECONDS)
            with self._watchdog.bound(conn, PING_SECONDS), conn.transaction():
                conn.execute(_BOUNDED, self._bounds)
                row = conn.execute(_WRITABLE).fetchone()
        except psycopg.Error as exc:
            self._drop_writer()
            raise LedgerError(f"the ledger cannot be written: {one_line(exc)}") from exc
        finally:
            self._committing.release()
        if row is None or not row[0]:
            # A standby, or a pooler that hands out read-only sessions: every append fails.
            raise LedgerError("the ledger's connection is read-only: no append can commit")


class _Readers:
    """Up to ``size`` connections in autocommit, opened on demand, for the sidecar's reads
    of the ledger and its heartbeat; each call bounded by the watchdog."""

    def __init__(self, dsn: str, size: int, watchdog: pgbounds.Watchdog) -> None:
        self._dsn = dsn
        self._slots = threading.BoundedSemaphore(size)
        self._lock = threading.Lock()
        self._idle: list[psycopg.Connection[Any]] = []
        self._watchdog = watchdog

    def run(self, call: Callable[[psycopg.Connection[Any]], _T], seconds: float) -> _T:
        """``call`` on a connection of the pool, all of it (the wait for a free connection,
        connecting, the call) within ``seconds``; LedgerError when the ledger does not
        answer in time."""
        started = time.monotonic()
        if not self._slots.acquire(timeout=seconds):
            raise LedgerError(f"ledger could not be read within {seconds:g}s")
        conn: psycopg.Connection[Any] | None = None
        try:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None or pgbounds.stale(conn):
                _close(conn)
                conn = _connect(self._dsn, autocommit=True, seconds=min(seconds, 5))
            left = max(0.1, seconds - (time.monotonic() - started))
            with self._watchdog.bound(conn, left):
                answer = call(conn)
            with self._lock:
                self._idle.append(conn)
            return answer
        except psycopg.Error as exc:
            _close(conn)
            raise LedgerError(f"ledger could not be read: {one_line(exc)}") from exc
        except BaseException:
            _close(conn)
            raise
        finally:
            self._slots.release()

    def close(self) -> None:
        # A read stuck on a server that stopped answering keeps its connection; the
        # watchdog cuts it, and the process does not wait for it.
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            _close(conn)


def _close(conn: psycopg.Connection[Any] | None) -> None:
    if conn is not None:
        with contextlib.suppress(psycopg.Error):
            conn.close()


class _Beats:
    """A heartbeat's connection that is the ledger's readers: it beats on whichever is free."""

    def __init__(self, readers: _Readers) -> None:
        self._readers = readers

    def execute(self, statement: str, params: tuple[object, ...]) -> None:
        self._readers.run(lambda conn: conn.execute(statement, params), liveness.CALL_SECONDS)

    def close(self) -> None:
        """The readers stay the ledger's."""


class PostgresLedgerReader(SqlLedgerReader[psycopg.Connection[Any]]):
    """Read-only access to a PostgreSQL ledger for ``actonce audit``."""

    def __init__(self, dsn: str) -> None:
        try:
            conn = _connect(dsn, autocommit=True)
        except psycopg.Error as exc:
            raise LedgerError(f"cannot open the PostgreSQL ledger: {one_line(exc)}") from exc
        # Every transaction this reader opens (a snapshot, a scan) reads one snapshot and
        # can write nothing.
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        conn.read_only = True
        # A ledger no sidecar has opened since its newest columns came is read as it is.
        super().__init__(conn, POSTGRES, readable_columns(present_columns(conn, POSTGRES)))

    def events(
        self, *, run_id: str | None = None, after: int = 0, chain: int | None = None
    ) -> Iterator[StoredEvent]:
        # A server-side cursor streams a large ledger instead of loading it whole;
        # it lives in a transaction of its own.
        query, params = self._events_query(run_id, after, chain)
        with self._conn.transaction(), self._conn.cursor(name="audit_events_scan") as cur:
            cur.execute(query, params)
            for row in cur:
                yield row_to_event(row)

    def _has_table(self, name: str) -> bool:
        found = self._conn.execute("SELECT to_regclass(%s)", (name,)).fetchone()
        return found is not None and found[0] is not None

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        # REPEATABLE READ, read only: the transaction's first statement fixes its snapshot;
        # a scan inside it runs in a savepoint of the same transaction.
        with self._conn.transaction(force_rollback=True):
            yield

    def close(self) -> None:
        self._conn.close()
