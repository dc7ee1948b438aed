"""``actonce audit prune``: remove the oldest part of a ledger and keep its chain verifiable.

A prune removes a prefix of the chain, the events after the ledger's checkpoint up to
a cut, and never what a person or a run may still need. The cut is the last event
before ``--before``, moved back as far as these rules ask:

- before the first event of a run with anything pending (a step in doubt, a write
  without an outcome, one that failed UNKNOWN: sidecar.ledger.pending), so that
  ``audit pending`` and ``audit resolve`` still find every event of it;
- before the first event of a run that has events after the cut: a run is removed
  whole or not at all, so that a run still going on keeps its first attempt (its id
  scheme) and its ended steps (their results), and ``audit show`` shows it whole.

What is kept because of a pending item is said, and the command exits 3, as
``audit pending`` does; the safe part before it is pruned all the same.

In order: the plan and the export read one snapshot of the ledger; the export is
written to a new file and fsync'd, and the chain it holds is walked from the
checkpoint (a ledger that is not intact is not pruned); only then is the new
checkpoint recorded (the last removed event's number and hash, in
``audit_checkpoints``) and the events deleted. ``audit verify`` walks the chain
from the checkpoint; the exports and the ledger verify as one chain.

Sidecars go on appending meanwhile: they write only events after the head, and
never the checkpoints table. The checkpoint is recorded with the first batch of the
deletion in one transaction, then the rest is deleted in batches of DELETE_BATCH
events, each its own transaction, on either database: no transaction of a prune
deletes more than a batch (and what an earlier prune cut short left), however much is
pruned. On PostgreSQL the plan, the export and that first transaction are one
REPEATABLE READ transaction, with the checkpoints table locked so that two prunes run
one after the other; on SQLite the checkpoint's transaction is refused if another
prune moved it since the plan, and no append waits for more than one batch. Verify
reads only what follows the checkpoint, so a deletion cut short leaves a ledger that
verifies, and the next prune removes the rest.

A ledger of many chains (sidecar.ledger.sql.chain_of) is pruned chain by chain, in the same one
snapshot and into the same export: each chain has its own cut, moved back by the rules
above among its own runs only, so that a run with something pending holds back its chain
alone, and the others are pruned (the runs kept are reported, and the command exits 3).
Each chain records its checkpoint (with the checkpoint it follows: a chain's numbers have
gaps) and deletes its events in batches, only up to the last one the export holds: a batch
that commits late in a chain takes a number above those the chain held at the snapshot.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

from sidecar.ledger.base import GENESIS_HASH, LedgerError
from sidecar.ledger.inspect import _Chain, export_line
from sidecar.ledger.operator import OperatorLedger, PostgresOperatorLedger, SqliteOperatorLedger
from sidecar.ledger.schema import CHECKPOINT_QUERY, COLUMNS
from sidecar.ledger.sql import row_to_event
from sidecar.ledger.sqlite import read_snapshot
from sidecar.ops import files

# Events one SQLite transaction deletes: a few milliseconds of the write lock.
DELETE_BATCH = 2000

Progress = Callable[[int, int], None]

_AGE = re.compile(r"^(\d+)([dh])$")


def parse_before(text: str, now: datetime | None = None) -> datetime:
    """``--before``: an ISO 8601 date or time (UTC unless it says otherwise), or an age
    such as ``90d`` or ``12h`` before now; ValueError if neither, or in the future."""
    now = now or datetime.now(UTC)
    age = _AGE.match(text.strip())
    if age:
        amount, unit = int(age.group(1)), age.group(2)
        return now - (timedelta(days=amount) if unit == "d" else timedelta(hours=amount))
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"{text!r} is neither an ISO 8601 time (2026-09-01, 2026-09-01T00:00:00Z) "
            "nor an age (90d, 12h)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    if when > now:
        raise ValueError(f"{text!r} is in the future: a prune removes only what is past")
    return when


def event_time(when: datetime) -> str:
    """A time as events record theirs (UTC, microseconds), so that text compares as time."""
    return when.astimezone(UTC).isoformat(timespec="microseconds")


@dataclass(frozen=True)
class Hold:
    """Why the cut stopped before an event: the run it belongs to, and whether that
    run has something pending."""

    seq: int
    run_id: str
    why: str
    pending: bool


@dataclass
class PruneResult:
    after: int  # the checkpoint the prune began from
    cut: int  # the last event removed (``after`` when none was)
    requested: int  # the last event before --before
    exported: int = 0
    hash: str = GENESIS_HASH  # the new checkpoint's hash
    holds: list[Hold] = field(default_factory=list)  # what moved the cut back, in order
    committing: bool = False  # the removal's commit was under way
    chain: int | None = None  # the chain of a ledger of many; None: the ledger's one chain
    # In a ledger of many chains, the prune of each chain that had anything before --before.
    chains: list[PruneResult] = field(default_factory=list)

    @property
    def held_by_pending(self) -> bool:
        return any(hold.pending for hold in self.holds) or any(
            part.held_by_pending for part in self.chains
        )


class PruneRefused(LedgerError):
    """Nothing was pruned; the message says why."""


class Retention(OperatorLedger):
    """The prune's rules, over a backend's queries (``_fetch``, ``_sql``) and ``_stream``."""

    # Held by the backend around every statement; re-entrant.
    _lock: threading.RLock

    def prune(
        self, before: datetime, export: Path, progress: Progress | None = None
    ) -> PruneResult:
        """Export what precedes ``before`` (within the rules above) to ``export``, a new
        file, then remove it; PruneRefused when nothing was removed for a reason the
        message gives, LedgerError when the ledger failed."""
        if export.exists():
            raise PruneRefused(f"{export} exists: a prune never writes over an export")
        plan: PruneResult | None = None
        with self._lock:
            try:
                with self._snapshot():
                    chains = sorted(self.heads())
                    if len(chains) > 1:
                        plan = self._plan_chains(before, chains)
                    else:
                        plan = self._plan(before)
                    self._export(plan, export, progress)
                    self._remove_in_snapshot(plan, before)
                    plan.committing = True
            except BaseException as exc:
                if plan is not None and plan.committing:
                    raise LedgerError(
                        f"the prune's commit is in doubt ({exc}): keep {export}, and run "
                        f"`actonce audit verify --with-export {export}`"
                    ) from exc
                _discard(export)
                raise
            self._remove_after_snapshot(plan, before, export)
        return plan

    # -- primitives a backend supplies ------------------------------------------------

    def _snapshot(self) -> contextlib.AbstractContextManager[None]:
        """Every read within sees one state of the ledger; on PostgreSQL, the prune's
        one transaction, committed at the end."""
        raise NotImplementedError

    def _remove_in_snapshot(self, plan: PruneResult, before: datetime) -> None:
        """Record the checkpoint and delete, inside the snapshot's transaction."""

    def _remove_after_snapshot(self, plan: PruneResult, before: datetime, export: Path) -> None:
        """Record the checkpoint and delete, once the snapshot is over."""

    def _stream(self, sql: str, params: list[object]) -> Iterator[tuple[Any, ...]]:
        raise NotImplementedError

    def _delete_batch(self, low: int, high: int, chain: int | None = None) -> None:
        """Delete the events from ``low`` to ``high`` (of ``chain``), in a transaction of
        their own; LedgerError when the ledger refused."""
        raise NotImplementedError

    def _delete_up_to(self, cut: int, chain: int | None = None) -> None:
        """Delete the events up to ``cut`` (all pruned: a checkpoint at or after it is
        recorded) of ``chain`` (None: of the ledger's one chain), oldest first, a batch per
        transaction."""
        while True:
            if chain is None:
                low = self._fetch("SELECT MIN(seq) FROM audit_events")[0][0]
            else:
                query = self._sql("SELECT MIN(seq) FROM audit_events WHERE chain = ?")
                low = self._fetch(query, [chain])[0][0]
            if low is None or int(low) > cut:
                return
            try:
                high = min(cut, int(low) + DELETE_BATCH - 1)
                if chain is not None:  # DELETE_BATCH of the chain's events, not of numbers
                    query = self._sql(
                        "SELECT MAX(seq) FROM (SELECT seq FROM audit_events WHERE chain = ? "
                        "AND seq <= ? ORDER BY seq LIMIT ?) AS batch"
                    )
                    high = int(self._fetch(query, [chain, cut, DELETE_BATCH])[0][0])
                self._delete_batch(int(low), high, chain)
            except LedgerError as exc:
                raise LedgerError(
                    f"events up to #{cut} are pruned (checkpoint recorded) but could not "
                    f"all be deleted: {exc}; the next prune deletes the rest"
                ) from exc

    def now(self) -> datetime:
        """The ledger's time, which its events are stamped with and ``--before`` counts
        back from: PostgreSQL's clock, or this host's for a SQLite file (every process
        writing it runs on this host)."""
        return datetime.now(UTC)

    def checkpoint(self, chain: int = 0) -> tuple[int, str]:
        for found, seq, hash_ in self._fetch(CHECKPOINT_QUERY):
            if int(found) == chain:
                return int(seq), str(hash_)
        return 0, GENESIS_HASH

    def _plan_chains(self, before: datetime, chains: list[int]) -> PruneResult:
        """Each chain's cut, read in the caller's snapshot: a plan of the plans."""
        pending = self.pending()
        parts = [self._plan(before, chain, pending) for chain in chains]
        parts = [part for part in parts if part.cut > part.after or part.holds]
        plan = PruneResult(after=0, cut=0, requested=0, chains=parts)
        plan.holds = [hold for part in parts for hold in part.holds]
        return plan

    def _plan(
        self, before: datetime, chain: int | None = None, pending: list[Any] | None = None
    ) -> PruneResult:
        """Where the cut falls (in ``chain``, of a ledger of many), read in the caller's
        snapshot."""
        after, _hash = self.checkpoint(chain or 0)
        of_chain = "" if chain is None else f"chain = {int(chain)} AND "
        head = self.heads().get(chain or 0, (0, GENESIS_HASH))[0]
        first_kept = self._fetch(
            self._sql(
                f"SELECT seq FROM audit_events WHERE {of_chain}seq > ? AND ts >= ? "
                "ORDER BY seq LIMIT 1"
            ),
            [after, event_time(before)],
        )
        requested = int(first_kept[0][0]) - 1 if first_kept else head
        plan = PruneResult(after=after, cut=requested, requested=requested, chain=chain)
        if plan.cut <= after:
            plan.cut = after
            return plan
        # The first event of each run with something pending; the earliest is the cut's.
        held: list[Hold] = []
        for item in self.pending() if pending is None else pending:
            rows = self._fetch(
                self._sql(
                    f"SELECT MIN(seq) FROM audit_events WHERE {of_chain}run_id = ? AND seq > ?"
                ),
                [item.run_id, after],
            )
            first = rows[0][0] if rows else None
            if first is not None and int(first) <= plan.cut:
                why = (
                    f"run {item.run_id} has {item.kind.value} {item.id} pending: "
                    "see `actonce audit pending`"
                )
                held.append(Hold(int(first), item.run_id, why, pending=True))
        if held:
            first_held = min(held, key=lambda hold: hold.seq)
            if len(held) > 1:
                more = f" (and {len(held) - 1} more pending items older than --before)"
                first_held = replace(first_held, why=first_held.why + more)
            plan.cut = first_held.seq - 1
            plan.holds.append(first_held)
        # A run is removed whole: each time the cut moves back, a run may newly go on past it.
        while plan.cut > after:
            rows = self._fetch(
                self._sql(
                    "SELECT p.seq, p.run_id FROM audit_events p WHERE "
                    f"{of_chain.replace('chain', 'p.chain')}p.seq > ? AND p.seq <= ? "
                    "AND EXISTS (SELECT 1 FROM audit_events l WHERE l.run_id = p.run_id "
                    "AND l.seq > ?) ORDER BY p.seq LIMIT 1"
                ),
                [after, plan.cut, plan.cut],
            )
            if not rows:
                break
            seq, run_id = int(rows[0][0]), str(rows[0][1])
            plan.cut = seq - 1
            why = f"run {run_id} has events after the cut: a run is pruned whole or not at all"
            plan.holds.append(Hold(seq, run_id, why, pending=False))
        return plan

    def _export(self, plan: PruneResult, path: Path, progress: Progress | None) -> None:
        """Write events (after, cut] to ``path``, a file that must not exist, fsync it and its
        folder, and check they chain from the checkpoint; sets the plan's count and hash
        (each chain's, in a ledger of many)."""
        with files.new_private_text(path) as out:
            for part in plan.chains or [plan]:
                self._export_part(part, out, progress)
            out.flush()
            os.fsync(out.fileno())
        _fsync_folder(path.parent)
        plan.exported = sum(part.exported for part in plan.chains) or plan.exported

    def _export_part(self, plan: PruneResult, out: IO[str], progress: Progress | None) -> None:
        after, prev = self.checkpoint(plan.chain or 0)
        gaps = plan.chain is not None
        chain = _Chain(after + 1, prev, chain=plan.chain or 0, gaps=gaps)
        total = plan.cut - plan.after
        of_chain = "" if plan.chain is None else f"chain = {int(plan.chain)} AND "
        rows = self._stream(
            self._sql(
                f"SELECT {COLUMNS} FROM audit_events WHERE {of_chain}seq > ? AND seq <= ? "
                "ORDER BY seq"
            ),
            [plan.after, plan.cut],
        )
        for row in rows:
            stored = row_to_event(row)
            bad = chain.take(stored)
            if bad is not None:
                raise PruneRefused(
                    f"the ledger is not intact at event #{bad[0]}: {bad[1]}; nothing was "
                    "pruned (run `actonce audit verify`)"
                )
            out.write(export_line(stored))
            if progress is not None and chain.checked % 5000 == 0:
                progress(chain.checked, total)
        if gaps:  # the chain's last event exported is its checkpoint
            plan.cut = chain.expected - 1 if chain.checked else plan.after
        elif chain.expected - 1 != plan.cut:
            raise PruneRefused(
                f"event #{chain.expected} is missing; nothing was pruned "
                "(run `actonce audit verify`)"
            )
        if progress is not None and total:
            progress(chain.checked, total)
        plan.exported = chain.checked
        plan.hash = chain.prev or prev

    def _checkpoint_row(self, plan: PruneResult, before: datetime) -> list[object]:
        return [
            plan.cut,
            plan.hash,
            event_time(self.now()),
            event_time(before),
            plan.exported,
            plan.chain or 0,
            None if plan.chain is None else plan.after,
        ]

    def _checkpoint_rows(self, plan: PruneResult, before: datetime) -> list[list[object]]:
        """The checkpoint of each chain the prune removes events of."""
        return [
            self._checkpoint_row(part, before)
            for part in plan.chains or [plan]
            if part.cut > part.after
        ]


_INSERT_CHECKPOINT = (
    "INSERT INTO audit_checkpoints (seq, hash, pruned_at, cut_before, events, chain, follows) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)


def _fsync_folder(folder: Path) -> None:
    # The new file's name is durable only once its folder is.
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _discard(path: Path) -> None:
    # An export whose prune removed nothing is not needed, and would overlap the next one.
    with contextlib.suppress(OSError):
        path.unlink()


class SqliteRetention(Retention, SqliteOperatorLedger):
    """Prunes a ledger file; sidecars writing to it wait at most one small batch."""

    def _stream(self, sql: str, params: list[object]) -> Iterator[tuple[Any, ...]]:
        yield from self._conn.execute(sql, params)

    def _snapshot(self) -> contextlib.AbstractContextManager[None]:
        # The plan and the export see one state while sidecars go on committing.
        return read_snapshot(self._conn)

    def _remove_after_snapshot(self, plan: PruneResult, before: datetime, export: Path) -> None:
        # What an earlier prune cut short left at or before its checkpoint goes first:
        # `audit verify` takes an event still there at or before the newest checkpoint's
        # first removed one as a sign that no prune recorded it.
        self._delete_up_to(plan.after)
        if plan.cut > plan.after:
            try:
                self._record_checkpoint(plan, before)
            except (sqlite3.Error, PruneRefused) as exc:
                _discard(export)
                if isinstance(exc, PruneRefused):
                    raise
                raise LedgerError(f"the checkpoint was not recorded: {exc}") from exc
        self._delete_up_to(plan.cut)

    def _record_checkpoint(self, plan: PruneResult, before: datetime) -> None:
        """Record the checkpoint and delete the first batch it covers, in one short write
        transaction, as a sidecar's batch takes the lock: refused if another prune moved
        the checkpoint since the plan, whose export this one's would overlap."""
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            if self.checkpoint()[0] != plan.after:
                raise PruneRefused("another prune ran meanwhile; nothing was pruned")
            conn.executemany(_INSERT_CHECKPOINT, self._checkpoint_rows(plan, before))
            high = min(plan.cut, plan.after + DELETE_BATCH)
            conn.execute("DELETE FROM audit_events WHERE seq > ? AND seq <= ?", (plan.after, high))
            conn.execute("COMMIT")
        finally:
            if conn.in_transaction:
                conn.execute("ROLLBACK")

    def _delete_batch(self, low: int, high: int, chain: int | None = None) -> None:
        try:
            self._conn.execute("DELETE FROM audit_events WHERE seq >= ? AND seq <= ?", (low, high))
        except sqlite3.Error as exc:
            raise LedgerError(str(exc)) from exc


class PostgresRetention(Retention, PostgresOperatorLedger):
    """Prunes a PostgreSQL ledger in one transaction; sidecars append meanwhile."""

    def now(self) -> datetime:
        # The server's clock, which stamped every event: the cut depends on no writer's.
        when = self._fetch("SELECT clock_timestamp()")[0][0]
        assert isinstance(when, datetime)
        return when.astimezone(UTC)

    def _stream(self, sql: str, params: list[object]) -> Iterator[tuple[Any, ...]]:
        # A server-side cursor in the prune's transaction: the export streams.
        with self._conn.cursor(name="audit_prune_export") as cur:
            cur.execute(sql, params)
            yield from cur

    @contextlib.contextmanager
    def _snapshot(self) -> Iterator[None]:
        conn = self._connection()
        conn.isolation_level = self._psycopg.IsolationLevel.REPEATABLE_READ
        try:
            with conn.transaction():
                # Before the first query, which fixes the snapshot: a second prune waits
                # for this one (up to the lock timeout), then plans from its checkpoint.
                conn.execute("LOCK TABLE audit_checkpoints IN EXCLUSIVE MODE")
                yield
        except self._psycopg.Error as exc:
            raise LedgerError(f"the prune failed: {exc}") from exc
        finally:
            conn.isolation_level = None

    def _remove_in_snapshot(self, plan: PruneResult, before: datetime) -> None:
        # The checkpoint with the first batch, and what an earlier prune cut short left
        # before it: `audit verify` takes an event still there at or before the newest
        # checkpoint's first removed one as a sign that no prune recorded it.
        rows = self._checkpoint_rows(plan, before)
        if rows:
            self._execute_many(self._sql(_INSERT_CHECKPOINT), rows)
        if plan.chains:  # each chain's first removed event goes with its checkpoint
            first_of = self._sql(
                "DELETE FROM audit_events WHERE chain = ? AND seq = (SELECT MIN(seq) FROM "
                "audit_events WHERE chain = ? AND seq > ?)"
            )
            removed = [part for part in plan.chains if part.cut > part.after]
            if removed:
                self._execute_many(first_of, [[p.chain, p.chain, p.after] for p in removed])
        elif plan.cut > plan.after:
            first = min(plan.cut, plan.after + DELETE_BATCH)
            self._execute_many(self._sql("DELETE FROM audit_events WHERE seq <= ?"), [[first]])

    def _remove_after_snapshot(self, plan: PruneResult, before: datetime, export: Path) -> None:
        for part in plan.chains or [plan]:
            self._delete_up_to(part.cut, part.chain)

    def _delete_batch(self, low: int, high: int, chain: int | None = None) -> None:
        of_chain = "" if chain is None else f"chain = {int(chain)} AND "
        with self._lock:
            try:
                self._connection().execute(
                    f"DELETE FROM audit_events WHERE {of_chain}seq >= %s AND seq <= %s",
                    (low, high),
                )
            except self._psycopg.Error as exc:
                raise LedgerError(str(exc)) from exc


def open_retention(audit_db: Path | None, audit_dsn: str | None) -> Retention:
    """The ledger the settings name, opened to prune (its schema brought up to date)."""
    if audit_dsn:
        return PostgresRetention(audit_dsn)
    if audit_db is None:
        raise LedgerError("no ledger named: give --audit-db PATH or --audit-dsn DSN")
    return SqliteRetention(audit_db)
