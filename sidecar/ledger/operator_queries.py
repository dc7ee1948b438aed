"""The operator's queries over a ledger: pending items, decisions, runs by page.

Written once over both SQL backends: the queries are here (or in
:mod:`sidecar.ledger.sql`, those the sidecar's ledger asks too), in one dialect
of SQL with ``?`` placeholders; each backend (:mod:`sidecar.ledger.operator`)
supplies the primitives: run a statement, and hold the chain's head locked for a
transaction that appends. Every query pages or narrows in SQL through the ledger's
indexes; none reads the ledger whole. A decision is appended inside the lock of its run's
chain (sidecar.ledger.sql.chain_of), after re-reading its id's events there, so that two
operators deciding at once cannot both win, and the sidecars' own appends to that run
serialize with it as with each other.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Unpack

from sidecar.ledger import permits
from sidecar.ledger.base import (
    AuditEvent,
    LedgerError,
    Phase,
    RunSummary,
    StoredEvent,
)
from sidecar.ledger.liveness import (
    AttemptLife,
    Clock,
    alive_query,
    in_flight_note,
    lives,
    why_not_live,
)
from sidecar.ledger.pending import (
    Decision,
    DecisionNote,
    DecisionRefused,
    Kind,
    PendingItem,
    decision_event,
    pending_item,
)
from sidecar.ledger.schema import readable_columns
from sidecar.ledger.sql import (
    RUN_SUMMARY,
    EventClock,
    Queries,
    chain,
    marks,
    newest_head,
    phase,
    row_to_event,
    run_summary,
)


@dataclass(frozen=True)
class LockedHead:
    """A chain's head row, locked for a decision: the newest event's number and hash, the
    clock the decision is stamped with, and the number it takes."""

    chain: int
    seq: int
    hash: str
    clock: EventClock
    number: int


# Ids per statement when reading many ids' events: well under both backends' limits.
_CHUNK = 500

# Outcome filters of the runs page, by the word an operator picks.
OUTCOMES = {
    "applied": "OUTCOME_APPLIED",
    "already_applied": "OUTCOME_ALREADY_APPLIED",
    "skipped": "OUTCOME_SKIPPED",
    "failed": "",
}


@dataclass(frozen=True)
class RunFilter:
    """What the runs page narrows to; empty fields do not narrow."""

    run_id: str = ""  # a substring of the run id
    rule: str = ""
    since: str = ""  # ISO 8601, compared with the time an attempt began
    until: str = ""
    outcome: str = ""  # a key of OUTCOMES: runs with at least one such write
    pending_only: bool = False


@dataclass(frozen=True)
class InFlight:
    """A step that would be in doubt, but whose attempt is live: nobody may decide it yet."""

    item: PendingItem
    note: str  # why, and when it can be decided


@dataclass(frozen=True)
class RunRow(RunSummary):
    """One run on the runs page: its summary, its writes by outcome, what is pending."""

    writes: dict[str, int] = field(default_factory=dict)  # by OUTCOMES key
    pending: int = 0

    def as_json(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class RunsPage:
    runs: list[RunRow]
    offset: int
    limit: int
    more: bool  # a next page exists


class OperatorLedger:
    """The queries; a backend subclass supplies ``_fetch``, ``_execute`` and
    ``_locked_chain``."""

    _queries: Queries  # the statements in the backend's words
    _clock: Clock  # the ledger's own time, in the backend's words

    # -- primitives a backend supplies -------------------------------------------

    def _fetch(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _locked_chain(self, run_id: str) -> contextlib.AbstractContextManager[LockedHead]:
        """A transaction holding the head row of ``run_id``'s chain locked; yields it."""
        raise NotImplementedError

    def _execute_many(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        raise NotImplementedError

    def size_bytes(self) -> int:
        """What the ledger takes on disk."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def idle(self) -> None:
        """Let go of what the ledger holds until the next query needs it again: a server
        connection, where the ledger is shared (a file stays open)."""

    def _sql(self, sql: str) -> str:
        """A statement in the backend's placeholder style."""
        return self._queries.sql(sql)

    @functools.cached_property
    def _columns(self) -> str:
        # A ledger opened read-only may not have been migrated: read it as it is.
        names = self._fetch(self._queries.dialect.columns.format(table="audit_events"))
        return readable_columns({str(row[0]) for row in names})

    # -- pending and decisions ----------------------------------------------------

    def undecided(self, *, run_id: str | None = None) -> list[PendingItem]:
        """Everything the ledger leaves open, newest first, steps in flight included; one
        run's when ``run_id`` is given."""
        return self.pending_of(self._candidate_ids(run_id))

    def pending(self, *, run_id: str | None = None) -> list[PendingItem]:
        """Everything a person can decide now, newest first: what is open, but steps in
        flight on a live sidecar (sidecar.ledger.liveness)."""
        return self.split_in_flight(self.undecided(run_id=run_id))[0]

    def in_flight(self, *, run_id: str | None = None) -> list[InFlight]:
        """The steps that would be in doubt but that their live attempt is still running."""
        return self.split_in_flight(self.undecided(run_id=run_id))[1]

    def split_in_flight(
        self, items: Sequence[PendingItem]
    ) -> tuple[list[PendingItem], list[InFlight]]:
        """``items`` apart: those a person can decide, and the steps in flight, judged by the
        ledger's clock, never this host's. A step whose call holds a send permit is in
        flight until its end is recorded, or its deadline passed and its sidecar is silent
        (sidecar.ledger.permits); one without a permit while its attempt is live."""
        steps = [item for item in items if item.kind is Kind.STEP_IN_DOUBT]
        if not steps:
            return list(items), []
        now = self._ledger_now()
        history = self._events_by_id([item.id for item in steps])
        permitted = {
            item.id: found
            for item in steps
            if (found := permits.open_permit(history.get(item.id, []))) is not None
        }
        lives = self._lives({item.run_id for item in steps})
        sidecars = {life.sidecar for life in lives.values() if life.sidecar}
        sidecars |= {str(p.event.detail.get(permits.SIDECAR, "")) for p in permitted.values()}
        alive = self._alive(sidecars - {""})
        decidable: list[PendingItem] = []
        flying: list[InFlight] = []
        for item in items:
            note = self._in_flight_note(item, permitted, lives, alive, now)
            if note:
                flying.append(InFlight(item, note))
            else:
                decidable.append(item)
        return decidable, flying

    def _in_flight_note(
        self,
        item: PendingItem,
        permitted: dict[str, StoredEvent],
        lives: dict[str, AttemptLife],
        alive: set[str],
        now: datetime,
    ) -> str:
        """Why ``item`` may not be decided yet, or "" when it may."""
        if item.kind is not Kind.STEP_IN_DOUBT:
            return ""
        permit = permitted.get(item.id)
        if permit is not None:
            return permits.still_under_way(permit, now, alive)
        life = lives.get(item.attempt_id)
        if life and not why_not_live(life, alive, now.timestamp()):
            return in_flight_note(life)
        return ""

    def _ledger_now(self) -> datetime:
        """The ledger's own time: PostgreSQL's clock, or this host's for a SQLite file (the
        host every process writing that file runs on)."""
        rows = self._fetch(f"SELECT {self._clock.now}")
        return datetime.fromtimestamp(float(rows[0][0]), UTC)

    def _lives(self, run_ids: set[str]) -> dict[str, AttemptLife]:
        found: dict[str, AttemptLife] = {}
        phases = ", ".join(phase(p) for p in (Phase.ATTEMPT_BEGIN, Phase.ATTEMPT_END, Phase.LEASE))
        sql = self._sql(
            "SELECT seq, attempt_id, scope, phase, detail FROM audit_events "
            f"WHERE run_id = ? AND phase IN ({phases}) ORDER BY seq"
        )
        for run_id in sorted(run_ids):
            found.update(lives(self._fetch(sql, [run_id])))
        return found

    def _alive(self, sidecars: set[str]) -> set[str]:
        if not sidecars:
            return set()
        try:
            rows = self._fetch(self._sql(alive_query(self._clock, len(sidecars))), sorted(sidecars))
        except LedgerError:
            return set()  # a ledger no sidecar of this version wrote: none beats
        return {str(row[0]) for row in rows}

    def pending_of(self, ids: Sequence[str]) -> list[PendingItem]:
        """Which of ``ids`` are pending, newest first."""
        items = []
        for events in self._events_by_id(ids).values():
            item = pending_item(events)
            if item is not None:
                items.append(item)
        items.sort(key=lambda item: item.seq, reverse=True)
        return items

    def _candidate_ids(self, run_id: str | None) -> list[str]:
        # Ids that may be pending: a step begun that no attempt ended, an intent
        # without an outcome in its attempt, an UNKNOWN failure. The rule itself
        # (sidecar.ledger.pending) then reads each one's events: candidates are few.
        # A derived id is its run's (the run is part of what it is derived from), so a
        # step's end is looked up by its run too: through (phase, run_id) the lookup reads
        # the run's step ends, where SQLite, left to itself, read every step end of the
        # ledger for each step begun.
        narrow = " AND b.run_id = ?" if run_id is not None else ""
        sql = f"""
SELECT b.derived_id FROM audit_events b
 WHERE b.phase = {phase(Phase.STEP_BEGIN)}{narrow}
   AND NOT EXISTS (SELECT 1 FROM audit_events o
                    WHERE o.derived_id = b.derived_id AND o.run_id = b.run_id
                      AND o.phase = {phase(Phase.STEP_END)})
UNION
SELECT b.derived_id FROM audit_events b
 WHERE b.phase = {phase(Phase.INTENT)}{narrow}
   AND NOT EXISTS (SELECT 1 FROM audit_events o
                    WHERE o.derived_id = b.derived_id AND o.attempt_id = b.attempt_id
                      AND o.phase = {phase(Phase.OUTCOME)} AND o.seq > b.seq)
UNION
SELECT b.derived_id FROM audit_events b
 WHERE b.failure_class = 'UNKNOWN'{narrow}
UNION
SELECT b.derived_id FROM audit_events b
 WHERE b.phase = {phase(Phase.DECISION)}{narrow}
   AND EXISTS (SELECT 1 FROM audit_events o
                WHERE o.derived_id = b.derived_id AND o.run_id = b.run_id
                  AND o.phase = {phase(Phase.STEP_END)} AND o.seq > b.seq)
"""
        params = [run_id] * 4 if run_id is not None else []
        return [str(row[0]) for row in self._fetch(self._sql(sql), params) if row[0]]

    def ids_since(self, seq: int, chain: int = 0) -> list[str]:
        """The ids named by events of ``chain`` after ``seq``: the only ones whose state can
        have changed. Per chain: a chain's numbers increase in the order its events commit,
        the ledger's across chains need not."""
        rows = self._fetch(
            self._sql(
                "SELECT DISTINCT derived_id FROM audit_events WHERE chain = ? AND seq > ? "
                "AND derived_id <> ''"
            ),
            [chain, seq],
        )
        return [str(row[0]) for row in rows]

    def _events_by_id(self, ids: Sequence[str]) -> dict[str, list[StoredEvent]]:
        by_id: dict[str, list[StoredEvent]] = {}
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start : start + _CHUNK]
            for row in self._fetch(self._queries.events_of(len(chunk), self._columns), chunk):
                stored = row_to_event(row)
                by_id.setdefault(stored.event.derived_id, []).append(stored)
        return by_id

    def events_for(self, item_id: str) -> list[StoredEvent]:
        return self._events_by_id([item_id]).get(item_id, [])

    def resolve(
        self, item_id: str, decision: Decision, **note: Unpack[DecisionNote]
    ) -> StoredEvent:
        """Append an operator's decision on ``item_id`` to the chain; DecisionRefused if
        there is nothing to decide (the decision already taken is named)."""
        before = self.events_for(item_id)
        with self._locked_chain(before[0].event.run_id if before else "") as locked:
            events = self.events_for(item_id)
            self._refuse_in_flight(events)
            decided = decision_event(events, item_id, decision, **note)
            event = self._attest(decided, locked.number, locked.hash)
            batch = chain(
                [event],
                locked.seq,
                locked.hash,
                {},
                clock=locked.clock,
                chain_id=locked.chain,
                numbers=iter([locked.number]),
            )
            self._execute_many(self._queries.insert_event, batch.rows)
            self._execute_many(self._queries.set_head, [(batch.seq, batch.head, locked.chain)])
        return self.event(batch.seq)

    def operator(self) -> str:
        """Who this ledger's decisions are recorded as deciding: the operator as the
        backend authenticates them, or "" when it authenticates none (a SQLite ledger
        opened without an operator key)."""
        raise NotImplementedError

    def _attest(self, event: AuditEvent, seq: int, head: str) -> AuditEvent:
        """The decision ``event``, to be appended as event ``seq`` after the hash ``head``,
        as the backend makes it an operator's (sidecar.ledger.operator): signed, on SQLite."""
        return event

    def _refuse_in_flight(self, events: Sequence[StoredEvent]) -> None:
        item = pending_item(events)
        if item is None:
            return
        flying = self.split_in_flight([item])[1]
        if flying:
            raise DecisionRefused(f"{item.id} cannot be decided yet: {flying[0].note}")

    def event(self, seq: int) -> StoredEvent:
        rows = self._fetch(
            self._sql(f"SELECT {self._columns} FROM audit_events WHERE seq = ?"), [seq]
        )
        if not rows:
            raise LedgerError(f"no event #{seq}")
        return row_to_event(rows[0])

    # -- runs -------------------------------------------------------------------------

    def runs_page(
        self,
        filters: RunFilter,
        *,
        offset: int = 0,
        limit: int = 50,
        pending_runs: dict[str, int] | None = None,
    ) -> RunsPage:
        """Runs, the one whose newest attempt began last first, a page at a time.

        ``pending_runs`` (run -> items pending) marks runs, and narrows to them
        when ``filters.pending_only``.
        """
        where = [f"b.phase = {phase(Phase.ATTEMPT_BEGIN)}"]
        params: list[object] = []
        if filters.run_id:
            where.append("b.run_id LIKE ? ESCAPE '\\'")
            params.append("%" + _like_escape(filters.run_id) + "%")
        if filters.rule:
            where.append("b.rule = ?")
            params.append(filters.rule)
        if filters.since:
            where.append("b.ts >= ?")
            params.append(filters.since)
        if filters.until:
            where.append("b.ts < ?")
            params.append(filters.until)
        if filters.outcome in OUTCOMES:
            test = "o.reason <> ''" if filters.outcome == "failed" else "o.outcome = ?"
            where.append(
                "EXISTS (SELECT 1 FROM audit_events o WHERE o.run_id = b.run_id "
                f"AND o.phase = {phase(Phase.OUTCOME)} AND {test})"
            )
            if filters.outcome != "failed":
                params.append(OUTCOMES[filters.outcome])
        if filters.pending_only:
            runs = sorted((pending_runs or {}).keys())
            if not runs:
                return RunsPage([], offset, limit, False)
            where.append(f"b.run_id IN ({marks(len(runs))})")
            params.extend(runs)
        sql = (
            "SELECT b.run_id, MAX(b.seq) AS newest FROM audit_events b "
            f"WHERE {' AND '.join(where)} GROUP BY b.run_id ORDER BY newest DESC LIMIT ? OFFSET ?"
        )
        rows = self._fetch(self._sql(sql), [*params, limit + 1, offset])
        run_ids = [str(r[0]) for r in rows[:limit]]
        summaries = self._summaries(run_ids, pending_runs or {})
        return RunsPage(summaries, offset, limit, len(rows) > limit)

    def _summaries(self, run_ids: Sequence[str], pending: dict[str, int]) -> list[RunRow]:
        if not run_ids:
            return []
        of_runs = f"run_id IN ({marks(len(run_ids))})"
        found: dict[str, RunRow] = {}
        for r in self._fetch(
            self._sql(f"SELECT {RUN_SUMMARY} FROM audit_events WHERE {of_runs} GROUP BY run_id"),
            run_ids,
        ):
            run = run_summary(r)
            found[run.run_id] = RunRow(**asdict(run), pending=pending.get(run.run_id, 0))
        by_outcome = {value: key for key, value in OUTCOMES.items() if value}
        for run_id, outcome, failed, count in self._fetch(
            self._sql(
                "SELECT run_id, outcome, CASE WHEN reason <> '' THEN 1 ELSE 0 END, COUNT(*) "
                f"FROM audit_events WHERE {of_runs} AND phase = {phase(Phase.OUTCOME)} "
                "GROUP BY run_id, outcome, CASE WHEN reason <> '' THEN 1 ELSE 0 END"
            ),
            run_ids,
        ):
            key = "failed" if int(failed) else by_outcome.get(str(outcome), "")
            if key and str(run_id) in found:
                writes = found[str(run_id)].writes
                writes[key] = writes.get(key, 0) + int(count)
        return [found[run_id] for run_id in run_ids if run_id in found]

    def run_events(self, run_id: str, *, after: int = 0, limit: int = 2000) -> list[StoredEvent]:
        """One run's events in order, a page at a time (from after ``after``)."""
        rows = self._fetch(
            self._queries.events(self._columns, of_run=True, limit=True), [run_id, after, limit]
        )
        return [row_to_event(row) for row in rows]

    def run_count(self) -> int:
        return int(self._fetch("SELECT COUNT(*) FROM audit_runs")[0][0])

    def heads(self) -> dict[int, tuple[int, str]]:
        """Each chain's head: its newest event's number and hash."""
        rows = self._fetch(self._queries.heads)
        return {int(chain): (int(seq), str(hash_)) for chain, seq, hash_ in rows}

    def head(self) -> tuple[int, str]:
        """The newest event's number and hash, of any chain."""
        return newest_head(self.heads())


def _like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


class PendingTracker:
    """What is pending, kept current cheaply: the whole ledger once, then only the ids
    that events appended since name (an id's state depends on its own events alone).
    Which of them are in flight is asked anew each time: a sidecar dies without an event."""

    def __init__(self, ledger: OperatorLedger, *, full_after: int = 20_000) -> None:
        self.ledger = ledger
        self._full_after = full_after
        # Each chain's head when last asked: a cursor per chain, since across chains the
        # numbers need not commit in order (sidecar.ledger.sql.chain_of).
        self._heads: dict[int, int] | None = None
        self._items: dict[str, PendingItem] = {}
        self._lock = threading.Lock()

    def items(self) -> list[PendingItem]:
        """What a person can decide now, newest first."""
        return self.ledger.split_in_flight(self.undecided())[0]

    def in_flight(self) -> list[InFlight]:
        return self.ledger.split_in_flight(self.undecided())[1]

    def undecided(self) -> list[PendingItem]:
        with self._lock:
            heads = {chain: seq for chain, (seq, _hash) in self.ledger.heads().items()}
            before = self._heads
            moved = {
                chain: (before or {}).get(chain, 0)
                for chain, seq in heads.items()
                if seq != (before or {}).get(chain, 0)
            }
            if (
                before is None
                or any(heads[chain] < seq for chain, seq in moved.items())
                or any(heads[chain] - seq > self._full_after for chain, seq in moved.items())
            ):
                found = self.ledger.undecided()
            elif not moved:
                found = list(self._items.values())
            else:
                changed = set(self._items)
                for chain, seq in moved.items():
                    changed |= set(self.ledger.ids_since(seq, chain))
                found = self.ledger.pending_of(sorted(changed))
            self._heads = heads
            self._items = {item.id: item for item in found}
            return sorted(found, key=lambda item: item.seq, reverse=True)
