"""The PostgreSQL backend of the reference store: one database shared by many sidecars.

The rules (what each call checks, refuses and changes, and how each statement stays right
when several processes write at once) are the shared ones in `backend`; this module supplies the
database's words for them (row locks `FOR UPDATE` and `FOR SHARE`, `%s` parameters, tables
named `store_*`), its schema, and the connection and transaction each call runs in.

Transactions run at READ COMMITTED: each statement sees what committed before it, and the row
locks make the checks that matter atomic. Commits are durable as long as the server's
`synchronous_commit` is not off; a connection that finds it off turns it back on, since the
sidecar acknowledges a write only after the store answered.

Tables carry a `store_` prefix so the store and the audit ledger can share one database, and
ids sort with `COLLATE "C"` (by code point, like SQLite's BINARY) so listing pages through ids
in the same order on both backends.

Connections: a small pool of this module's own (no extra dependency). An idle connection the
server closed (a restart, `idle_session_timeout`) is replaced before use (sidecar.ops.pgbounds). A
connection that turns out to be broken is dropped, with every idle one (after a server restart
they are all stale), and the call is run again on a fresh connection, but only when the failure
came before the commit was sent: then PostgreSQL rolled the transaction back and nothing landed.
When the database cannot be reached, or the connection is lost during the commit, the call
raises `StoreUnavailableError`; the next call connects again by itself. Every call is bounded
on this side too (TCP keepalives, `tcp_user_timeout`, and a watchdog that cuts a call past
`call_timeout`), so that a server that stopped answering holds no thread for long.

Group commit (:meth:`PostgresStoreBackend.run_batch`): the embedded store's client hands every
call queued while a batch ran to the next batch, made in one transaction on one connection,
each call in a savepoint of its own (a refusal rolls back that call alone), answered after the
one commit. Posts to one thread lock its row until their transaction commits: one commit per
post made them wait for each other's sync one by one, and Notice ran at half Create's rate.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict

from sidecar.ops import pgbounds
from sidecar.refstore.backend import Dialect, StoreBackend, StoreUnavailableError

__all__ = ["SCHEMA_VERSION", "PostgresStoreBackend"]

# Stored in store_schema_version; a database of another version is refused rather than misread.
# 2: every artifact, proposal and thread records its owner (NULL: made before that).
SCHEMA_VERSION = 2

# Key of the advisory lock that serializes schema creation: sidecars starting together against
# an empty database would otherwise race to create the same tables. ("actstore" in ASCII.)
_SCHEMA_LOCK_KEY = 0x61637473746F7265

_SCHEMA = (
    """CREATE TABLE store_artifacts (
        id TEXT COLLATE "C" PRIMARY KEY,
        kind TEXT COLLATE "C" NOT NULL,
        version BIGINT NOT NULL,
        data_json TEXT NOT NULL,
        archived BOOLEAN NOT NULL DEFAULT FALSE,
        owner TEXT COLLATE "C"
    )""",
    "CREATE INDEX store_artifacts_by_kind ON store_artifacts (kind, id)",
    """CREATE TABLE store_proposals (
        id TEXT COLLATE "C" PRIMARY KEY,
        kind TEXT NOT NULL,
        data_json TEXT NOT NULL,
        artifact_id TEXT NOT NULL,
        patch_json TEXT NOT NULL,
        base_version BIGINT NOT NULL,
        owner TEXT COLLATE "C"
    )""",
    """CREATE TABLE store_threads (
        id TEXT COLLATE "C" PRIMARY KEY,
        title TEXT NOT NULL,
        owner TEXT COLLATE "C"
    )""",
    """CREATE TABLE store_messages (
        id TEXT COLLATE "C" PRIMARY KEY,
        thread_id TEXT COLLATE "C" NOT NULL REFERENCES store_threads (id),
        seq BIGINT NOT NULL,
        kind TEXT NOT NULL,
        text TEXT NOT NULL,
        UNIQUE (thread_id, seq)
    )""",
    # The identity key orders a thread's turn requests oldest first, and the unique message id
    # makes a request idempotent per message.
    """CREATE TABLE store_turn_requests (
        n BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        message_id TEXT COLLATE "C" NOT NULL UNIQUE REFERENCES store_messages (id),
        thread_id TEXT COLLATE "C" NOT NULL REFERENCES store_threads (id)
    )""",
    "CREATE INDEX store_turn_requests_by_thread ON store_turn_requests (thread_id, n)",
    "CREATE TABLE store_schema_version (version INTEGER NOT NULL)",
)

# From version 1: the owner columns, NULL for every row already there (unowned data stays
# reachable until `actonce store assign-owners` sets its owners from the ledger). Adding a
# nullable column rewrites no row.
_UPGRADE_FROM_1 = tuple(
    f'ALTER TABLE store_{table} ADD COLUMN owner TEXT COLLATE "C"'
    for table in ("artifacts", "proposals", "threads")
)

# Connection settings a DSN may override; sidecar.ops.pgbounds adds keepalives and
# tcp_user_timeout, so that a server that vanished without closing the connection (a host
# lost, a network cut) fails a call as unavailable instead of holding a pooled connection.
_CONNECTION_DEFAULTS = {"application_name": "actonce-store"}

_Connection = psycopg.Connection[tuple[Any, ...]]
_T = TypeVar("_T")

_DIALECT = Dialect(
    table_prefix="store_", placeholder="%s", update_lock=" FOR UPDATE", share_lock=" FOR SHARE"
)


class _Pool:
    """Up to `size` connections, opened on demand and kept for reuse.

    Every connection is in autocommit mode: a transaction is opened explicitly around each
    call, so nothing is left open between calls.
    """

    def __init__(self, conninfo: str, *, size: int, acquire_timeout: float) -> None:
        self._conninfo = conninfo
        self._acquire_timeout = acquire_timeout
        self._slots = threading.BoundedSemaphore(size)
        self._lock = threading.Lock()
        self._idle: list[_Connection] = []
        self._closed = False

    def _connect(self) -> _Connection:
        try:
            # Nothing prepared: a prepared statement lives in one server connection, and a
            # pooler in transaction mode hands the next transaction to another.
            conn = psycopg.connect(self._conninfo, autocommit=True, prepare_threshold=None)
        except psycopg.OperationalError as error:
            raise StoreUnavailableError(f"cannot connect to PostgreSQL: {error}") from error
        # Whatever the database's default: the row locks of this module are designed for READ
        # COMMITTED, where a writer that waited for a lock then sees the row as committed
        # (a stricter level would fail it with a serialization error instead).
        conn.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
        try:
            (setting,) = _one(conn.execute("SHOW synchronous_commit"))
            if setting == "off":
                # An acknowledged write must survive a crash of the database server.
                conn.execute("SET synchronous_commit = on")
        except psycopg.OperationalError as error:
            conn.close()
            raise StoreUnavailableError(
                f"cannot set up a PostgreSQL connection: {error}"
            ) from error
        except BaseException:
            conn.close()
            raise
        return conn

    @contextmanager
    def connection(self) -> Iterator[_Connection]:
        """A connection for one call; it goes back to the pool unless it broke."""
        if not self._slots.acquire(timeout=self._acquire_timeout):
            raise StoreUnavailableError(
                f"no PostgreSQL connection came free within {self._acquire_timeout:g}s"
            )
        try:
            with self._lock:
                if self._closed:
                    raise RuntimeError("the store is closed")
                conn = self._idle.pop() if self._idle else None
            if conn is not None and pgbounds.stale(conn):
                conn.close()
                conn = None
            if conn is None:
                conn = self._connect()
            try:
                yield conn
            finally:
                self._give_back(conn)
        finally:
            self._slots.release()

    def _give_back(self, conn: _Connection) -> None:
        healthy = not conn.broken and conn.info.transaction_status == pq.TransactionStatus.IDLE
        with self._lock:
            if healthy and not self._closed:
                self._idle.append(conn)
                return
        conn.close()

    def discard_idle(self) -> None:
        """Close every idle connection: after one broke, the others are likely stale too."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
        # Connections in use are closed when they come back.
        self.discard_idle()


def _one(cursor: psycopg.Cursor[tuple[Any, ...]]) -> tuple[Any, ...]:
    row = cursor.fetchone()
    if row is None:
        raise RuntimeError("the query returned no row")
    return row


class PostgresStoreBackend(StoreBackend):
    """A `StoreBackend` on a PostgreSQL database, safe to share between processes.

    `dsn` is a libpq connection string or URI; ValueError when it is not one. The tables are
    created if missing. Up to `pool_size` connections are open at once; a call waits up to
    `acquire_timeout` seconds for one to come free, and connecting may take up to
    `connect_timeout` seconds (whole seconds, at least 1); past either, or when the server
    cannot be reached, the call raises `StoreUnavailableError`, here as in the constructor.
    """

    def __init__(
        self,
        dsn: str,
        *,
        pool_size: int = 8,
        connect_timeout: float = 5.0,
        acquire_timeout: float = 5.0,
        call_timeout: float = 10.0,
    ) -> None:
        super().__init__(_DIALECT)
        if pool_size < 1:
            raise ValueError("pool_size must be at least 1")
        try:
            conninfo_to_dict(dsn)
        except psycopg.ProgrammingError:
            # Not chained: libpq's message quotes the DSN, password included.
            raise ValueError("the store's DSN is not a PostgreSQL connection string") from None
        conninfo = pgbounds.conninfo(dsn, **_CONNECTION_DEFAULTS, connect_timeout=connect_timeout)
        self._call_timeout = call_timeout
        self._watchdog = pgbounds.Watchdog("store")
        self._pool = _Pool(conninfo, size=pool_size, acquire_timeout=acquire_timeout)
        # The connection of the batch this thread is making, whose calls nest in it.
        self._batch = threading.local()
        try:
            self._transact(self._migrate, write=True)
        except BaseException:
            self._pool.close()
            raise

    @staticmethod
    def _migrate(conn: _Connection) -> None:
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK_KEY,))
        (exists,) = _one(conn.execute("SELECT to_regclass('store_schema_version') IS NOT NULL"))
        if exists:
            row = conn.execute("SELECT version FROM store_schema_version").fetchone()
            version = row[0] if row is not None else 0
            if version == 1:
                for statement in _UPGRADE_FROM_1:
                    conn.execute(statement)
                conn.execute("UPDATE store_schema_version SET version = %s", (SCHEMA_VERSION,))
                return
            if version != SCHEMA_VERSION:
                raise RuntimeError(
                    f"store database has schema version {version}; this build knows "
                    f"{SCHEMA_VERSION}"
                )
            return
        for statement in _SCHEMA:
            conn.execute(statement)
        conn.execute("INSERT INTO store_schema_version (version) VALUES (%s)", (SCHEMA_VERSION,))

    def _transact(self, work: Callable[[_Connection], _T], *, write: bool) -> _T:
        """Run `work` in one transaction, on a fresh connection once if a pooled one was stale.

        Reads get a transaction of their own too (`write` changes nothing here). Within a
        batch, `work` runs in a savepoint of the batch's transaction instead.
        """
        batch: _Connection | None = getattr(self._batch, "conn", None)
        if batch is not None:
            with batch.transaction():  # a savepoint: a refusal rolls back this call alone
                return work(batch)
        for retry in (False, True):
            with self._pool.connection() as conn:
                committing = False
                try:
                    with self._watchdog.bound(conn, self._call_timeout), conn.transaction():
                        result = work(conn)
                        committing = True
                    return result
                except psycopg.OperationalError as error:
                    if not conn.broken:
                        # The server answered with an error (a deadlock, a full disk, a
                        # shutdown in progress): the transaction rolled back; retry later.
                        raise StoreUnavailableError(
                            f"PostgreSQL failed the call: {error}"
                        ) from error
                    self._pool.discard_idle()
                    if committing:
                        raise StoreUnavailableError(
                            f"the connection to PostgreSQL was lost during the commit;"
                            f" the write may have landed: {error}"
                        ) from error
                    if retry:
                        raise StoreUnavailableError(
                            f"the connection to PostgreSQL was lost: {error}"
                        ) from error
        raise AssertionError("unreachable")

    def run_batch(self, calls: Sequence[Callable[[], _T]]) -> list[_T | Exception]:
        """Make ``calls`` (this backend's methods, bound to their arguments) in one
        transaction, and answer each (its result or the exception it raised) after the commit.

        When the transaction does not commit, every call's answer is the failure; when the
        connection turns out broken before the commit was sent, the batch runs again once on
        a fresh one (PostgreSQL rolled it back: nothing of it landed). A batch of one call
        is that call alone, in its own transaction: a savepoint would cost it two round trips.
        """
        if len(calls) == 1:
            try:
                return [calls[0]()]
            except Exception as exc:
                return [exc]
        for retry in (False, True):
            with self._pool.connection() as conn:
                committing = False
                try:
                    with self._watchdog.bound(conn, self._call_timeout), conn.transaction():
                        answers = self._calls_in(conn, calls)
                        committing = True
                    return answers
                except psycopg.OperationalError as error:
                    if conn.broken:
                        self._pool.discard_idle()
                    if conn.broken and not committing and not retry:
                        continue
                    failure = StoreUnavailableError(
                        f"PostgreSQL failed the batch; it did not commit: {error}"
                    )
                    return [failure] * len(calls)
        raise AssertionError("unreachable")

    def _calls_in(
        self, conn: _Connection, calls: Sequence[Callable[[], _T]]
    ) -> list[_T | Exception]:
        answers: list[_T | Exception] = []
        self._batch.conn = conn
        try:
            for call in calls:
                try:
                    answers.append(call())
                except psycopg.OperationalError:
                    raise  # the connection or the transaction is gone: the batch fails
                except Exception as exc:
                    answers.append(exc)
        finally:
            self._batch.conn = None
        return answers

    def close(self) -> None:
        self._pool.close()
