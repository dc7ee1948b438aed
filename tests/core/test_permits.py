"""A step's send permit and its request identity, in the core over the in-memory fakes.

A non-idempotent or keyed step's call is sent only under a permit the ledger granted against
fencing, the lease and operators' decisions; a call refused its permit was never sent, so its
step is aborted, not in doubt. A BeginStep repeated with its request identity is the whole
call repeated: it never sends again.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from sidecar.core import attempts
from sidecar.core.actions import RunActions
from sidecar.core.types import Outcome, WriteResult
from sidecar.errors import AttemptFenced, InDoubt, LeaseExpired, StepDecided
from sidecar.ledger.base import Phase
from sidecar.ledger.pending import Decision, decision_event
from sidecar.rules.canonical import JsonValue
from sidecar.rules.effects import ToolEffect
from tests.core.fakes import MemoryLedger, MemoryStore, run_actions

RUN = {"run_id": "run-1", "rule": "billing", "checkpoint": "cp-1"}
CHARGE = JsonValue.parse('{"amount": 1}', "args_json")
RESULT = JsonValue.parse('{"charge": "ch_1"}', "result_json")


async def _attempt(actions: RunActions, lease: datetime | None = None) -> str:
    return (await actions.begin_attempt(**RUN, lease_deadline=lease)).attempt_id


async def _begin(
    actions: RunActions,
    attempt_id: str,
    effect: ToolEffect = ToolEffect.NON_IDEMPOTENT_WRITE,
    request_id: str = "",
    wait_seconds: float | None = None,
) -> WriteResult:
    return await actions.begin_step(
        attempt_id=attempt_id,
        tool="charge_card",
        effect=int(effect),
        args=CHARGE,
        request_id=request_id,
        wait_seconds=wait_seconds,
    )


def _phases(ledger: MemoryLedger, step_id: str) -> list[str]:
    return [e.event.phase for e in ledger.events if e.event.derived_id == step_id]


def test_a_non_idempotent_steps_permit_is_recorded_with_its_one_deadline() -> None:
    async def run() -> None:
        ledger = MemoryLedger()
        actions = run_actions(ledger, MemoryStore(), sidecar_id="sc-1")
        lease = datetime.now(UTC) + timedelta(seconds=20)
        attempt = await _attempt(actions, lease)
        step = await _begin(actions, attempt)
        permit = await actions.permit_step(
            attempt_id=attempt, step_id=step.id, timeout_seconds=30.0, keyed=False
        )
        # The lease left (about 20 s) is smaller than the timeout: it is the call's budget.
        assert 18.0 < permit.seconds <= 20.0
        assert 0.0 < permit.left() <= permit.seconds and not permit.expired()
        recorded = ledger.phases(Phase.STEP_PERMIT)
        assert len(recorded) == 1
        assert recorded[0].detail["sidecar"] == "sc-1"
        assert recorded[0].detail["seconds"] == pytest.approx(permit.seconds, abs=0.01)
        assert datetime.fromisoformat(str(recorded[0].detail["deadline"])) <= lease

    asyncio.run(run())


def test_an_unkeyed_idempotent_step_needs_no_ledger_permit_but_keeps_the_one_budget() -> None:
    async def run() -> None:
        ledger = MemoryLedger()
        actions = run_actions(ledger, MemoryStore())
        attempt = await _attempt(actions)
        step = await _begin(actions, attempt, ToolEffect.IDEMPOTENT_WRITE)
        permit = await actions.permit_step(
            attempt_id=attempt, step_id=step.id, timeout_seconds=7.0, keyed=False
        )
        assert permit.seconds == 7.0
        assert ledger.phases(Phase.STEP_PERMIT) == []
        keyed = await actions.permit_step(
            attempt_id=attempt, step_id=step.id, timeout_seconds=7.0, keyed=True
        )
        assert keyed.seconds == pytest.approx(7.0)
        assert len(ledger.phases(Phase.STEP_PERMIT)) == 1

    asyncio.run(run())


def test_a_fenced_attempt_gets_no_permit_and_its_step_is_aborted_not_in_doubt() -> None:
    async def run() -> None:
        ledger = MemoryLedger()
        actions = run_actions(ledger, MemoryStore())
        stale = await _attempt(actions)
        step = await _begin(actions, stale)
        newer = await _attempt(actions)  # the queue delivered the run again
        with pytest.raises(AttemptFenced) as refused:
            await actions.permit_step(
                attempt_id=stale, step_id=step.id, timeout_seconds=30.0, keyed=False
            )
        assert refused.value.nothing_sent
        assert _phases(ledger, step.id) == [
            Phase.STEP_BEGIN,
            Phase.OUTCOME,
            Phase.STEP_ABORT,
        ]
        # Never sent: the newer attempt runs it, rather than finding it in doubt.
        again = await _begin(actions, newer)
        assert (again.id, again.outcome) == (step.id, Outcome.APPLIED)

    asyncio.run(run())


def test_a_step_decided_after_its_begin_gets_no_permit() -> None:
    async def run() -> None:
        ledger = MemoryLedger()
        actions = run_actions(ledger, MemoryStore())
        attempt = await _attempt(actions)
        step = await _begin(actions, attempt)
        history = await ledger.events_for(step.id)
        decided = decision_event(
            history, step.id, Decision.DID_NOT_RUN, by="dana", reason="nothing at the processor"
        )
        await ledger.append(decided)
        with pytest.raises(StepDecided) as refused:
            await actions.permit_step(
                attempt_id=attempt, step_id=step.id, timeout_seconds=30.0, keyed=False
            )
        assert refused.value.failure_class.value == "RETRYABLE"
        assert ledger.phases(Phase.STEP_PERMIT) == []
        assert _phases(ledger, step.id)[-1] == Phase.STEP_ABORT
        # A decision made before a later attempt began the step does not refuse its permit.
        later = await _attempt(actions)
        began = await _begin(actions, later)
        permit = await actions.permit_step(
            attempt_id=later, step_id=began.id, timeout_seconds=30.0, keyed=False
        )
        assert permit.seconds == pytest.approx(30.0)

    asyncio.run(run())


def test_a_lease_that_passed_gets_no_permit(monkeypatch: pytest.MonkeyPatch) -> None:
    async def run() -> None:
        ledger = MemoryLedger()
        actions = run_actions(ledger, MemoryStore(), store_timeout_seconds=0.1)
        lease = datetime.now(UTC) + timedelta(seconds=5)
        attempt = await _attempt(actions, lease)
        step = await _begin(actions, attempt)
        # The call waited past the lease before it could be sent (a freeze, a slow handshake).
        monkeypatch.setattr(attempts, "now", lambda: lease + timedelta(seconds=1))
        with pytest.raises(LeaseExpired) as refused:
            await actions.permit_step(
                attempt_id=attempt, step_id=step.id, timeout_seconds=30.0, keyed=False
            )
        assert refused.value.nothing_sent
        assert _phases(ledger, step.id)[-1] == Phase.STEP_ABORT

    asyncio.run(run())


def test_the_ledgers_clock_refuses_a_lease_the_sidecars_clock_thinks_still_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def run() -> None:
        ledger = MemoryLedger()
        actions = run_actions(ledger, MemoryStore(), store_timeout_seconds=0.1)
        # This sidecar's clock is 15 minutes slow: by it, the lease has 5 minutes left; by
        # the ledger's, it passed 10 minutes ago.
        slow = timedelta(minutes=15)
        monkeypatch.setattr(attempts, "now", lambda: datetime.now(UTC) - slow)
        lease = datetime.now(UTC) - timedelta(minutes=10)
        attempt = await _attempt(actions, lease)
        step = await _begin(actions, attempt)
        with pytest.raises(LeaseExpired) as refused:
            await actions.permit_step(
                attempt_id=attempt, step_id=step.id, timeout_seconds=30.0, keyed=False
            )
        assert "ledger's clock" in refused.value.message

    asyncio.run(run())


def test_a_begin_repeated_with_its_identity_waits_for_the_call_and_gets_its_result() -> None:
    async def run() -> None:
        ledger = MemoryLedger()
        actions = run_actions(ledger, MemoryStore())
        attempt = await _attempt(actions)
        first = await _begin(actions, attempt, request_id="r-1")
        assert first.outcome is Outcome.APPLIED
        # The caller gave up on the call and repeats it while the first is still under way.
        repeat = asyncio.ensure_future(_begin(actions, attempt, request_id="r-1", wait_seconds=5))
        await asyncio.sleep(0.05)
        assert not repeat.done()
        await actions.end_step(attempt_id=attempt, step_id=first.id, result=RESULT, request_id="")
        again = await repeat
        assert (again.id, again.outcome, again.result_json) == (
            first.id,
            Outcome.ALREADY_APPLIED,
            RESULT.text,
        )
        assert len(ledger.phases(Phase.STEP_BEGIN)) == 1

    asyncio.run(run())


def test_a_begin_repeated_with_its_identity_of_a_call_without_an_answer_is_in_doubt() -> None:
    async def run() -> None:
        ledger = MemoryLedger()
        actions = run_actions(ledger, MemoryStore())
        attempt = await _attempt(actions)
        first = await _begin(actions, attempt, request_id="r-1")
        await actions.fail_step(
            attempt_id=attempt, step_id=first.id, error="reset after sending", request_id=""
        )
        with pytest.raises(InDoubt):
            await _begin(actions, attempt, request_id="r-1")
        # Still running past the repeat's wait: in doubt too, never a second send.
        fresh = run_actions(MemoryLedger(), MemoryStore())
        other = await _attempt(fresh)
        running = await _begin(fresh, other, ToolEffect.NON_IDEMPOTENT_WRITE, "r-2")
        assert running.outcome is Outcome.APPLIED
        with pytest.raises(InDoubt):
            await _begin(fresh, other, request_id="r-2", wait_seconds=0.05)

    asyncio.run(run())


def test_a_begin_repeated_with_its_identity_of_a_keyed_call_without_an_answer_resends_it() -> None:
    async def run() -> None:
        actions = run_actions(MemoryLedger(), MemoryStore())
        attempt = await _attempt(actions)
        first = await _begin(actions, attempt, ToolEffect.IDEMPOTENT_WRITE, "r-1")
        await actions.fail_step(attempt_id=attempt, step_id=first.id, error="reset", request_id="")
        again = await _begin(actions, attempt, ToolEffect.IDEMPOTENT_WRITE, "r-1")
        # The same step id: the same idempotency key goes with the call again.
        assert (again.id, again.outcome) == (first.id, Outcome.APPLIED)

    asyncio.run(run())


def test_a_begin_repeated_with_its_identity_after_an_abort_begins_it_again() -> None:
    async def run() -> None:
        ledger = MemoryLedger()
        actions = run_actions(ledger, MemoryStore())
        attempt = await _attempt(actions)
        first = await _begin(actions, attempt, request_id="r-1")
        await actions.abort_step(
            attempt_id=attempt, step_id=first.id, reason="not sent", request_id=""
        )
        again = await _begin(actions, attempt, request_id="r-1")
        assert (again.id, again.outcome) == (first.id, Outcome.APPLIED)
        assert len(ledger.phases(Phase.STEP_BEGIN)) == 2

    asyncio.run(run())
