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

A read that finds no transaction open, none committing and no call on its way in reads a
snapshot of what has committed on a connection of its own: it needs no writer's lock, so it
answers while another process holds the file's (the ledger's, when they share it); one that
finds a transaction open joins it, as before.

A job of several parts (:meth:`SqliteStoreBackend.in_one_transaction`: a write's audit
intent, its store call and its outcome, when the ledger shares this file) runs in one savepoint
of the group's transaction; a store call it makes runs in a savepoint nested in that one, so a
refusal rolls back the call alone and the job goes on, while a failure of the job rolls back
all of it. Nothing of the job is durable before the commit, and all of it is after.

The rules (what each call checks, refuses and changes) are the shared ones in `sql`; this
module supplies the file, its schema, and the group-committed transaction each call runs in.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TypeVar

from sidecar.ops import files
from sidecar.refstore.backend import Connection, Dialect, StoreBackend

__all__ = ["SCHEMA_VERSION", "SqliteStoreBackend"]

# Stored in PRAGMA user_version; a file of another version is refused rather than misread.
# 2: every artifact, proposal and thread records its owner (NULL: made before that).
SCHEMA_VERSION = 2

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
        archived INTEGER NOT NULL DEFAULT 0,
        owner TEXT
    )""",
    "CREATE INDEX artifacts_by_kind ON artifacts (kind, id)",
    """CREATE TABLE proposals (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        data_json TEXT NOT NULL,
        artifact_id TEXT NOT NULL,
        patch_json TEXT NOT NULL,
        base_version INTEGER NOT NULL,
        owner TEXT
    )""",
    """CREATE TABLE threads (
        id TEXT PRIMARY KEY,
        title TEXT NOT NULL,
        owner TEXT
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

# From version 1: the owner columns, NULL for every row already there (unowned data stays
# reachable until `actonce store assign-owners` sets its owners from the ledger).
_UPGRADE_FROM_1 = tuple(
    f"ALTER TABLE {table} ADD COLUMN owner TEXT" for table in ("artifacts", "proposals", "threads")
)

# SQLite serializes writers (every call runs under BEGIN IMMEDIATE): no row locks to add.
_DIALECT = Dialect(table_prefix="", placeholder="?", update_lock="", share_lock="")


class SqliteStoreBackend(StoreBackend):
    """A `StoreBackend` on one SQLite file.

    One connection, guarded by a lock, serves every thread: SQLite serializes writers anyway,
    and one connection keeps each transaction's checks and changes together.
    """

    def __init__(self, path: Path | str, *, busy_timeout_ms: int = 5000) -> None:
        """Open (creating it and its folder if missing) the database file at `path`."""
        super().__init__(_DIALECT)
        # Every artifact is in it: its owner alone reads it, whatever the umask.
        files.private_database(Path(path))
        self._lock = threading.Lock()
        # Group commit (see the module's docstring). Calls count themselves in before they
        # wait for the connection, so the one holding it knows whether others will join; they
        # wait on ``_progress`` for the group's transaction to move on (a commit, a batch done).
        self._progress = threading.Condition(self._lock)
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
        # The thread whose call holds the connection now: a call it makes meanwhile (a job's
        # store call) nests in that call's savepoint instead of waiting for itself.
        self._holder: int | None = None
        # isolation_level=None: the module opens no transactions of its own; each method
        # says where its transaction begins and ends.
        self._db = sqlite3.connect(
            str(path), isolation_level=None, check_same_thread=False, timeout=busy_timeout_ms / 1000
        )
        self._reading = threading.Lock()
        self._reader = sqlite3.connect(
            str(path), isolation_level=None, check_same_thread=False, timeout=busy_timeout_ms / 1000
        )
        try:
            self._configure()
            self._migrate()
        except BaseException:
            self._db.close()
            self._reader.close()
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
        with self._batched(savepoint=True) as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version == SCHEMA_VERSION:
                return
            if version not in (0, 1):
                raise RuntimeError(
                    f"store database has schema version {version}; this build knows "
                    f"{SCHEMA_VERSION}"
                )
            for statement in _UPGRADE_FROM_1 if version == 1 else _SCHEMA:
                db.execute(statement)
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def _transact(self, work: Callable[[Connection], _T], *, write: bool) -> _T:
        # A read joins the open transaction too: it sees the writes of the calls before it,
        # so it answers only once they are durable. Several statements see one snapshot.
        # A write gets a savepoint of its own, so that its refusal rolls back it alone.
        if self._holder == threading.get_ident():
            return self._nested(work)
        if not write and self._idle():
            return self._read_alone(work)
        with self._batched(savepoint=write) as db:
            return work(db)

    def _idle(self) -> bool:
        # No transaction open, none committing, no call on its way in: nothing a read could
        # see that is not durable yet, so it needs no writer's lock.
        with self._progress:
            return not (self._batch_calls or self._committing or self._arrived != self._entered)

    def _read_alone(self, work: Callable[[Connection], _T]) -> _T:
        """A read on a connection of its own, in a snapshot of what has committed: it waits
        for no writer, and answers while another process holds the file's write lock (a
        ledger that shares the file, locked by an operator's tool or a prune)."""
        with self._reading:
            self._reader.execute("BEGIN")
            try:
                return work(self._reader)
            finally:
                self._reader.execute("ROLLBACK")

    def in_one_transaction(self, job: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run ``job`` in one savepoint of the group's transaction, and answer once it is
        durable: all of what it did commits, or none. This backend's calls that ``job``
        makes run inside it, each in a savepoint of its own (a refusal rolls back that call
        alone); what else ``job`` writes on the connection (the ledger's rows, when the
        ledger shares this file) is in the same transaction."""
        with self._batched(savepoint=True) as db:
            return job(db)

    def _nested(self, work: Callable[[Connection], _T]) -> _T:
        self._db.execute("SAVEPOINT nested")
        try:
            answer = work(self._db)
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK TO nested")
                self._db.execute("RELEASE nested")
            raise
        self._db.execute("RELEASE nested")
        return answer

    @contextmanager
    def _batched(self, *, savepoint: bool) -> Iterator[sqlite3.Connection]:
        with self._arrivals:
            self._arrived += 1
        with self._progress:
            while self._committing:
                self._progress.wait()
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
            self._holder = threading.get_ident()
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
            finally:
                self._holder = None
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
        with self._progress:
            while self._deferring is not None:
                self._progress.wait()
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
            with self._progress:
                self._deferring = None
                self._progress.notify_all()
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
                self._progress.wait()

    def _end_batch(self, batch: int, failure: BaseException | None) -> None:
        if failure is not None:
            # Kept for the batch's calls still waiting; the oldest are long answered.
            self._failures = {b: e for b, e in self._failures.items() if b > batch - 1024}
            self._failures[batch] = failure
        self._finished = batch
        self._batch_calls = 0
        self._progress.notify_all()

    def close(self) -> None:
        with self._progress:
            # An open transaction commits first: its calls are waiting for their answers.
            while self._committing or self._batch_calls:
                self._progress.wait()
            self._db.close()
        with self._reading:
            self._reader.close()
