"""The SQLite backend of the reference store: the embedded default.

One database file holds artifacts, proposals, threads, messages and turn requests. It runs in
WAL mode with `synchronous=FULL`, so a write is on disk when its transaction commits: the
sidecar acknowledges a write only after the store answered, and a store that lost an
acknowledged write after a power cut would let a retried run make it twice.

Every write checks and changes inside one `BEGIN IMMEDIATE` transaction, so two callers
(threads of this process, or another process on the same file) cannot both take an id. Ids are
primary keys and nothing is ever deleted, so a used id stays used forever, across restarts,
archived or not.

Group commit: calls that arrive while another holds the connection join its transaction, each
in a savepoint of its own (a refusal rolls back that call alone), and the last of them to
finish commits for all, with one sync. No call answers before the commit that makes what it
did, or what it read, durable; when that commit fails, or SQLite ends the transaction early,
every call in it fails. One sync per call cost most of a write's time and CPU under load.

Refusal order, the same in every write: the input is validated first (VALIDATION_FAILED), then
every state that refuses the write is collected and reported together (INVALID_STATE with all
of them: a caller counts a refusal as done only when ID_USED is the *only* state), then what is
missing (NOT_FOUND), then the version (VERSION_CONFLICT), then whether a patch applies
(PATCH_FAILED). Archiving an archived artifact is refused with INVALID_STATE {ARCHIVED} rather
than accepted again: archived artifacts refuse every change, and archiving is one. A notice
starts and steers no turn, so a turn request for one is refused (VALIDATION_FAILED), whether it
is asked with the post or later.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TypeVar

from sidecar.refstore.backend import (
    MESSAGE_KINDS,
    ArtifactPage,
    StoredArtifact,
    StoredMessage,
    StoredProposal,
    StoredThread,
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

__all__ = ["SCHEMA_VERSION", "SqliteStoreBackend"]

# Stored in PRAGMA user_version; a file of another version is refused rather than misread.
SCHEMA_VERSION = 1

# Most calls one commit carries: under a steady stream of calls the batch still commits.
MAX_BATCH = 64

_T = TypeVar("_T")

# One statement each: executescript() would commit on its own, outside the migration's
# transaction.
_SCHEMA = (
    """CREATE TABLE artifacts (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        version INTEGER NOT NULL,
        data_json TEXT NOT NULL,
        archived INTEGER NOT NULL DEFAULT 0
    )""",
    "CREATE INDEX artifacts_by_kind ON artifacts (kind, id)",
    """CREATE TABLE proposals (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        data_json TEXT NOT NULL,
        artifact_id TEXT NOT NULL,
        patch_json TEXT NOT NULL,
        base_version INTEGER NOT NULL
    )""",
    """CREATE TABLE threads (
        id TEXT PRIMARY KEY,
        title TEXT NOT NULL
    )""",
    """CREATE TABLE messages (
        id TEXT PRIMARY KEY,
        thread_id TEXT NOT NULL REFERENCES threads (id),
        seq INTEGER NOT NULL,
        kind TEXT NOT NULL,
        text TEXT NOT NULL,
        UNIQUE (thread_id, seq)
    )""",
    # The autoincrement key orders a thread's turn requests oldest first, and the unique
    # message id makes a request idempotent per message.
    """CREATE TABLE turn_requests (
        n INTEGER PRIMARY KEY AUTOINCREMENT,
        message_id TEXT NOT NULL UNIQUE REFERENCES messages (id),
        thread_id TEXT NOT NULL REFERENCES threads (id)
    )""",
    "CREATE INDEX turn_requests_by_thread ON turn_requests (thread_id, n)",
)

_ArtifactRow = tuple[str, str, int, str, int]
_MessageRow = tuple[str, str, str, str, int]


def _artifact(row: _ArtifactRow) -> StoredArtifact:
    return StoredArtifact(
        id=row[0], kind=row[1], version=row[2], data_json=row[3], archived=bool(row[4])
    )


def _message(row: _MessageRow) -> StoredMessage:
    return StoredMessage(id=row[0], thread_id=row[1], kind=row[2], text=row[3], seq=row[4])


class SqliteStoreBackend:
    """A `StoreBackend` on one SQLite file.

    One connection, guarded by a lock, serves every thread: SQLite serializes writers anyway,
    and one connection keeps each transaction's checks and changes together.
    """

    def __init__(self, path: Path | str, *, busy_timeout_ms: int = 5000) -> None:
        """Open (creating it and its folder if missing) the database file at `path`."""
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        # Group commit (see the module's docstring). Calls count themselves in before they
        # wait for the connection, so the one holding it knows whether others will join.
        self._turn = threading.Condition(self._lock)
        self._arrivals = threading.Lock()
        self._arrived = 0
        self._entered = 0
        self._batch = 0  # the number of the newest transaction
        self._batch_calls = 0  # calls in the open transaction; 0 when none is open
        self._finished = 0  # the newest transaction that committed or failed
        self._committing = False
        self._failures: dict[int, BaseException] = {}
        # The thread inside run_batch, whose calls leave the commit to it; and the
        # transaction its last call was in.
        self._deferring: int | None = None
        self._deferred_batch = 0
        # isolation_level=None: the module opens no transactions of its own; each method
        # says where its transaction begins and ends.
        self._db = sqlite3.connect(
            str(path), isolation_level=None, check_same_thread=False, timeout=busy_timeout_ms / 1000
        )
        try:
            self._configure()
            self._migrate()
        except BaseException:
            self._db.close()
            raise

    def _configure(self) -> None:
        mode = self._db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise RuntimeError(
                f"SQLite refused WAL mode (got {mode!r}); use a file on a local disk"
            )
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA foreign_keys=ON")

    def _migrate(self) -> None:
        with self._write() as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version == SCHEMA_VERSION:
                return
            if version != 0:
                raise RuntimeError(
                    f"store database has schema version {version}; this build knows "
                    f"{SCHEMA_VERSION}"
                )
            for statement in _SCHEMA:
                db.execute(statement)
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._batched(savepoint=True) as db:
            yield db

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        # A read joins the open transaction too: it sees the writes of the calls before it,
        # so it answers only once they are durable. Several statements see one snapshot.
        with self._batched(savepoint=False) as db:
            yield db

    @contextmanager
    def _batched(self, *, savepoint: bool) -> Iterator[sqlite3.Connection]:
        with self._arrivals:
            self._arrived += 1
        with self._turn:
            while self._committing:
                self._turn.wait()
            self._entered += 1
            if not self._batch_calls:
                # IMMEDIATE takes the write lock up front: the checks a write makes (is the id
                # used? which version?) then hold until it commits, even against another
                # process.
                self._db.execute("BEGIN IMMEDIATE")
                self._batch += 1
            batch = self._batch
            self._batch_calls += 1
            error: BaseException | None = None
            if savepoint:
                self._db.execute("SAVEPOINT call")
            try:
                yield self._db
            except BaseException as exc:
                error = exc
                if self._db.in_transaction:
                    if savepoint:
                        self._db.execute("ROLLBACK TO call")
                        self._db.execute("RELEASE call")
                else:
                    # SQLite ended the whole transaction (some errors do): the other calls'
                    # changes are gone with it, and they must not answer as if they landed.
                    self._end_batch(batch, exc)
            else:
                if savepoint:
                    self._db.execute("RELEASE call")
            if self._deferring == threading.get_ident():
                # run_batch waits for the commit once, for all of its calls.
                self._deferred_batch = batch
                if error is not None:
                    raise error
                return
            self._await_commit(batch)
            failure = self._failures.get(batch)
            if failure is not None and failure is not error:
                # What this call saw, a refusal included, may rest on changes that are gone.
                raise RuntimeError(f"the store's transaction did not commit: {failure}")
            if error is not None:
                raise error

    def run_batch(self, calls: Sequence[Callable[[], _T]]) -> list[_T | Exception]:
        """Make ``calls`` (this backend's methods, bound to their arguments) in as few
        transactions as they fit, and answer once those have committed.

        Each answer is what the call returned or the exception it raised; a refusal rolls
        back that call alone. When a transaction a call was in did not commit, or SQLite
        ended it early, that call's answer is the failure. One thread hands over many
        calls at once this way, instead of a thread per call waiting for its commit.
        """
        me = threading.get_ident()
        answers: list[_T | Exception] = []
        joined: list[int] = []
        with self._turn:
            while self._deferring is not None:
                self._turn.wait()
            self._deferring = me
        try:
            for call in calls:
                self._deferred_batch = 0  # stays 0 for a call refused before any statement
                try:
                    answers.append(call())
                except Exception as exc:
                    answers.append(exc)
                joined.append(self._deferred_batch)
        finally:
            with self._turn:
                self._deferring = None
                self._turn.notify_all()
                last = max(joined, default=0)
                if last:
                    self._await_commit(last)
        for i, batch in enumerate(joined):
            failure = self._failures.get(batch) if batch else None
            if failure is not None and failure is not answers[i]:
                answers[i] = RuntimeError(f"the store's transaction did not commit: {failure}")
        return answers

    def _await_commit(self, batch: int) -> None:
        # Called with the lock held. The last call in commits for all: one sync per batch.
        while self._finished < batch:
            last_in = self._arrived == self._entered
            if (
                not self._committing
                and self._batch == batch
                and (last_in or self._batch_calls >= MAX_BATCH)
            ):
                self._committing = True
                failure: BaseException | None = None
                try:
                    self._db.execute("COMMIT")
                except BaseException as exc:
                    failure = exc
                    if self._db.in_transaction:
                        with suppress(sqlite3.Error):
                            self._db.execute("ROLLBACK")
                finally:
                    self._committing = False
                self._end_batch(batch, failure)
            else:
                self._turn.wait()

    def _end_batch(self, batch: int, failure: BaseException | None) -> None:
        if failure is not None:
            # Kept for the batch's calls still waiting; the oldest are long answered.
            self._failures = {b: e for b, e in self._failures.items() if b > batch - 1024}
            self._failures[batch] = failure
        self._finished = batch
        self._batch_calls = 0
        self._turn.notify_all()

    # Artifacts

    def create_artifact(self, artifact_id: str, kind: str, data_json: str) -> StoredArtifact:
        require_text(artifact_id, "artifact_id")
        require_text(kind, "kind")
        data = compact_json(parse_document(data_json, "data_json"))
        with self._write() as db:
            if _exists(db, "SELECT 1 FROM artifacts WHERE id = ?", artifact_id):
                raise StoreRefusal(
                    RefusalCode.INVALID_STATE, "artifact id is used", states={ID_USED}
                )
            db.execute(
                "INSERT INTO artifacts (id, kind, version, data_json) VALUES (?, ?, 1, ?)",
                (artifact_id, kind, data),
            )
        return StoredArtifact(id=artifact_id, kind=kind, version=1, data_json=data, archived=False)

    def get_artifact(self, artifact_id: str) -> StoredArtifact:
        with self._read() as db:
            return _artifact(_get_artifact_row(db, artifact_id))

    def patch_artifact(
        self, artifact_id: str, expected_version: int, patch_json: str
    ) -> StoredArtifact:
        patch = parse_patch(patch_json)
        with self._write() as db:
            row = _get_artifact_row(db, artifact_id)
            current = _artifact(row)
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
            db.execute(
                "UPDATE artifacts SET data_json = ?, version = ? WHERE id = ?",
                (data, version, artifact_id),
            )
        return StoredArtifact(
            id=artifact_id, kind=current.kind, version=version, data_json=data, archived=False
        )

    def archive_artifact(self, artifact_id: str) -> StoredArtifact:
        with self._write() as db:
            current = _artifact(_get_artifact_row(db, artifact_id))
            if current.archived:
                raise StoreRefusal(
                    RefusalCode.INVALID_STATE, "artifact is already archived", states={ARCHIVED}
                )
            db.execute("UPDATE artifacts SET archived = 1 WHERE id = ?", (artifact_id,))
        return StoredArtifact(
            id=current.id,
            kind=current.kind,
            version=current.version,
            data_json=current.data_json,
            archived=True,
        )

    def list_artifacts(self, kind: str, page_size: int = 0, page_token: str = "") -> ArtifactPage:
        require_text(kind, "kind")
        size = page_size_for(page_size)
        after = decode_page_token(kind, page_token)
        with self._read() as db:
            # One row beyond the page says whether there is a next page.
            rows: list[_ArtifactRow] = db.execute(
                "SELECT id, kind, version, data_json, archived FROM artifacts"
                " WHERE kind = ? AND id > ? ORDER BY id LIMIT ?",
                (kind, after if after is not None else "", size + 1),
            ).fetchall()
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
        with self._write() as db:
            states: set[str] = set()
            if _exists(db, "SELECT 1 FROM proposals WHERE id = ?", proposal_id):
                states.add(ID_USED)
            target: tuple[int] | None = None
            if is_edit:
                target = db.execute(
                    "SELECT archived FROM artifacts WHERE id = ?", (artifact_id,)
                ).fetchone()
                if target is not None and target[0]:
                    states.add(ARCHIVED)
            if states:
                raise StoreRefusal(
                    RefusalCode.INVALID_STATE,
                    "proposal refused: " + ", ".join(sorted(states)),
                    states=states,
                )
            if is_edit and target is None:
                raise StoreRefusal(RefusalCode.NOT_FOUND, "no such artifact")
            db.execute(
                "INSERT INTO proposals (id, kind, data_json, artifact_id, patch_json, base_version)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (proposal_id, kind, data_json, artifact_id, patch_json, base_version),
            )
        return proposal

    def get_proposal(self, proposal_id: str) -> StoredProposal:
        with self._read() as db:
            row: tuple[str, str, str, str, str, int] | None = db.execute(
                "SELECT id, kind, data_json, artifact_id, patch_json, base_version"
                " FROM proposals WHERE id = ?",
                (proposal_id,),
            ).fetchone()
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
        with self._write() as db:
            if _exists(db, "SELECT 1 FROM threads WHERE id = ?", thread_id):
                raise StoreRefusal(RefusalCode.INVALID_STATE, "thread id is used", states={ID_USED})
            db.execute("INSERT INTO threads (id, title) VALUES (?, ?)", (thread_id, title))
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
        with self._write() as db:
            # The id first: a repeat of a post whose thread exists is "already done", and a used
            # message id always belongs to an existing thread.
            if _exists(db, "SELECT 1 FROM messages WHERE id = ?", message_id):
                raise StoreRefusal(
                    RefusalCode.INVALID_STATE, "message id is used", states={ID_USED}
                )
            if not _exists(db, "SELECT 1 FROM threads WHERE id = ?", thread_id):
                raise StoreRefusal(RefusalCode.NOT_FOUND, "no such thread")
            seq: int = db.execute(
                "SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE thread_id = ?", (thread_id,)
            ).fetchone()[0]
            db.execute(
                "INSERT INTO messages (id, thread_id, seq, kind, text) VALUES (?, ?, ?, ?, ?)",
                (message_id, thread_id, seq, kind, text),
            )
            if request_turn:
                # Same transaction as the message: no crash can leave a message untaken.
                db.execute(
                    "INSERT INTO turn_requests (message_id, thread_id) VALUES (?, ?)",
                    (message_id, thread_id),
                )
        return StoredMessage(id=message_id, thread_id=thread_id, kind=kind, text=text, seq=seq)

    def list_messages(self, thread_id: str) -> tuple[StoredMessage, ...]:
        with self._read() as db:
            _require_thread(db, thread_id)
            rows: list[_MessageRow] = db.execute(
                "SELECT id, thread_id, kind, text, seq FROM messages"
                " WHERE thread_id = ? ORDER BY seq",
                (thread_id,),
            ).fetchall()
        return tuple(_message(row) for row in rows)

    def request_turn(self, message_id: str) -> bool:
        with self._write() as db:
            row: tuple[str, str] | None = db.execute(
                "SELECT thread_id, kind FROM messages WHERE id = ?", (message_id,)
            ).fetchone()
            if row is None:
                raise StoreRefusal(RefusalCode.NOT_FOUND, "no such message")
            thread_id, kind = row
            if kind == "notice":
                raise StoreRefusal(
                    RefusalCode.VALIDATION_FAILED,
                    "a notice starts no turn: the message is a notice",
                )
            cursor = db.execute(
                "INSERT INTO turn_requests (message_id, thread_id) VALUES (?, ?)"
                " ON CONFLICT (message_id) DO NOTHING",
                (message_id, thread_id),
            )
            return cursor.rowcount == 1

    def list_turn_requests(self, thread_id: str) -> tuple[str, ...]:
        with self._read() as db:
            _require_thread(db, thread_id)
            rows: list[tuple[str]] = db.execute(
                "SELECT message_id FROM turn_requests WHERE thread_id = ? ORDER BY n",
                (thread_id,),
            ).fetchall()
        return tuple(row[0] for row in rows)

    def close(self) -> None:
        with self._turn:
            # An open transaction commits first: its calls are waiting for their answers.
            while self._committing or self._batch_calls:
                self._turn.wait()
            self._db.close()


def _exists(db: sqlite3.Connection, query: str, key: str) -> bool:
    return db.execute(query, (key,)).fetchone() is not None


def _get_artifact_row(db: sqlite3.Connection, artifact_id: str) -> _ArtifactRow:
    row: _ArtifactRow | None = db.execute(
        "SELECT id, kind, version, data_json, archived FROM artifacts WHERE id = ?",
        (artifact_id,),
    ).fetchone()
    if row is None:
        raise StoreRefusal(RefusalCode.NOT_FOUND, "no such artifact")
    return row


def _require_thread(db: sqlite3.Connection, thread_id: str) -> None:
    if not _exists(db, "SELECT 1 FROM threads WHERE id = ?", thread_id):
        raise StoreRefusal(RefusalCode.NOT_FOUND, "no such thread")
