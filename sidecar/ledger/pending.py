"""What needs a person, and a person's decision: rules over one id's events.

The sidecar hands three things to an operator, each read from the ledger:

- a **step in doubt**: a non-idempotent step began (in an attempt that never
  ended it) and no attempt ended it; every later attempt gets ``IN_DOUBT``;
- a **write without an outcome**: its intent is durable, but neither its
  attempt nor any later one recorded how it ended (the sidecar died, or the
  outcome's audit failed);
- a **write that failed UNKNOWN**: the sidecar could not tell whether it landed.

An operator decides each with ``actonce audit resolve``: a step ``ran`` (with
the result a later attempt gets back) or ``did_not_run`` (a later attempt may
run it); a write ``landed`` or ``not_landed``. The decision is an audit event
of its own on the id's chain of events: an item is pending only for events
after its latest decision, so a step that is run again after ``did_not_run``
and interrupted again is in doubt again, and needs a decision of its own.

These functions take one id's events, oldest first; the ledger's queries
(sidecar.ledger.operator) find the ids and read their events.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import NotRequired, TypedDict

from sidecar.errors import decide_step, decide_write
from sidecar.ledger.base import AuditEvent, Phase, StoredEvent
from sidecar.rules import effects

# The rpc field of a decision event: it is no call of the agent's.
DECISION_RPC = "Resolve"


class Kind(enum.StrEnum):
    """Why an item needs a person."""

    STEP_IN_DOUBT = "step_in_doubt"
    WRITE_WITHOUT_OUTCOME = "write_without_outcome"
    WRITE_FAILED_UNKNOWN = "write_failed_unknown"
    # A step decided ``did_not_run`` whose call then recorded its end: it ran after all.
    STEP_CONFLICT = "step_conflict"


class Decision(enum.StrEnum):
    """What an operator found, for a step (ran, did_not_run) or a write (landed, not_landed)."""

    RAN = "ran"
    DID_NOT_RUN = "did_not_run"
    LANDED = "landed"
    NOT_LANDED = "not_landed"


STEP_DECISIONS = frozenset({Decision.RAN, Decision.DID_NOT_RUN})
WRITE_DECISIONS = frozenset({Decision.LANDED, Decision.NOT_LANDED})


@dataclass(frozen=True)
class PendingItem:
    """One thing a person must decide. Ids and digests only, never a payload."""

    kind: Kind
    id: str  # the step id or the write's derived id: what `audit resolve` takes
    run_id: str
    rule: str
    attempt_id: str
    rpc: str
    tool: str  # the step's tool; empty for a builtin write
    write_type: str
    digest: str
    seq: int  # the event that made it pending
    ts: str
    why: str

    def as_json(self) -> dict[str, object]:
        return {**asdict(self), "kind": self.kind.value}


@dataclass(frozen=True)
class RecordedDecision:
    """A decision as the ledger holds it."""

    seq: int
    ts: str
    decision: Decision
    by: str
    reason: str
    result_json: str
    by_note: str = ""  # the name the operator typed, beside who the ledger authenticated

    def describe(self) -> str:
        noted = f", noted as {self.by_note}" if self.by_note else ""
        return (
            f"event #{self.seq}: {self.decision.value} by {self.by}{noted} at {self.ts} "
            f"({self.reason})"
        )


class DecisionRefused(Exception):
    """A decision that cannot be recorded; the message says why, naming what is in the way."""


def latest_decision(events: Sequence[StoredEvent]) -> RecordedDecision | None:
    """The newest decision among one id's events, if any."""
    for stored in reversed(events):
        if stored.event.phase == Phase.DECISION:
            return decision_of(stored)
    return None


def decision_of(stored: StoredEvent) -> RecordedDecision:
    detail = stored.event.detail
    return RecordedDecision(
        seq=stored.seq,
        ts=stored.ts,
        decision=Decision(str(detail.get("decision", ""))),
        by=str(detail.get("by", "")),
        reason=str(detail.get("reason", "")),
        result_json=str(detail.get("result_json", "")),
        by_note=str(detail.get("by_note", "")),
    )


def recorded_effect(event: AuditEvent) -> effects.ToolEffect:
    """A step's effect read back from the ledger: its recorded effect if it names
    one, else what its tool's name resolves to (unknown: non-idempotent)."""
    name = str(event.detail.get("effect", ""))
    if name in effects.ToolEffect.__members__:
        return effects.declared(effects.ToolEffect[name])
    return effects.effect_for(str(event.detail.get("tool", "")))


def failure_of(events: Sequence[StoredEvent]) -> str:
    """The error the newest failed call of a step answered (its tool's error, or why
    no answer came), or "" when none failed."""
    for stored in reversed(events):
        if stored.event.phase == Phase.STEP_FAILED:
            return str(stored.event.detail.get("error", ""))
    return ""


def tries_that_may_have_acted(events: Sequence[StoredEvent]) -> list[StoredEvent]:
    """The begins, among one step's events, of tries that may have acted.

    A try is one attempt's begin of the step; its attempt closes it by aborting
    the step (AbortStep: the effect did not happen), and the sidecar closes it
    by refusing the begin (IN_DOUBT, fenced, ...), since the tool was then never
    called. An attempt that begins the step again after aborting it opens a new
    try. An ended step is settled before this is asked.
    """
    tries: dict[str, StoredEvent] = {}
    for stored in events:
        event = stored.event
        if event.phase == Phase.STEP_BEGIN:
            tries[event.attempt_id] = stored
        elif event.phase == Phase.STEP_ABORT or (event.phase == Phase.OUTCOME and event.reason):
            tries.pop(event.attempt_id, None)
    return list(tries.values())


def pending_item(events: Sequence[StoredEvent]) -> PendingItem | None:
    """What, if anything, one id's events (oldest first) leave to a person."""
    if not events:
        return None
    decided = latest_decision(events)
    since = [e for e in events if decided is None or e.seq > decided.seq]
    if any(e.event.phase == Phase.STEP_BEGIN for e in events):
        if decided is not None and decided.decision is Decision.RAN:
            return None  # every later attempt gets the decided result (BeginStep)
        conflict = _ended_after_did_not_run(events, decided)
        if conflict is not None:
            return conflict
        return _step_in_doubt(events, since)
    return _write_pending(since)


def _ended_after_did_not_run(
    events: Sequence[StoredEvent], decided: RecordedDecision | None
) -> PendingItem | None:
    """A step decided ``did_not_run`` whose call, begun before the decision, recorded its
    end after it: what happened contradicts the decision, and a person must see it (the
    step may have acted twice). Decided ``--ran`` with its result, it is settled."""
    if decided is None or decided.decision is not Decision.DID_NOT_RUN:
        return None
    begun_before = {
        e.event.attempt_id
        for e in events
        if e.event.phase == Phase.STEP_BEGIN and e.seq < decided.seq
    }
    for stored in events:
        event = stored.event
        if (
            stored.seq > decided.seq
            and event.phase == Phase.STEP_END
            and event.attempt_id in begun_before
        ):
            tool = str(event.detail.get("tool", ""))
            return _item(
                Kind.STEP_CONFLICT,
                stored,
                f"step {tool!r} was decided did_not_run, then attempt {event.attempt_id}, which "
                "began it before that decision, recorded its end: it ran, and may have run "
                "again since; look at the upstream, then record what happened with "
                f"`actonce audit resolve {event.derived_id} --ran --result-json JSON`",
            )
    return None


def _step_in_doubt(
    events: Sequence[StoredEvent], since: Sequence[StoredEvent]
) -> PendingItem | None:
    if any(e.event.phase == Phase.STEP_END for e in events):
        return None  # an attempt ended it: later attempts get its result
    began = tries_that_may_have_acted(since)
    if not began:
        return None
    if max(recorded_effect(e.event) for e in began) is not effects.ToolEffect.NON_IDEMPOTENT_WRITE:
        return None  # read-only and idempotent steps are simply run again
    first = began[0]
    tool = str(first.event.detail.get("tool", ""))
    failed = failure_of(since)
    said = f"; its call failed: {failed}" if failed else ""
    return _item(
        Kind.STEP_IN_DOUBT,
        first,
        f"non-idempotent step {tool!r} began in attempt {first.event.attempt_id} and never "
        f"ended{said}: later attempts get IN_DOUBT until someone decides whether it ran "
        f"with `{decide_step(first.event.derived_id)}`",
    )


def _write_pending(since: Sequence[StoredEvent]) -> PendingItem | None:
    intents = [e for e in since if e.event.phase == Phase.INTENT]
    if not intents:
        return None
    outcomes = [e for e in since if e.event.phase == Phase.OUTCOME]
    if any(o.event.outcome for o in outcomes):
        return None  # it landed (now or on a retry): its derived id settles it
    unknown = [o for o in outcomes if o.event.failure_class == "UNKNOWN"]
    if unknown:
        last = unknown[-1]
        return _item(
            Kind.WRITE_FAILED_UNKNOWN,
            last,
            f"failed {last.event.reason} (UNKNOWN): it may or may not have landed; look in "
            f"the store, then decide with `{decide_write(last.event.derived_id)}`",
        )
    open_intents = [
        i
        for i in intents
        if not any(o.event.attempt_id == i.event.attempt_id and o.seq > i.seq for o in outcomes)
    ]
    if not open_intents:
        return None
    last = open_intents[-1]
    return _item(
        Kind.WRITE_WITHOUT_OUTCOME,
        last,
        f"its intent is recorded but no outcome (attempt {last.event.attempt_id}): the "
        "store may or may not have it; look in the store, then decide with "
        f"`{decide_write(last.event.derived_id)}`",
    )


def _item(kind: Kind, stored: StoredEvent, why: str) -> PendingItem:
    e = stored.event
    return PendingItem(
        kind=kind,
        id=e.derived_id,
        run_id=e.run_id,
        rule=e.rule,
        attempt_id=e.attempt_id,
        rpc=e.rpc,
        tool=str(e.detail.get("tool", "")),
        write_type=e.write_type,
        digest=e.digest,
        seq=stored.seq,
        ts=stored.ts,
        why=why,
    )


class DecisionNote(TypedDict):
    """Who decides and why, and what a step that ran returned: a decision's keywords."""

    # The operator as authenticated: the PostgreSQL role, the operator key's id, the
    # console's sign-in. Never a name the operator merely typed: that is ``by_note``.
    by: str
    reason: str
    result_json: NotRequired[str]
    digest: NotRequired[str]
    # The header a sign-in proxy named ``by`` in; unset when the name was typed.
    by_header: NotRequired[str]
    # A name the operator gave (``audit resolve --by``), recorded beside ``by`` as a note.
    by_note: NotRequired[str]


def decision_event(
    events: Sequence[StoredEvent],
    item_id: str,
    decision: Decision,
    *,
    by: str,
    reason: str,
    result_json: str = "",
    digest: str = "",
    by_header: str = "",
    by_note: str = "",
) -> AuditEvent:
    """The audit event recording ``decision`` on ``item_id``, given the id's events.

    DecisionRefused when there is nothing to decide: an unknown id, a decision
    of the wrong kind (a step's for a write), or an item that is not pending,
    which names the decision already taken if there is one.
    """
    item = _decidable_item(events, item_id, decision, by=by, reason=reason, result_json=result_json)
    detail: dict[str, object] = {
        "decision": decision.value,
        "by": by,
        "reason": reason,
        "kind": item.kind.value,
        "pending_since": item.seq,
    }
    if by_header:
        detail["by_header"] = by_header
    if by_note and by_note != by:
        detail["by_note"] = by_note
    if item.tool:
        detail["tool"] = item.tool
    if result_json:
        detail["result_json"] = result_json
    source = next(e.event for e in events if e.seq == item.seq)
    return AuditEvent(
        run_id=item.run_id,
        attempt_id=item.attempt_id,
        rpc=DECISION_RPC,
        phase=Phase.DECISION,
        rule=item.rule,
        checkpoint=source.checkpoint,
        write_type=item.write_type,
        derived_id=item_id,
        occurrence=source.occurrence,
        digest=digest,
        detail=detail,
    )


def _decidable_item(
    events: Sequence[StoredEvent],
    item_id: str,
    decision: Decision,
    *,
    by: str,
    reason: str,
    result_json: str,
) -> PendingItem:
    """The pending item ``decision`` may settle; DecisionRefused naming why not."""
    if not by.strip():
        raise DecisionRefused("a decision needs an authenticated operator")
    if not reason.strip():
        raise DecisionRefused("a decision needs --reason TEXT")
    if not events:
        raise DecisionRefused(f"no step or write with id {item_id} in the ledger")
    item = pending_item(events)
    if item is None:
        earlier = latest_decision(events)
        if earlier is not None:
            raise DecisionRefused(f"{item_id} was already decided: {earlier.describe()}")
        raise DecisionRefused(f"{item_id} is not pending: nothing for a person to decide")
    is_step = item.kind in (Kind.STEP_IN_DOUBT, Kind.STEP_CONFLICT)
    if item.kind is Kind.STEP_CONFLICT and decision is not Decision.RAN:
        raise DecisionRefused(f"{item_id} recorded its end after did_not_run: decide --ran")
    if is_step and decision not in STEP_DECISIONS:
        raise DecisionRefused(f"{item_id} is a step: decide --ran or --did-not-run")
    if not is_step and decision not in WRITE_DECISIONS:
        raise DecisionRefused(f"{item_id} is a write: decide --landed or --not-landed")
    if decision is Decision.RAN and not result_json:
        raise DecisionRefused("--ran needs --result-json: the result later attempts get back")
    if decision is not Decision.RAN and result_json:
        raise DecisionRefused("--result-json goes with --ran only")
    return item
