"""The SQLite ledger: one file, WAL, ``synchronous=FULL``, group commit.

The embedded default, for one sidecar on one machine. Several sidecars share
a PostgreSQL ledger instead (sidecar.ledger.postgres).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sidecar.ledger.base import (
    GENESIS_HASH,
    AuditEvent,
    LedgerError,
    RunSummary,
    StoredEvent,
)
from sidecar.ledger.group_commit import GroupCommitLedger
from sidecar.ledger.schema import (
    COLUMNS,
    COLUMNS_UNMIGRATED,
    MIGRATION_ADD_SCOPE,
    chain,
    fenced_keys,
    newest_attempts,
    row_to_event,
    tables,
)

SCHEMA = (
    tables("INTEGER")
    + """
CREATE TABLE IF NOT EXISTS audit_head (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    seq INTEGER NOT NULL,
    hash TEXT NOT NULL
);
INSERT OR IGNORE INTO audit_head (id, seq, hash) VALUES (1, 0, '{genesis}');
"""
)

_INSERT = f"INSERT INTO audit_events ({COLUMNS}) VALUES ({', '.join('?' * 20)})"


def connect(path: Path, *, busy_timeout_ms: int) -> sqlite3.Connection:
    """Open a ledger file with the settings durability needs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
    conn.execute("PRAGMA journal_mode = WAL")
    # FULL: a commit in WAL mode is fsync'd before it returns; NORMAL would
    # lose the last commits on power loss, which an audit ledger must not.
    conn.execute("PRAGMA synchronous = FULL")
    conn.executescript(SCHEMA.replace("{genesis}", GENESIS_HASH))
    _migrate(conn)
    return conn


def _has_scope(conn: sqlite3.Connection) -> bool:
    return any(row[1] == "scope" for row in conn.execute("PRAGMA table_info(audit_events)"))


def _migrate(conn: sqlite3.Connection) -> None:
    # A ledger written before scopes gains the column in place; the write lock
    # keeps two sidecars opening the file together from both adding it.
    conn.execute("BEGIN IMMEDIATE")
    try:
        if not _has_scope(conn):
            conn.execute(MIGRATION_ADD_SCOPE)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


class SqliteLedger(GroupCommitLedger):
    """An AuditLedger on one SQLite file."""

    def __init__(self, path: Path, *, busy_timeout_ms: int = 5000) -> None:
        super().__init__()
        self.path = path
        self._busy_timeout_ms = busy_timeout_ms
        self._conn = connect(path, busy_timeout_ms=busy_timeout_ms)
        self._start_writer()

    def _write_batch(self, events: list[AuditEvent]) -> list[int | LedgerError]:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            # The chain's head is a row of its own, read inside the transaction:
            # it lets `audit verify` tell a ledger whose last events were
            # deleted from one that simply ends there.
            row = conn.execute("SELECT seq, hash FROM audit_head WHERE id = 1").fetchone()
            seq, prev = int(row[0]), str(row[1])
            # A few statements per batch, not a few per event: each statement hands the
            # interpreter back and forth with the event loop.
            keys = fenced_keys(events)
            unscoped: list[tuple[object, object]] = []
            scoped: list[tuple[object, object, object]] = []
            if keys.runs:
                marks = ", ".join("?" * len(keys.runs))
                unscoped = conn.execute(
                    f"SELECT run_id, attempt_id FROM audit_runs WHERE run_id IN ({marks})",
                    keys.runs,
                ).fetchall()
            if keys.scoped:
                marks = ", ".join("?" * len(keys.scoped_runs))
                scoped = conn.execute(
                    f"SELECT run_id, scope, attempt_id FROM audit_scopes WHERE run_id IN ({marks})",
                    keys.scoped_runs,
                ).fetchall()
            batch = chain(events, seq, prev, newest_attempts(keys, unscoped, scoped))
            if batch.begun:
                conn.executemany(
                    "INSERT INTO audit_runs (run_id, attempt_id) VALUES (?, ?) "
                    "ON CONFLICT (run_id) DO UPDATE SET attempt_id = excluded.attempt_id",
                    batch.begun,
                )
            if batch.begun_scoped:
                conn.executemany(
                    "INSERT INTO audit_scopes (run_id, scope, attempt_id) VALUES (?, ?, ?) "
                    "ON CONFLICT (run_id, scope) DO UPDATE SET attempt_id = excluded.attempt_id",
                    batch.begun_scoped,
                )
            if batch.rows:
                conn.executemany(_INSERT, batch.rows)
            conn.execute(
                "UPDATE audit_head SET seq = ?, hash = ? WHERE id = 1", (batch.seq, batch.head)
            )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return batch.results

    def _close_backend(self) -> None:
        self._conn.close()

    async def _select(self, where: str, params: tuple[object, ...]) -> list[StoredEvent]:
        def query() -> list[StoredEvent]:
            conn = sqlite3.connect(self.path, timeout=self._busy_timeout_ms / 1000)
            try:
                rows = conn.execute(
                    f"SELECT {COLUMNS} FROM audit_events WHERE {where}", params
                ).fetchall()
            finally:
                conn.close()
            return [row_to_event(row) for row in rows]

        try:
            return await asyncio.to_thread(query)
        except sqlite3.Error as exc:
            raise LedgerError(f"ledger could not be read: {exc}") from exc

    async def events_for(self, derived_id: str) -> list[StoredEvent]:
        return await self._select("derived_id = ? ORDER BY seq", (derived_id,))

    async def first_attempt(self, run_id: str, scope: str) -> AuditEvent | None:
        found = await self._select(
            "run_id = ? AND scope = ? AND phase = 'attempt_begin' ORDER BY seq LIMIT 1",
            (run_id, scope),
        )
        return found[0].event if found else None

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


class SqliteLedgerReader:
    """Read-only access to a ledger file for ``actonce audit``."""

    def __init__(self, path: Path) -> None:
        if not path.exists():
            raise LedgerError(f"no ledger at {path}")
        self._conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        # A ledger no sidecar has opened since scopes came is read as it is.
        self._columns = COLUMNS if _has_scope(self._conn) else COLUMNS_UNMIGRATED

    def runs(self) -> list[RunSummary]:
        rows = self._conn.execute(
            "SELECT run_id, MAX(rule), COUNT(DISTINCT attempt_id), COUNT(*), MIN(ts), MAX(ts) "
            "FROM audit_events GROUP BY run_id ORDER BY MAX(seq) DESC"
        ).fetchall()
        return [RunSummary(str(r[0]), str(r[1]), int(r[2]), int(r[3]), str(r[4]), str(r[5]))
                for r in rows]  # fmt: skip

    def events(self, *, run_id: str | None = None, after: int = 0) -> Iterator[StoredEvent]:
        if run_id is None:
            rows = self._conn.execute(
                f"SELECT {self._columns} FROM audit_events WHERE seq > ? ORDER BY seq", (after,)
            )
        else:
            rows = self._conn.execute(
                f"SELECT {self._columns} FROM audit_events WHERE run_id = ? AND seq > ? "
                "ORDER BY seq",
                (run_id, after),
            )
        for row in rows:
            yield row_to_event(row)

    def count(self) -> int:
        return int(self._conn.execute("SELECT COUNT(*) FROM audit_events").fetchone()[0])

    def head(self) -> tuple[int, str]:
        row = self._conn.execute("SELECT seq, hash FROM audit_head WHERE id = 1").fetchone()
        return (int(row[0]), str(row[1])) if row else (0, GENESIS_HASH)

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        # One read transaction: in WAL mode its first read fixes what every later read of
        # it sees, while writers go on committing to the log.
        self._conn.execute("BEGIN")
        try:
            yield
        finally:
            self._conn.execute("ROLLBACK")

    def close(self) -> None:
        self._conn.close()


def read_events(path: Path, *, run_id: str | None = None) -> Iterator[StoredEvent]:
    """Every event of a ledger file in order (read-only), or one run's."""
    reader = SqliteLedgerReader(path)
    try:
        yield from reader.events(run_id=run_id)
    finally:
        reader.close()
