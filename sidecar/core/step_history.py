"""What the ledger's history says about a step when it begins again: the strictest effect
it was declared with, the result it ended with (or an operator decided it ran with), and
whether an earlier try of a non-idempotent write may have acted (in doubt)."""

from __future__ import annotations

from collections.abc import Sequence

from sidecar.core.attempts import StepState
from sidecar.errors import InDoubt
from sidecar.ledger import pending
from sidecar.ledger.base import FENCED_END, Phase, StoredEvent
from sidecar.rules import effects


def effect_with_earlier(
    declared: effects.ToolEffect, earlier: Sequence[StoredEvent]
) -> effects.ToolEffect:
    """The strictest of the step's declared effect and those its earlier begins recorded."""
    began = [e for e in earlier if e.event.phase == Phase.STEP_BEGIN]
    return max([declared, *(pending.recorded_effect(e.event) for e in began)])


def ended_result(earlier: Sequence[StoredEvent], history: Sequence[StoredEvent]) -> str | None:
    """The result an earlier attempt ended the step with, or an operator decided it
    ran with (``actonce audit resolve``); None if neither."""
    # A fenced attempt's end is recorded as it came, but its stale result is never replayed.
    ended = [
        e for e in earlier if e.event.phase == Phase.STEP_END and not e.event.detail.get(FENCED_END)
    ]
    if ended:
        return str(ended[0].event.detail.get("result_json", ""))
    decided = pending.latest_decision(history)
    if decided is not None and decided.decision is pending.Decision.RAN:
        return decided.result_json
    return None


def refuse_if_in_doubt(
    earlier: Sequence[StoredEvent], history: Sequence[StoredEvent], state: StepState, step_id: str
) -> None:
    """IN_DOUBT if a try of a non-idempotent write began earlier and may have acted."""
    # An operator's decision settles the begins before it; a try that was aborted,
    # or refused before it ran, never acted.
    decided = pending.latest_decision(history)
    began = [
        e
        for e in pending.tries_that_may_have_acted(earlier)
        if decided is None or e.seq > decided.seq
    ]
    if not began:
        return
    recorded = max(pending.recorded_effect(e.event) for e in began)
    if max(recorded, state.effect) is effects.ToolEffect.NON_IDEMPOTENT_WRITE:
        failed = pending.failure_of(earlier)
        said = f"; its call failed: {failed}" if failed else ""
        raise InDoubt(
            f"step {step_id} ({state.tool}) is a non-idempotent write that began in an "
            f"earlier attempt and never ended{said}; it is not run again automatically",
            step_id=step_id,
            tool=state.tool,
        )
