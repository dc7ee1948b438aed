"""The operator's ledger, opened on a SQLite file or a PostgreSQL database.

The queries are written once, in :mod:`sidecar.ledger.operator_queries`; each backend
here supplies their primitives: run a statement, and hold the chain's head locked for a
transaction that appends. :func:`open_operator_ledger` picks the backend a command or
the console was given.

Each backend also says who decides, as it authenticates them: on PostgreSQL the role the
operator connected as (the ledger's trigger refuses a decision from any role but an
operator's, sidecar.ledger.pgschema); on SQLite, which has no roles, the operator key the
decision is signed with (sidecar.ledger.operator_keys). A SQLite decision made without a
key is recorded unsigned, as before keys, and ``audit verify`` reports it once the ledger's
decisions are signed.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from sidecar.ledger.base import AuditEvent, LedgerError
from sidecar.ledger.liveness import POSTGRES_CLOCK, SQLITE_CLOCK
from sidecar.ledger.operator_keys import OperatorKey, load_key
from sidecar.ledger.operator_queries import (
    OUTCOMES,
    InFlight,
    LockedHead,
    OperatorLedger,
    PendingTracker,
    RunFilter,
    RunRow,
    RunsPage,
)
from sidecar.ledger.pending import DecisionRefused
from sidecar.ledger.schema import POSTGRES, SQLITE
from sidecar.ledger.sql import Queries, chain_of, ledger_clock

# The queries' names stay importable from here, beside the backends that run them.
__all__ = [
    "OUTCOMES",
    "InFlight",
    "OperatorLedger",
    "PendingTracker",
    "PostgresOperatorLedger",
    "RunFilter",
    "RunRow",
    "RunsPage",
    "SqliteOperatorLedger",
    "open_operator_ledger",
]


class SqliteOperatorLedger(OperatorLedger):
    """The queries on a ledger file. Opened read-write: decisions append to it."""

    _queries = Queries(SQLITE)
    _clock = SQLITE_CLOCK

    def __init__(
        self,
        path: Path,
        *,
        busy_timeout_ms: int = 5000,
        read_only: bool = False,
        operator_key: OperatorKey | None = None,
    ) -> None:
        from sidecar.ledger.sqlite import connect

        if not path.exists():
            raise LedgerError(f"no ledger at {path}")
        self.path = path
        self._key = operator_key
        try:
            if read_only:
                self._conn = sqlite3.connect(
                    f"file:{path}?mode=ro",
                    uri=True,
                    check_same_thread=False,
                    timeout=busy_timeout_ms / 1000,
                )
            else:
                # connect() brings the schema (and its indexes) up to date.
                self._conn = connect(path, busy_timeout_ms=busy_timeout_ms)
        except sqlite3.Error as exc:
            raise LedgerError(f"cannot open the ledger at {path}: {exc}") from exc
        # Re-entrant: a decision's reads run inside its own locked transaction.
        self._lock = threading.RLock()

    def _fetch(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            try:
                return list(self._conn.execute(sql, tuple(params)).fetchall())
            except sqlite3.Error as exc:
                raise LedgerError(f"ledger could not be read: {exc}") from exc

    def _execute_many(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        self._conn.executemany(sql, rows)

    def operator(self) -> str:
        # Without a key nobody is authenticated: "" (the decision goes unsigned).
        return "" if self._key is None else self._key.id

    def signs(self) -> bool:
        """Whether decisions are signed: an operator key was given."""
        return self._key is not None

    def _attest(self, event: AuditEvent, seq: int, head: str) -> AuditEvent:
        # Unsigned without a key: `audit verify` reports it once decisions are signed.
        return event if self._key is None else self._key.sign(event, seq, head)

    @contextlib.contextmanager
    def _locked_chain(self, run_id: str) -> Iterator[LockedHead]:
        # BEGIN IMMEDIATE takes the file's write lock, as the sidecar's writer does; the
        # file has one chain.
        with self._lock:
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    query, params = self._queries.lock_heads([0])
                    _chain, seq, hash_, newest, now = conn.execute(query, params).fetchone()
                    yield LockedHead(0, seq, hash_, ledger_clock(newest, now), seq + 1)
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise LedgerError(f"the decision was not recorded: {exc}") from exc

    def size_bytes(self) -> int:
        total = 0
        for suffix in ("", "-wal"):
            with contextlib.suppress(OSError):
                total += Path(f"{self.path}{suffix}").stat().st_size
        return total

    def close(self) -> None:
        with self._lock:
            self._conn.close()


class PostgresOperatorLedger(OperatorLedger):
    """The queries on a PostgreSQL ledger shared by many sidecars."""

    _queries = Queries(POSTGRES)
    _clock = POSTGRES_CLOCK

    def __init__(self, dsn: str, *, read_only: bool = False, lock_timeout_ms: int = 5000) -> None:
        import psycopg

        from sidecar.ledger.pgschema import ensure_schema, one_line

        self._psycopg = psycopg
        self._dsn = dsn
        # A ledger locked by another process fails a decision in bounded time, as
        # SQLite's busy timeout does, rather than hang the operator's command: set in the
        # decision's transaction, which a pooler in transaction mode keeps (no startup
        # options, which it refuses).
        self._lock_timeout = f"{int(lock_timeout_ms)}ms"
        if not read_only:
            ensure_schema(dsn)
        try:
            self._conn = self._connect()
        except psycopg.Error as exc:
            raise LedgerError(f"cannot open the PostgreSQL ledger: {one_line(exc)}") from exc
        self._lock = threading.RLock()

    def _connect(self) -> Any:
        from sidecar.ops import pgbounds

        return pgbounds.connect(self._dsn, connect_timeout=5, autocommit=True)

    def _connection(self) -> Any:
        # A console outlives a restart of PostgreSQL: the next query reconnects.
        if self._conn.closed or self._conn.broken:
            try:
                self._conn = self._connect()
            except self._psycopg.Error as exc:
                raise LedgerError(f"cannot reach the PostgreSQL ledger: {exc}") from exc
        return self._conn

    def _fetch(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            try:
                return list(self._connection().execute(sql, tuple(params)).fetchall())
            except self._psycopg.Error as exc:
                raise LedgerError(f"ledger could not be read: {exc}") from exc

    def _execute_many(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        try:
            with self._conn.cursor() as cur:
                cur.executemany(sql, rows)
        except self._psycopg.errors.InsufficientPrivilege as exc:
            # The ledger's trigger: this role is no operator's (sidecar.ledger.pgschema).
            raise DecisionRefused(str(exc).strip().splitlines()[0]) from None

    def operator(self) -> str:
        rows = self._fetch("SELECT current_user")
        return str(rows[0][0])

    @contextlib.contextmanager
    def _locked_chain(self, run_id: str) -> Iterator[LockedHead]:
        with self._lock:
            conn = self._connection()
            try:
                with conn.transaction():
                    conn.execute(
                        "SELECT set_config('lock_timeout', %s, true)", (self._lock_timeout,)
                    )
                    counted = conn.execute(self._queries.chain_count).fetchone()
                    chains = int(counted[0]) if counted else 1
                    query, params = self._queries.lock_heads([chain_of(run_id, chains)])
                    head = conn.execute(query, params).fetchone()
                    assert head is not None
                    chain, seq, hash_, newest, now = head
                    number = int(seq) + 1
                    if chains > 1:  # the chains share one sequence (sidecar.ledger.sql.chain_of)
                        assert self._queries.dialect.numbers is not None
                        taken = conn.execute(self._queries.dialect.numbers, (1,)).fetchone()
                        number = int(taken[0])
                    clock = ledger_clock(newest, now)
                    yield LockedHead(int(chain), int(seq), str(hash_), clock, number)
            except self._psycopg.Error as exc:
                raise LedgerError(f"the decision was not recorded: {exc}") from exc

    def size_bytes(self) -> int:
        rows = self._fetch("SELECT pg_total_relation_size('audit_events')")
        return int(rows[0][0]) if rows else 0

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def idle(self) -> None:
        with self._lock:
            self._conn.close()  # the next query connects again (_connection)


def open_operator_ledger(
    audit_db: Path | None,
    audit_dsn: str | None,
    *,
    read_only: bool = False,
    operator_key: Path | None = None,
) -> OperatorLedger:
    """The ledger the settings name: PostgreSQL when given a DSN, else the SQLite file.

    ``read_only`` for counting and listing alone: nothing is created or written,
    not even the schema's indexes. ``operator_key``: the file of the key a SQLite ledger's
    decisions are signed with (PostgreSQL authenticates its operators by their role).
    """
    if audit_dsn:
        return PostgresOperatorLedger(audit_dsn, read_only=read_only)
    if audit_db is None:
        raise LedgerError("no ledger named: give --audit-db PATH or --audit-dsn DSN")
    key = load_key(operator_key) if operator_key is not None else None
    return SqliteOperatorLedger(audit_db, read_only=read_only, operator_key=key)
