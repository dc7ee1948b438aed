"""BeginStep honours an operator's decision on a step in doubt, read from the step's history."""

from __future__ import annotations

import asyncio

import pytest

from sidecar.core.actions import RunActions
from sidecar.core.types import Outcome
from sidecar.errors import InDoubt
from sidecar.ledger.pending import Decision, decision_event
from sidecar.rules.canonical import JsonValue
from sidecar.rules.effects import ToolEffect
from tests.core.fakes import MemoryLedger, MemoryStore, run_actions

RUN = {"run_id": "run-1", "rule": "billing", "checkpoint": "cp-1"}


async def _begin_step(actions: RunActions) -> str:
    attempt = (await actions.begin_attempt(**RUN, lease_deadline=None)).attempt_id
    began = await actions.begin_step(
        attempt_id=attempt,
        tool="charge_card",
        effect=int(ToolEffect.NON_IDEMPOTENT_WRITE),
        args=JsonValue.parse('{"amount": 1}', "args_json"),
        request_id="",
    )
    assert began.outcome is Outcome.APPLIED
    return began.id


async def _decide(ledger: MemoryLedger, step_id: str, decision: Decision, result: str = "") -> None:
    history = await ledger.events_for(step_id)
    await ledger.append(
        decision_event(history, step_id, decision, by="dana", reason="r", result_json=result)
    )


def test_ran_answers_already_applied_with_the_decided_result_and_did_not_run_runs_it() -> None:
    async def run() -> None:
        ledger, store = MemoryLedger(), MemoryStore()
        actions = run_actions(ledger, store)
        step_id = await _begin_step(actions)  # the attempt dies: no EndStep
        with pytest.raises(InDoubt):
            await _begin_step(actions)
        await _decide(ledger, step_id, Decision.RAN, '{"charge":"ch_1"}')
        attempt = (await actions.begin_attempt(**RUN, lease_deadline=None)).attempt_id
        again = await actions.begin_step(
            attempt_id=attempt,
            tool="charge_card",
            effect=int(ToolEffect.NON_IDEMPOTENT_WRITE),
            args=JsonValue.parse('{"amount": 1}', "args_json"),
            request_id="",
        )
        assert (again.id, again.outcome, again.result_json) == (
            step_id, Outcome.ALREADY_APPLIED, '{"charge":"ch_1"}',
        )  # fmt: skip
        # The attempt holds the step as ended: its EndStep changes nothing.
        end = await actions.end_step(
            attempt_id=attempt,
            step_id=step_id,
            result=JsonValue.parse("{}", "result_json"),
            request_id="",
        )
        assert end.outcome is Outcome.ALREADY_APPLIED

    asyncio.run(run())


def test_did_not_run_lets_the_next_attempt_run_it_once_and_in_doubt_again_if_cut_off() -> None:
    async def run() -> None:
        ledger, store = MemoryLedger(), MemoryStore()
        actions = run_actions(ledger, store)
        step_id = await _begin_step(actions)
        await _decide(ledger, step_id, Decision.DID_NOT_RUN)
        assert await _begin_step(actions) == step_id  # APPLIED: run it now
        with pytest.raises(InDoubt):  # ... and that run was cut off too
            await _begin_step(actions)

    asyncio.run(run())
