"""The PostgreSQL backend of the reference store: one database shared by many sidecars.

Same records, rules and refusals as the SQLite backend (the input rules are the shared ones in
`backend`); what differs is how a write keeps them when several processes write at once:

- A create is `INSERT ... ON CONFLICT (id) DO NOTHING`: of two writers racing for one id, the
  second waits on the first's uncommitted row and then finds it, so exactly one lands and the
  other is refused with ID_USED.
- A change of an existing row (patch, archive) reads it `FOR UPDATE`: the version check and the
  update hold together, so a stale version can never overwrite a newer one.
- A post locks its thread row first: the thread's next `seq` is then computed by one writer at
  a time. A turn request locks its thread too, so a thread's requests commit in the order their
  keys were drawn and a reader never sees a later one before an earlier one.
- A proposed edit holds its artifact `FOR SHARE` while it is recorded, so the artifact cannot
  be archived between the check and the insert.

Transactions run at READ COMMITTED: each statement sees what committed before it, and the row
locks above make the checks that matter atomic. Commits are durable as long as the server's
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
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict

from sidecar.ops import pgbounds
from sidecar.refstore.backend import (
    MESSAGE_KINDS,
    ArtifactPage,
    StoredArtifact,
    StoredMessage,
    StoredProposal,
    StoredThread,
    StoreUnavailableError,
    apply_patch,
    compact_json,
    decode_page_token,
    encode_page_token,
    page_size_for,
    parse_document,
    parse_patch,
    proposal_for,
    require_text,
)
from sidecar.refstore.refusals import ARCHIVED, ID_USED, RefusalCode, StoreRefusal

__all__ = ["SCHEMA_VERSION", "PostgresStoreBackend"]

# Stored in store_schema_version; a database of another version is refused rather than misread.
SCHEMA_VERSION = 1

# Key of the advisory lock that serializes schema creation: sidecars starting together against
# an empty database would otherwise race to create the same tables. ("actstore" in ASCII.)
_SCHEMA_LOCK_KEY = 0x61637473746F7265

_SCHEMA = (
    """CREATE TABLE store_artifacts (
        id TEXT COLLATE "C" PRIMARY KEY,
        kind TEXT COLLATE "C" NOT NULL,
        version BIGINT NOT NULL,
        data_json TEXT NOT NULL,
        archived BOOLEAN NOT NULL DEFAULT FALSE
    )""",
    "CREATE INDEX store_artifacts_by_kind ON store_artifacts (kind, id)",
    """CREATE TABLE store_proposals (
        id TEXT COLLATE "C" PRIMARY KEY,
        kind TEXT NOT NULL,
        data_json TEXT NOT NULL,
        artifact_id TEXT NOT NULL,
        patch_json TEXT NOT NULL,
        base_version BIGINT NOT NULL
    )""",
    """CREATE TABLE store_threads (
        id TEXT COLLATE "C" PRIMARY KEY,
        title TEXT NOT NULL
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

# Connection settings a DSN may override; sidecar.ops.pgbounds adds keepalives and
# tcp_user_timeout, so that a server that vanished without closing the connection (a host
# lost, a network cut) fails a call as unavailable instead of holding a pooled connection.
_CONNECTION_DEFAULTS = {"application_name": "actonce-store"}

_Connection = psycopg.Connection[tuple[Any, ...]]
_T = TypeVar("_T")

_ARTIFACT_COLUMNS = "id, kind, version, data_json, archived"


def _artifact(row: tuple[Any, ...]) -> StoredArtifact:
    return StoredArtifact(
        id=row[0], kind=row[1], version=row[2], data_json=row[3], archived=bool(row[4])
    )


def _message(row: tuple[Any, ...]) -> StoredMessage:
    return StoredMessage(id=row[0], thread_id=row[1], kind=row[2], text=row[3], seq=row[4])


def _storable(key: str) -> bool:
    # require_text keeps NUL out of every stored id, and PostgreSQL would reject it as a query
    # parameter: a key holding one names nothing.
    return "\0" not in key


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
            conn = psycopg.connect(self._conninfo, autocommit=True)
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


class PostgresStoreBackend:
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
        try:
            self._transact(self._migrate)
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
            if version != SCHEMA_VERSION:
                raise RuntimeError(
                    f"store database has schema version {version}; this build knows "
                    f"{SCHEMA_VERSION}"
                )
            return
        for statement in _SCHEMA:
            conn.execute(statement)
        conn.execute("INSERT INTO store_schema_version (version) VALUES (%s)", (SCHEMA_VERSION,))

    def _transact(self, work: Callable[[_Connection], _T]) -> _T:
        """Run `work` in one transaction, on a fresh connection once if a pooled one was stale."""
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

    # Artifacts

    def create_artifact(self, artifact_id: str, kind: str, data_json: str) -> StoredArtifact:
        require_text(artifact_id, "artifact_id")
        require_text(kind, "kind")
        data = compact_json(parse_document(data_json, "data_json"))

        def work(conn: _Connection) -> None:
            inserted = conn.execute(
                "INSERT INTO store_artifacts (id, kind, version, data_json) VALUES (%s, %s, 1, %s)"
                " ON CONFLICT (id) DO NOTHING RETURNING 1",
                (artifact_id, kind, data),
            ).fetchone()
            if inserted is None:
                raise StoreRefusal(
                    RefusalCode.INVALID_STATE, "artifact id is used", states={ID_USED}
                )

        self._transact(work)
        return StoredArtifact(id=artifact_id, kind=kind, version=1, data_json=data, archived=False)

    def get_artifact(self, artifact_id: str) -> StoredArtifact:
        return self._transact(lambda conn: _get_artifact(conn, artifact_id, lock=False))

    def patch_artifact(
        self, artifact_id: str, expected_version: int, patch_json: str
    ) -> StoredArtifact:
        patch = parse_patch(patch_json)

        def work(conn: _Connection) -> StoredArtifact:
            current = _get_artifact(conn, artifact_id, lock=True)
            if current.archived:
                raise StoreRefusal(
                    RefusalCode.INVALID_STATE, "artifact is archived", states={ARCHIVED}
                )
            if current.version != expected_version:
                raise StoreRefusal(
                    RefusalCode.VERSION_CONFLICT,
                    f"artifact is at version {current.version}, not {expected_version}",
                )
            # The stored text was written by compact_json from an object: it parses back as one.
            stored = parse_document(current.data_json, "data_json")
            data = compact_json(apply_patch(patch, stored))
            version = current.version + 1
            conn.execute(
                "UPDATE store_artifacts SET data_json = %s, version = %s WHERE id = %s",
                (data, version, artifact_id),
            )
            return StoredArtifact(
                id=artifact_id, kind=current.kind, version=version, data_json=data, archived=False
            )

        return self._transact(work)

    def archive_artifact(self, artifact_id: str) -> StoredArtifact:
        def work(conn: _Connection) -> StoredArtifact:
            current = _get_artifact(conn, artifact_id, lock=True)
            if current.archived:
                raise StoreRefusal(
                    RefusalCode.INVALID_STATE, "artifact is already archived", states={ARCHIVED}
                )
            conn.execute("UPDATE store_artifacts SET archived = TRUE WHERE id = %s", (artifact_id,))
            return StoredArtifact(
                id=current.id,
                kind=current.kind,
                version=current.version,
                data_json=current.data_json,
                archived=True,
            )

        return self._transact(work)

    def list_artifacts(self, kind: str, page_size: int = 0, page_token: str = "") -> ArtifactPage:
        require_text(kind, "kind")
        size = page_size_for(page_size)
        after = decode_page_token(kind, page_token)

        def work(conn: _Connection) -> list[tuple[Any, ...]]:
            # One row beyond the page says whether there is a next page.
            return conn.execute(
                f"SELECT {_ARTIFACT_COLUMNS} FROM store_artifacts"
                " WHERE kind = %s AND id > %s ORDER BY id LIMIT %s",
                (kind, after if after is not None else "", size + 1),
            ).fetchall()

        rows = self._transact(work)
        artifacts = tuple(_artifact(row) for row in rows[:size])
        token = encode_page_token(kind, artifacts[-1].id) if len(rows) > size else ""
        return ArtifactPage(artifacts=artifacts, next_page_token=token)

    # Proposals

    def create_proposal(
        self,
        proposal_id: str,
        *,
        kind: str = "",
        data_json: str = "",
        artifact_id: str = "",
        patch_json: str = "",
        base_version: int = 0,
    ) -> StoredProposal:
        proposal = proposal_for(
            proposal_id,
            kind=kind,
            data_json=data_json,
            artifact_id=artifact_id,
            patch_json=patch_json,
            base_version=base_version,
        )
        is_edit = proposal.is_edit
        kind, data_json = proposal.kind, proposal.data_json
        patch_json = proposal.patch_json

        def work(conn: _Connection) -> None:
            states: set[str] = set()
            target = None
            if is_edit:
                target = conn.execute(
                    "SELECT archived FROM store_artifacts WHERE id = %s FOR SHARE", (artifact_id,)
                ).fetchone()
                if target is not None and target[0]:
                    states.add(ARCHIVED)
            if states or (is_edit and target is None):
                # Refused either way; the states must all be reported (ID_USED alone would
                # read as "already done"), and a used id goes before a missing artifact.
                if _exists(conn, "SELECT 1 FROM store_proposals WHERE id = %s", proposal_id):
                    states.add(ID_USED)
                if states:
                    raise StoreRefusal(
                        RefusalCode.INVALID_STATE,
                        "proposal refused: " + ", ".join(sorted(states)),
                        states=states,
                    )
                raise StoreRefusal(RefusalCode.NOT_FOUND, "no such artifact")
            inserted = conn.execute(
                "INSERT INTO store_proposals"
                " (id, kind, data_json, artifact_id, patch_json, base_version)"
                " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (id) DO NOTHING RETURNING 1",
                (proposal_id, kind, data_json, artifact_id, patch_json, base_version),
            ).fetchone()
            if inserted is None:
                raise StoreRefusal(
                    RefusalCode.INVALID_STATE, "proposal refused: ID_USED", states={ID_USED}
                )

        self._transact(work)
        return proposal

    def get_proposal(self, proposal_id: str) -> StoredProposal:
        def work(conn: _Connection) -> tuple[Any, ...] | None:
            if not _storable(proposal_id):
                return None
            return conn.execute(
                "SELECT id, kind, data_json, artifact_id, patch_json, base_version"
                " FROM store_proposals WHERE id = %s",
                (proposal_id,),
            ).fetchone()

        row = self._transact(work)
        if row is None:
            raise StoreRefusal(RefusalCode.NOT_FOUND, "no such proposal")
        return StoredProposal(
            id=row[0],
            kind=row[1],
            data_json=row[2],
            artifact_id=row[3],
            patch_json=row[4],
            base_version=row[5],
        )

    # Threads and messages

    def create_thread(self, thread_id: str, title: str) -> StoredThread:
        require_text(thread_id, "thread_id")
        require_text(title, "title")

        def work(conn: _Connection) -> None:
            inserted = conn.execute(
                "INSERT INTO store_threads (id, title) VALUES (%s, %s)"
                " ON CONFLICT (id) DO NOTHING RETURNING 1",
                (thread_id, title),
            ).fetchone()
            if inserted is None:
                raise StoreRefusal(RefusalCode.INVALID_STATE, "thread id is used", states={ID_USED})

        self._transact(work)
        return StoredThread(id=thread_id, title=title)

    def post_message(
        self, message_id: str, thread_id: str, kind: str, text: str, *, request_turn: bool = False
    ) -> StoredMessage:
        require_text(message_id, "message_id")
        require_text(thread_id, "thread_id")
        if kind not in MESSAGE_KINDS:
            raise StoreRefusal(RefusalCode.VALIDATION_FAILED, "kind must be 'notice' or 'message'")
        require_text(text, "text")
        if request_turn and kind == "notice":
            raise StoreRefusal(
                RefusalCode.VALIDATION_FAILED,
                "a notice starts no turn: request_turn needs a message",
            )

        def work(conn: _Connection) -> int:
            # The id first: a repeat of a post whose thread exists is "already done", and a used
            # message id always belongs to an existing thread.
            if _exists(conn, "SELECT 1 FROM store_messages WHERE id = %s", message_id):
                raise StoreRefusal(
                    RefusalCode.INVALID_STATE, "message id is used", states={ID_USED}
                )
            if not _exists(conn, "SELECT 1 FROM store_threads WHERE id = %s FOR UPDATE", thread_id):
                raise StoreRefusal(RefusalCode.NOT_FOUND, "no such thread")
            (seq,) = _one(
                conn.execute(
                    "SELECT COALESCE(MAX(seq), 0) + 1 FROM store_messages WHERE thread_id = %s",
                    (thread_id,),
                )
            )
            inserted = conn.execute(
                "INSERT INTO store_messages (id, thread_id, seq, kind, text)"
                " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (id) DO NOTHING RETURNING 1",
                (message_id, thread_id, seq, kind, text),
            ).fetchone()
            if inserted is None:
                # Another writer took the id after the check above (it posted to another
                # thread, whose lock this one does not hold).
                raise StoreRefusal(
                    RefusalCode.INVALID_STATE, "message id is used", states={ID_USED}
                )
            if request_turn:
                # Same transaction as the message: no crash can leave a message untaken.
                conn.execute(
                    "INSERT INTO store_turn_requests (message_id, thread_id) VALUES (%s, %s)",
                    (message_id, thread_id),
                )
            return int(seq)

        seq = self._transact(work)
        return StoredMessage(id=message_id, thread_id=thread_id, kind=kind, text=text, seq=seq)

    def list_messages(self, thread_id: str) -> tuple[StoredMessage, ...]:
        def work(conn: _Connection) -> list[tuple[Any, ...]]:
            _require_thread(conn, thread_id)
            return conn.execute(
                "SELECT id, thread_id, kind, text, seq FROM store_messages"
                " WHERE thread_id = %s ORDER BY seq",
                (thread_id,),
            ).fetchall()

        return tuple(_message(row) for row in self._transact(work))

    def request_turn(self, message_id: str) -> bool:
        def work(conn: _Connection) -> bool:
            row = None
            if _storable(message_id):
                row = conn.execute(
                    "SELECT thread_id, kind FROM store_messages WHERE id = %s", (message_id,)
                ).fetchone()
            if row is None:
                raise StoreRefusal(RefusalCode.NOT_FOUND, "no such message")
            thread_id, kind = row
            if kind == "notice":
                raise StoreRefusal(
                    RefusalCode.VALIDATION_FAILED,
                    "a notice starts no turn: the message is a notice",
                )
            # One writer per thread at a time, so the identity keys are drawn in commit order.
            conn.execute("SELECT 1 FROM store_threads WHERE id = %s FOR UPDATE", (thread_id,))
            inserted = conn.execute(
                "INSERT INTO store_turn_requests (message_id, thread_id) VALUES (%s, %s)"
                " ON CONFLICT (message_id) DO NOTHING RETURNING 1",
                (message_id, thread_id),
            ).fetchone()
            return inserted is not None

        return self._transact(work)

    def list_turn_requests(self, thread_id: str) -> tuple[str, ...]:
        def work(conn: _Connection) -> list[tuple[Any, ...]]:
            _require_thread(conn, thread_id)
            return conn.execute(
                "SELECT message_id FROM store_turn_requests WHERE thread_id = %s ORDER BY n",
                (thread_id,),
            ).fetchall()

        return tuple(row[0] for row in self._transact(work))

    def close(self) -> None:
        self._pool.close()


def _exists(conn: _Connection, query: str, key: str) -> bool:
    return _storable(key) and conn.execute(query, (key,)).fetchone() is not None


def _get_artifact(conn: _Connection, artifact_id: str, *, lock: bool) -> StoredArtifact:
    row = None
    if _storable(artifact_id):
        query = f"SELECT {_ARTIFACT_COLUMNS} FROM store_artifacts WHERE id = %s"
        row = conn.execute(query + (" FOR UPDATE" if lock else ""), (artifact_id,)).fetchone()
    if row is None:
        raise StoreRefusal(RefusalCode.NOT_FOUND, "no such artifact")
    return _artifact(row)


def _require_thread(conn: _Connection, thread_id: str) -> None:
    if not _exists(conn, "SELECT 1 FROM store_threads WHERE id = %s", thread_id):
        raise StoreRefusal(RefusalCode.NOT_FOUND, "no such thread")
