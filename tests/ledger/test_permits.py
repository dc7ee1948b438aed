"""Send permits on both ledger backends: granted in the append's transaction against
operators' decisions and the lease by the ledger's clock; decisions refused while a permitted
call may be under way; what happened recorded as it happened (a fenced end, an end after a
decision), and shown to the operator."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from sidecar.ledger import permits
from sidecar.ledger.base import FENCED_END, AuditEvent, FencedError, Phase
from sidecar.ledger.pending import Decision, DecisionRefused, Kind
from tests.helpers import postgres as pg
from tests.ledger.test_operator_queries import Ledgers, begin, event, step_begin

STEP = "stp_charge"


@pytest.fixture(params=["sqlite", "postgres"])
def ledgers(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Ledgers]:
    if request.param == "postgres":
        dsn = pg.fresh_database("permits")
        made = Ledgers(None, dsn)
        made.append()
        yield made
        pg.drop_database(dsn)
    else:
        made = Ledgers(tmp_path / "audit.db", None)
        made.append()
        yield made


def permit(
    attempt: str, *, seconds: float = 30.0, lease: datetime | None = None, sidecar: str = "sc-1"
) -> AuditEvent:
    detail = {
        "tool": "charge_card",
        "effect": "NON_IDEMPOTENT_WRITE",
        permits.ASKED_SECONDS: seconds,
        permits.LEASE_DEADLINE: lease.isoformat() if lease else "",
        permits.SIDECAR: sidecar,
    }
    return event("run-1", attempt, Phase.STEP_PERMIT, STEP, rpc="PermitStep", detail=detail)


def append_one(ledgers: Ledgers, one: AuditEvent) -> int | Exception:
    async def go() -> int | Exception:
        ledger = ledgers.writer()
        try:
            return await ledger.append(one)
        except Exception as exc:  # the refusal is the answer under test
            return exc
        finally:
            await ledger.close()

    return asyncio.run(go())


def recorded(ledgers: Ledgers, phase: str) -> list[AuditEvent]:
    operator = ledgers.operator()
    try:
        return [e.event for e in operator.events_for(STEP) if e.event.phase == phase]
    finally:
        operator.close()


def decide(ledgers: Ledgers, decision: Decision = Decision.DID_NOT_RUN, result: str = "") -> None:
    operator = ledgers.operator()
    try:
        operator.resolve(STEP, decision, by="dana", reason="looked", result_json=result)
    finally:
        operator.close()


def test_a_permit_is_granted_with_its_deadline_by_the_ledgers_clock(ledgers: Ledgers) -> None:
    lease = datetime.now(UTC) + timedelta(seconds=12)
    ledgers.append(begin("run-1", "a1"), *step_begin("run-1", "a1", STEP))
    seq = append_one(ledgers, permit("a1", seconds=30.0, lease=lease))
    assert isinstance(seq, int)
    (granted,) = recorded(ledgers, Phase.STEP_PERMIT)
    # The lease left, not the timeout, is the call's budget; its deadline is the lease's.
    assert 10.0 < float(granted.detail[permits.SECONDS]) <= 12.0
    deadline = permits.parse_time(str(granted.detail[permits.DEADLINE]))
    assert deadline is not None and abs((deadline - lease).total_seconds()) < 0.5
    assert ledgers.verify().intact


def test_a_permit_is_refused_once_the_lease_passed_by_the_ledgers_clock(ledgers: Ledgers) -> None:
    ledgers.append(begin("run-1", "a1"), *step_begin("run-1", "a1", STEP))
    passed = datetime.now(UTC) - timedelta(seconds=1)
    refused = append_one(ledgers, permit("a1", lease=passed))
    assert isinstance(refused, permits.PermitRefused) and refused.why == "lease"
    assert recorded(ledgers, Phase.STEP_PERMIT) == []


def test_a_decision_and_a_permit_exclude_each_other(ledgers: Ledgers) -> None:
    ledgers.append(begin("run-1", "a1"), *step_begin("run-1", "a1", STEP))
    # Begun, never permitted, its attempt ended: nothing was sent, and a person may decide.
    ledgers.append(event("run-1", "a1", Phase.ATTEMPT_END, ""))
    decide(ledgers)
    refused = append_one(ledgers, permit("a1"))
    assert isinstance(refused, permits.PermitRefused) and refused.why == "decided"
    # A later attempt, begun after the decision, gets its permit.
    ledgers.append(begin("run-1", "a2"), *step_begin("run-1", "a2", STEP))
    assert isinstance(append_one(ledgers, permit("a2")), int)


def test_a_permitted_call_is_not_decidable_while_it_may_be_under_way(ledgers: Ledgers) -> None:
    ledgers.append(begin("run-1", "a1"), *step_begin("run-1", "a1", STEP))
    assert isinstance(append_one(ledgers, permit("a1", seconds=30.0, sidecar="gone")), int)
    # The attempt is fenced and ended: neither ends a call already sent.
    ledgers.append(begin("run-1", "a2"), event("run-1", "a1", Phase.ATTEMPT_END, ""))
    operator = ledgers.operator()
    try:
        assert operator.pending() == []
        (flying,) = operator.in_flight()
        assert "deadline" in flying.note and "ledger's clock" in flying.note
        with pytest.raises(DecisionRefused, match="may still be under way"):
            operator.resolve(STEP, Decision.DID_NOT_RUN, by="dana", reason="nothing seen")
    finally:
        operator.close()


def test_a_permitted_call_past_its_deadline_with_its_sidecar_silent_is_decidable(
    ledgers: Ledgers,
) -> None:
    ledgers.append(begin("run-1", "a1"), *step_begin("run-1", "a1", STEP))
    # A deadline already behind the ledger's clock: granted with a lease a moment ahead.
    soon = datetime.now(UTC) + timedelta(milliseconds=300)
    assert isinstance(append_one(ledgers, permit("a1", lease=soon, sidecar="silent")), int)
    ledgers.append(event("run-1", "a1", Phase.ATTEMPT_END, ""))
    import time

    time.sleep(0.5)
    operator = ledgers.operator()
    try:
        assert [item.id for item in operator.pending()] == [STEP]
        operator.resolve(STEP, Decision.DID_NOT_RUN, by="dana", reason="nothing at the processor")
    finally:
        operator.close()


def test_a_call_whose_end_is_recorded_is_decidable_at_once(ledgers: Ledgers) -> None:
    ledgers.append(begin("run-1", "a1"), *step_begin("run-1", "a1", STEP))
    assert isinstance(append_one(ledgers, permit("a1", seconds=600.0)), int)
    failed = event("run-1", "a1", Phase.STEP_FAILED, STEP, detail={"error": "reset"})
    ledgers.append(failed, event("run-1", "a1", Phase.ATTEMPT_END, ""))
    operator = ledgers.operator()
    try:
        assert [item.id for item in operator.pending()] == [STEP]
    finally:
        operator.close()


def test_an_end_after_did_not_run_is_shown_as_a_conflict(ledgers: Ledgers) -> None:
    ledgers.append(begin("run-1", "a1"), *step_begin("run-1", "a1", STEP))
    ledgers.append(event("run-1", "a1", Phase.ATTEMPT_END, ""))
    decide(ledgers)
    # The call, begun before the decision, says afterwards that it ran.
    ended = event(
        "run-1",
        "a1",
        Phase.STEP_END,
        STEP,
        detail={"tool": "charge_card", "effect": "NON_IDEMPOTENT_WRITE", "result_json": "{}"},
    )
    ledgers.append(ended)
    operator = ledgers.operator()
    try:
        (item,) = operator.pending()
        assert item.kind is Kind.STEP_CONFLICT
        assert "audit resolve" in item.why and "--ran" in item.why
        with pytest.raises(DecisionRefused, match="decide --ran"):
            operator.resolve(STEP, Decision.DID_NOT_RUN, by="dana", reason="again")
        operator.resolve(
            STEP, Decision.RAN, by="dana", reason="it ran", result_json='{"charge":"ch_1"}'
        )
        assert operator.pending() == []
    finally:
        operator.close()


def test_a_fenced_attempts_step_end_is_recorded_marked_and_still_refused(
    ledgers: Ledgers,
) -> None:
    ledgers.append(begin("run-1", "a1"), *step_begin("run-1", "a1", STEP, "IDEMPOTENT_WRITE"))
    ledgers.append(begin("run-1", "a2"))
    ended = event(
        "run-1",
        "a1",
        Phase.STEP_END,
        STEP,
        detail={"tool": "charge_card", "effect": "IDEMPOTENT_WRITE", "result_json": "{}"},
    )
    answer = append_one(ledgers, ended)
    assert isinstance(answer, FencedError)
    (written,) = recorded(ledgers, Phase.STEP_END)
    assert written.detail[FENCED_END] is True and written.attempt_id == "a1"
    assert ledgers.verify().intact
