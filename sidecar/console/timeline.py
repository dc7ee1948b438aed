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

from collections.abc import Sequence
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
    attempts: dict[str, AttemptView] = {}
    entries: list[Entry] = []
    open_entries: dict[tuple[str, str], Entry] = {}
    rule = ""
    newest: dict[str, AttemptView] = {}  # by scope: fencing is per (run, scope)
    decided: dict[str, str] = {}  # id -> the latest decision on it so far
    traces: dict[int, str] = {}  # seq -> the trace of the call that wrote it
    scopes: dict[int, str] = {}  # seq -> the scope its event names
    for stored in events:
        e = stored.event
        if e.trace_id:
            traces[stored.seq] = e.trace_id
        scopes[stored.seq] = e.scope
        rule = rule or e.rule
        attempt = attempts.get(e.attempt_id)
        if e.phase == Phase.ATTEMPT_BEGIN:
            attempt = AttemptView(
                e.attempt_id,
                len(attempts) + 1,
                stored.seq,
                stored.ts,
                e.checkpoint,
                lease_deadline=str(e.detail.get("lease_deadline", "")),
                scope=e.scope,
            )
            attempts[e.attempt_id] = attempt
            entry = Entry("attempt_begin", stored.seq, stored.ts, attempt)
            older = newest.get(e.scope)
            if older is not None and not older.ended_ts:
                older.fenced_by = attempt.number
                entry.fences = older.number
            newest[e.scope] = attempt
            entries.append(entry)
            continue
        key = (e.attempt_id, e.derived_id)
        if e.phase == Phase.ATTEMPT_END:
            if attempt is not None:
                attempt.ended_ts = stored.ts
                # The counts alone: the detail says more (the front that ended it).
                attempt.counts = {k: int(e.detail[k]) for k in _COUNTS if k in e.detail}
            entries.append(
                Entry("attempt_end", stored.seq, stored.ts, attempt, detail=dict(e.detail))
            )
        elif e.phase in (Phase.INTENT, Phase.STEP_BEGIN):
            entry = _entry(
                "step" if e.phase == Phase.STEP_BEGIN else "write",
                stored,
                attempt,
                occurrence=e.occurrence,
                digest=e.digest,
                detail=dict(e.detail),
                state="no_outcome" if e.phase == Phase.INTENT else "in_progress",
            )
            open_entries[key] = entry
            entries.append(entry)
        elif e.phase == Phase.OUTCOME:
            entry_or_none = open_entries.get(key)
            if entry_or_none is None or entry_or_none.settled_ts:
                entries.append(
                    _entry(
                        "refusal",
                        stored,
                        attempt,
                        reason=e.reason,
                        failure_class=e.failure_class,
                        state="refused",
                    )
                )
                continue
            entry = entry_or_none
            entry.settled_ts = stored.ts
            entry.outcome, entry.reason, entry.failure_class = (
                e.outcome,
                e.reason,
                e.failure_class,
            )
            entry.state = _settled_state(entry)
            if e.detail.get("landed") == "unknown":
                entry.state = "may_have_landed"  # the store was called: it may have it
            if entry.kind == "step" and entry.state == "already_applied":
                entry.by_decision = decided.get(e.derived_id) == "ran"
        elif e.phase == Phase.STEP_END:
            entry_or_none = open_entries.get(key)
            if entry_or_none is not None:
                entry_or_none.ended_ts = stored.ts
                entry_or_none.result_json = str(e.detail.get("result_json", ""))
                entry_or_none.state = "ended"
        elif e.phase == Phase.STEP_ABORT:
            entry_or_none = open_entries.get(key)
            if entry_or_none is not None:
                entry_or_none.ended_ts = stored.ts
                entry_or_none.state = "aborted"
        elif e.phase == Phase.STEP_FAILED:
            entry_or_none = open_entries.get(key)
            if entry_or_none is not None:
                entry_or_none.state = "call_failed"
                entry_or_none.error = str(e.detail.get("error", ""))
        elif e.phase == Phase.LEASE:
            if attempt is not None:
                attempt.lease_deadline = str(e.detail.get("lease_deadline", ""))
        elif e.phase == Phase.READ:
            entries.append(
                _entry(
                    "read",
                    stored,
                    attempt,
                    write_type="",  # a read writes nothing
                    reason=e.reason,
                    failure_class=e.failure_class,
                    state="refused" if e.reason else "read",
                )
            )
        elif e.phase == Phase.DECISION:
            decided[e.derived_id] = str(e.detail.get("decision", ""))
            entries.append(
                _entry(
                    "decision",
                    stored,
                    attempt,
                    detail=dict(e.detail),
                    result_json=str(e.detail.get("result_json", "")),
                    state=str(e.detail.get("decision", "")),
                )
            )
    _mark_in_doubt(entries, pending_ids)
    for entry in entries:
        entry.trace_id = traces.get(entry.seq, "")
        entry.scope = entry.attempt.scope if entry.attempt else scopes.get(entry.seq, "")
    shown = list(attempts.values())
    return Timeline(run_id, rule, shown, entries, by_scope(shown, entries))


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
