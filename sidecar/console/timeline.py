"""One run's events drawn as a timeline: attempts, writes, steps, decisions.

A pure function of the run's events (oldest first), so that the page, its
JSON and the tests read the same thing. A write is one entry from its intent
to its outcome; a step is one entry from its begin to its end; each entry
belongs to the attempt that made it, numbered in the order the attempts began.
A run's scoped attempts (a tool call's, say) are attempts of the same run: each
shows its scope, and fences only the attempts of its own scope. The page draws them
grouped by scope (:attr:`Timeline.scopes`): the unscoped attempts first, then each
scope in the order it began, as ``actonce audit show`` prints them, so that the
attempts of parallel tool calls do not interleave.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sidecar.ledger.base import Phase, StoredEvent

# Colours of the attempts' lanes, in order (the stylesheet's --lane-N).
LANES = 6


_COUNTS = ("applied", "already_applied", "skipped", "failed")


@dataclass
class AttemptView:
    attempt_id: str
    number: int
    began_seq: int
    began_ts: str
    checkpoint: str
    lease_deadline: str = ""
    scope: str = ""
    ended_ts: str = ""
    counts: dict[str, int] = field(default_factory=dict)
    fenced_by: int = 0  # the number of the attempt that fenced it, if it never ended

    @property
    def lane(self) -> int:
        return (self.number - 1) % LANES


@dataclass
class Entry:
    """One line of the timeline."""

    kind: str  # attempt_begin, attempt_end, write, step, read, refusal, decision
    seq: int
    ts: str
    attempt: AttemptView | None
    rpc: str = ""
    write_type: str = ""
    derived_id: str = ""
    occurrence: int = -1
    digest: str = ""
    detail: dict[str, Any] = field(default_factory=dict)
    # How it ended: an outcome, or a refusal's reason and class; a step's end.
    outcome: str = ""
    reason: str = ""
    failure_class: str = ""
    settled_ts: str = ""
    ended_ts: str = ""
    result_json: str = ""
    state: str = ""  # what a person should read: applied, already_applied, in_doubt, ...
    fences: int = 0  # attempt_begin: the attempt this one fenced
    by_decision: bool = False  # a step answered from an operator's decision, not an attempt's end
    trace_id: str = ""  # the trace of the call that made the entry, when it was traced
    scope: str = ""  # its attempt's scope
    error: str = ""  # a step whose call failed: what its tool answered, or why none came

    @property
    def elapsed_ms(self) -> float | None:
        end = self.settled_ts or self.ended_ts
        if not end:
            return None
        return (_parse(end) - _parse(self.ts)).total_seconds() * 1000


@dataclass
class ScopeView:
    """The attempts of one scope of a run ("" for its unscoped ones) and their entries."""

    scope: str
    attempts: list[AttemptView] = field(default_factory=list)
    entries: list[Entry] = field(default_factory=list)


@dataclass
class Timeline:
    run_id: str
    rule: str
    attempts: list[AttemptView]
    entries: list[Entry]
    scopes: list[ScopeView] = field(default_factory=list)


def by_scope(attempts: Sequence[AttemptView], entries: Sequence[Entry]) -> list[ScopeView]:
    """The run's attempts and entries grouped by scope, the unscoped first; an entry of no
    attempt the page shows (its begin is on an earlier page) goes by its event's scope."""
    groups: dict[str, ScopeView] = {"": ScopeView("")}
    for attempt in attempts:
        groups.setdefault(attempt.scope, ScopeView(attempt.scope)).attempts.append(attempt)
    for entry in entries:
        groups.setdefault(entry.scope, ScopeView(entry.scope)).entries.append(entry)
    return [group for group in groups.values() if group.attempts or group.entries]


def build(run_id: str, events: Sequence[StoredEvent], pending_ids: set[str]) -> Timeline:
    """The timeline of a run; ``pending_ids`` are its items that need a person."""
    drawing = _Drawing()
    for stored in events:
        drawing.take(stored)
    return drawing.timeline(run_id, pending_ids)


class _Drawing:
    """A timeline as it is drawn, one event after another, oldest first."""

    def __init__(self) -> None:
        self.attempts: dict[str, AttemptView] = {}
        self.entries: list[Entry] = []
        self.open_entries: dict[tuple[str, str], Entry] = {}
        self.rule = ""
        self.newest: dict[str, AttemptView] = {}  # by scope: fencing is per (run, scope)
        self.decided: dict[str, str] = {}  # id -> the latest decision on it so far
        self.traces: dict[int, str] = {}  # seq -> the trace of the call that wrote it
        self.scopes: dict[int, str] = {}  # seq -> the scope its event names
        self._by_phase: dict[str, Callable[[StoredEvent, AttemptView | None], None]] = {
            Phase.ATTEMPT_BEGIN: self._attempt_began,
            Phase.ATTEMPT_END: self._attempt_ended,
            Phase.INTENT: self._opened,
            Phase.STEP_BEGIN: self._opened,
            Phase.OUTCOME: self._settled,
            Phase.STEP_END: self._step_ended,
            Phase.STEP_ABORT: self._step_aborted,
            Phase.STEP_FAILED: self._step_failed,
            Phase.LEASE: self._lease_extended,
            Phase.READ: self._read,
            Phase.DECISION: self._decided,
        }

    def take(self, stored: StoredEvent) -> None:
        e = stored.event
        if e.trace_id:
            self.traces[stored.seq] = e.trace_id
        self.scopes[stored.seq] = e.scope
        self.rule = self.rule or e.rule
        phase = self._by_phase.get(e.phase)
        if phase is not None:
            phase(stored, self.attempts.get(e.attempt_id))

    def timeline(self, run_id: str, pending_ids: set[str]) -> Timeline:
        entries = self.entries
        _mark_in_doubt(entries, pending_ids)
        for entry in entries:
            entry.trace_id = self.traces.get(entry.seq, "")
            entry.scope = entry.attempt.scope if entry.attempt else self.scopes.get(entry.seq, "")
        shown = list(self.attempts.values())
        return Timeline(run_id, self.rule, shown, entries, by_scope(shown, entries))

    def _open_entry(self, stored: StoredEvent) -> Entry | None:
        return self.open_entries.get((stored.event.attempt_id, stored.event.derived_id))

    # -- attempts ----------------------------------------------------------------------

    def _attempt_began(self, stored: StoredEvent, _known: AttemptView | None) -> None:
        e = stored.event
        attempt = AttemptView(
            e.attempt_id,
            len(self.attempts) + 1,
            stored.seq,
            stored.ts,
            e.checkpoint,
            lease_deadline=str(e.detail.get("lease_deadline", "")),
            scope=e.scope,
        )
        self.attempts[e.attempt_id] = attempt
        entry = Entry("attempt_begin", stored.seq, stored.ts, attempt)
        older = self.newest.get(e.scope)
        if older is not None and not older.ended_ts:
            older.fenced_by = attempt.number
            entry.fences = older.number
        self.newest[e.scope] = attempt
        self.entries.append(entry)

    def _attempt_ended(self, stored: StoredEvent, attempt: AttemptView | None) -> None:
        e = stored.event
        if attempt is not None:
            attempt.ended_ts = stored.ts
            # The counts alone: the detail says more (the front that ended it).
            attempt.counts = {k: int(e.detail[k]) for k in _COUNTS if k in e.detail}
        self.entries.append(
            Entry("attempt_end", stored.seq, stored.ts, attempt, detail=dict(e.detail))
        )

    def _lease_extended(self, stored: StoredEvent, attempt: AttemptView | None) -> None:
        if attempt is not None:
            attempt.lease_deadline = str(stored.event.detail.get("lease_deadline", ""))

    # -- writes and steps --------------------------------------------------------------

    def _opened(self, stored: StoredEvent, attempt: AttemptView | None) -> None:
        e = stored.event
        entry = _entry(
            "step" if e.phase == Phase.STEP_BEGIN else "write",
            stored,
            attempt,
            occurrence=e.occurrence,
            digest=e.digest,
            detail=dict(e.detail),
            state="no_outcome" if e.phase == Phase.INTENT else "in_progress",
        )
        self.open_entries[(e.attempt_id, e.derived_id)] = entry
        self.entries.append(entry)

    def _settled(self, stored: StoredEvent, attempt: AttemptView | None) -> None:
        e = stored.event
        entry = self._open_entry(stored)
        if entry is None or entry.settled_ts:
            refusal = _entry(
                "refusal",
                stored,
                attempt,
                reason=e.reason,
                failure_class=e.failure_class,
                state="refused",
            )
            self.entries.append(refusal)
            return
        entry.settled_ts = stored.ts
        entry.outcome, entry.reason, entry.failure_class = e.outcome, e.reason, e.failure_class
        entry.state = _settled_state(entry)
        if e.detail.get("landed") == "unknown":
            entry.state = "may_have_landed"  # the store was called: it may have it
        if entry.kind == "step" and entry.state == "already_applied":
            entry.by_decision = self.decided.get(e.derived_id) == "ran"

    def _step_ended(self, stored: StoredEvent, _attempt: AttemptView | None) -> None:
        entry = self._open_entry(stored)
        if entry is not None:
            entry.ended_ts = stored.ts
            entry.result_json = str(stored.event.detail.get("result_json", ""))
            entry.state = "ended"

    def _step_aborted(self, stored: StoredEvent, _attempt: AttemptView | None) -> None:
        entry = self._open_entry(stored)
        if entry is not None:
            entry.ended_ts = stored.ts
            entry.state = "aborted"

    def _step_failed(self, stored: StoredEvent, _attempt: AttemptView | None) -> None:
        entry = self._open_entry(stored)
        if entry is not None:
            entry.state = "call_failed"
            entry.error = str(stored.event.detail.get("error", ""))

    # -- reads and decisions -----------------------------------------------------------

    def _read(self, stored: StoredEvent, attempt: AttemptView | None) -> None:
        e = stored.event
        read = _entry(
            "read",
            stored,
            attempt,
            write_type="",  # a read writes nothing
            reason=e.reason,
            failure_class=e.failure_class,
            state="refused" if e.reason else "read",
        )
        self.entries.append(read)

    def _decided(self, stored: StoredEvent, attempt: AttemptView | None) -> None:
        e = stored.event
        self.decided[e.derived_id] = str(e.detail.get("decision", ""))
        decision = _entry(
            "decision",
            stored,
            attempt,
            detail=dict(e.detail),
            result_json=str(e.detail.get("result_json", "")),
            state=str(e.detail.get("decision", "")),
        )
        self.entries.append(decision)


def _entry(kind: str, stored: StoredEvent, attempt: AttemptView | None, **fields: Any) -> Entry:
    """The entry of ``stored``, named by its event's RPC, write type and derived id unless
    ``fields`` say otherwise."""
    e = stored.event
    named = {"rpc": e.rpc, "write_type": e.write_type, "derived_id": e.derived_id}
    return Entry(kind, stored.seq, stored.ts, attempt, **{**named, **fields})


def _settled_state(entry: Entry) -> str:
    if entry.reason:
        return "in_doubt_refused" if entry.reason == "IN_DOUBT" else "refused"
    if entry.kind == "step":
        # A BeginStep that was told to go ahead is in progress until its EndStep.
        return "already_applied" if entry.outcome == "OUTCOME_ALREADY_APPLIED" else "in_progress"
    return {
        "OUTCOME_APPLIED": "applied",
        "OUTCOME_ALREADY_APPLIED": "already_applied",
        "OUTCOME_SKIPPED": "skipped",
    }.get(entry.outcome, "applied")


def _mark_in_doubt(entries: list[Entry], pending_ids: set[str]) -> None:
    # A step told to go ahead that never ended: in doubt while the ledger says so
    # (the same rule as `actonce audit pending`), decided once a person decided.
    decided = {e.derived_id: e.state for e in entries if e.kind == "decision"}
    for entry in entries:
        if entry.kind == "step" and entry.state == "in_progress":
            if entry.derived_id in pending_ids:
                entry.state = "in_doubt"
            elif entry.derived_id in decided:
                entry.state = f"decided_{decided[entry.derived_id]}"


def _parse(ts: str) -> datetime:
    return datetime.fromisoformat(ts)


def event_json(stored: StoredEvent) -> dict[str, Any]:
    """One event for /api/runs/{run_id}: ids, digests and outcomes, as the ledger holds them."""
    e = stored.event
    return {
        "seq": stored.seq,
        "ts": stored.ts,
        "attempt_id": e.attempt_id,
        "scope": e.scope,
        "rpc": e.rpc,
        "phase": e.phase,
        "rule": e.rule,
        "write_type": e.write_type,
        "derived_id": e.derived_id,
        "request_id": e.request_id,
        "occurrence": e.occurrence,
        "digest": e.digest,
        "outcome": e.outcome,
        "reason": e.reason,
        "failure_class": e.failure_class,
        "detail": e.detail,
        "trace_id": e.trace_id,
        "span_id": e.span_id,
        "hash": stored.hash,
    }
