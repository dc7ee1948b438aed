"""The SQLite ledger: one file, WAL, ``synchronous=FULL``, group commit.

The embedded default, for one sidecar on one machine. Several sidecars share
a PostgreSQL ledger instead (sidecar.ledger.postgres).

In a data folder of one file, the embedded store's tables are in the ledger's file, and the
store's connection is the file's one writer (two writers on one file would wait on SQLite's
busy handler): the ledger then writes ``through`` the store's transactions, where its batches
share the store's group commit, and a write's intent, its store call and its outcome can be
one transaction (:meth:`~sidecar.ledger.sql.SqlLedger.append_in`, made by the store's client).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Protocol, TypeVar

from sidecar.ledger.base import AuditEvent, LedgerError, StoredEvent
from sidecar.ledger.schema import (
    DROP_OLD_HEAD,
    INSERT_CHAIN,
    OLD_HEAD,
    RECORD_VERSION,
    SCHEMA_VERSION,
    SQLITE,
    add_columns,
    chain_rows,
    chains_table,
    checkpoints_table,
    present_columns,
    readable_columns,
    run_rules_table,
    schema_table,
    tables,
)
from sidecar.ledger.sql import SqlLedger, SqlLedgerReader
from sidecar.ops import files

_T = TypeVar("_T")


class Transactions(Protocol):
    """The file's one writer, when the ledger shares its file: it runs ``work`` in its own
    transaction on its connection and answers once that is durable."""

    def in_one_transaction(self, work: Callable[[sqlite3.Connection], _T]) -> _T: ...


SCHEMA = (
    tables("INTEGER")
    + checkpoints_table("INTEGER")
    + run_rules_table()
    + schema_table()
    + chains_table("INTEGER")
)


def connect(path: Path, *, busy_timeout_ms: int) -> sqlite3.Connection:
    """Open a ledger file with the settings durability needs, readable by its owner alone."""
    files.private_database(path)
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
    conn.execute("PRAGMA journal_mode = WAL")
    # FULL: a commit in WAL mode is fsync'd before it returns; NORMAL would
    # lose the last commits on power loss, which an audit ledger must not.
    conn.execute("PRAGMA synchronous = FULL")
    conn.executescript(SCHEMA)
    _migrate(conn)
    return conn


@contextmanager
def read_snapshot(conn: sqlite3.Connection) -> Iterator[None]:
    """One read transaction: in WAL mode its first read fixes what every later read of
    it sees, while writers go on committing to the log."""
    conn.execute("BEGIN")
    try:
        yield
    finally:
        conn.execute("ROLLBACK")


def _migrate(conn: sqlite3.Connection) -> None:
    # A ledger written before a column came gains it in place; the write lock
    # keeps two sidecars opening the file together from both adding it.
    conn.execute("BEGIN IMMEDIATE")
    try:
        add_columns(conn, SQLITE, "INTEGER")
        _chains(conn)
        conn.execute(RECORD_VERSION, (SCHEMA_VERSION,))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _chains(conn: sqlite3.Connection) -> None:
    """Give the ledger its one chain, once: a ledger from before chains keeps its history
    as chain 0's, from its old head."""
    if conn.execute("SELECT COUNT(*) FROM audit_chains").fetchone()[0]:
        return
    old = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'audit_head'"
    ).fetchone()
    head = conn.execute(OLD_HEAD).fetchone() if old else None
    conn.executemany(INSERT_CHAIN, chain_rows(1, (int(head[0]), str(head[1])) if head else None))
    if old:
        conn.execute(DROP_OLD_HEAD)


class SqliteLedger(SqlLedger):
    """An AuditLedger on one SQLite file."""

    def __init__(
        self, path: Path, *, busy_timeout_ms: int = 5000, through: Transactions | None = None
    ) -> None:
        super().__init__(SQLITE)
        self.path = path
        self._busy_timeout_ms = busy_timeout_ms
        self._conn = connect(path, busy_timeout_ms=busy_timeout_ms)
        self._through = through
        self._start_writer()

    def _write_batch(self, events: list[AuditEvent]) -> list[int | LedgerError]:
        if self._through is not None:
            return self._through.in_one_transaction(lambda db: self.append_in(db, events))
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            results = self.append_in(conn, events)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return results

    def _close_backend(self) -> None:
        self._conn.close()

    def _read(self, query: str, params: tuple[object, ...]) -> list[tuple[Any, ...]]:
        try:
            conn = sqlite3.connect(self.path, timeout=self._busy_timeout_ms / 1000)
            try:
                return list(conn.execute(query, params).fetchall())
            finally:
                conn.close()
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


class SqliteLedgerReader(SqlLedgerReader[sqlite3.Connection]):
    """Read-only access to a ledger file for ``actonce audit``."""

    def __init__(self, path: Path) -> None:
        if not path.exists():
            raise LedgerError(f"no ledger at {path}")
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        # A ledger no sidecar has opened since its newest columns came is read as it is.
        super().__init__(conn, SQLITE, readable_columns(present_columns(conn, SQLITE)))

    def _has_table(self, name: str) -> bool:
        found = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
        return self._conn.execute(found, (name,)).fetchone() is not None

    def snapshot(self) -> AbstractContextManager[None]:
        return read_snapshot(self._conn)

    def close(self) -> None:
        self._conn.close()


def read_events(path: Path, *, run_id: str | None = None) -> Iterator[StoredEvent]:
    """Every event of a ledger file in order (read-only), or one run's."""
    reader = SqliteLedgerReader(path)
    try:
        yield from reader.events(run_id=run_id)
    finally:
        reader.close()
