"""No operator's decision while a permitted call may still be under way, by the ledger alone.

From the ledger's own records and clock: no decision before a permit's deadline unless that
call's end was recorded first, no permit after a decision for an attempt that began the step
before it, and no step end, after a ``did_not_run``, from an attempt that began the step
before it.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime

from chaos.findings import Findings
from chaos.operator import DID_NOT_RUN
from sidecar.ledger.base import Phase, StoredEvent


def _when(text: object) -> datetime | None:
    """A time as the ledger writes it (naive means UTC); None when unreadable."""
    try:
        stamp = datetime.fromisoformat(str(text))
    except ValueError:
        return None
    return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=UTC)


# The ledger's leave to send a step's call (sidecar.ledger.permits), by its phase's name.
_STEP_PERMIT = "step_permit"
# What ends a permitted call, recorded by the attempt that holds the permit.
_CALL_ENDS = frozenset({Phase.STEP_END, Phase.STEP_FAILED, Phase.STEP_ABORT})


def _check_decisions(found: Findings, events: list[StoredEvent]) -> None:
    """No operator's decision while a permitted call may be under way, by the ledger's own
    records and clock (design: "A send permit")."""
    by_step: defaultdict[str, list[StoredEvent]] = defaultdict(list)
    for stored in events:
        by_step[stored.event.derived_id].append(stored)
    for step_id, history in by_step.items():
        for decision in (s for s in history if s.event.phase == Phase.DECISION):
            decided_at = _when(decision.ts)
            if decision.event.detail.get("decision") == DID_NOT_RUN:
                # Permits or none: an attempt that began the step before the decision and
                # recorded its end after it was under way when decided.
                began_before = {
                    s.event.attempt_id
                    for s in history
                    if s.event.phase == Phase.STEP_BEGIN and s.seq < decision.seq
                }
                for end in history:
                    if (
                        end.event.phase == Phase.STEP_END
                        and end.seq > decision.seq
                        and end.event.attempt_id in began_before
                    ):
                        found.violation(
                            f"ledger #{end.seq}: attempt {end.event.attempt_id} ended {step_id} "
                            f"after it was decided did_not_run at #{decision.seq}: its call was "
                            "under way when decided"
                        )
            for permit in (s for s in history if s.event.phase == _STEP_PERMIT):
                if permit.seq > decision.seq:
                    began = [s for s in history if s.event.phase == Phase.STEP_BEGIN
                             and s.event.attempt_id == permit.event.attempt_id]  # fmt: skip
                    if began and began[0].seq < decision.seq:
                        found.violation(
                            f"ledger #{permit.seq}: a permit for {step_id} to attempt "
                            f"{permit.event.attempt_id}, which began it before the decision "
                            f"#{decision.seq}"
                        )
                    continue
                ends = [
                    s
                    for s in history
                    if s.event.phase in _CALL_ENDS
                    and s.event.attempt_id == permit.event.attempt_id
                    and s.seq > permit.seq
                ]
                if any(end.seq < decision.seq for end in ends):
                    continue  # the call ended before anyone decided
                deadline = _when(permit.event.detail.get("deadline", ""))
                if decided_at is not None and deadline is not None and decided_at < deadline:
                    found.violation(
                        f"ledger #{decision.seq}: {step_id} decided at {decision.ts}, while the "
                        f"call permitted at #{permit.seq} could be under way until {deadline}"
                    )
