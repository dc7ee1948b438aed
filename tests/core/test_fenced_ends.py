"""A step's end after a newer attempt of its run began: recorded for a non-idempotent step,
whose tool acted once and whose result a later attempt must get; refused for a step that can
simply run again, whose stale result must not become the one later attempts replay."""

from __future__ import annotations

import asyncio

import pytest

from sidecar.core.actions import RunActions
from sidecar.core.types import Outcome, WriteResult
from sidecar.errors import AttemptFenced
from sidecar.rules.canonical import JsonValue
from sidecar.rules.effects import ToolEffect
from tests.core.fakes import MemoryLedger, MemoryStore, run_actions

RUN = {"run_id": "run-1", "rule": "billing", "checkpoint": "cp-1"}


async def _begin(actions: RunActions, effect: ToolEffect) -> tuple[str, str]:
    attempt = (await actions.begin_attempt(**RUN, lease_deadline=None)).attempt_id
    began = await actions.begin_step(
        attempt_id=attempt,
        tool="charge_card",
        effect=int(effect),
        args=JsonValue.parse('{"amount": 1}', "args_json"),
        request_id="",
    )
    return attempt, began.id


def test_a_fenced_attempt_records_a_non_idempotent_steps_end_for_later_attempts() -> None:
    async def run() -> None:
        actions = run_actions(MemoryLedger(), MemoryStore())
        stale, step_id = await _begin(actions, ToolEffect.NON_IDEMPOTENT_WRITE)
        await actions.begin_attempt(**RUN, lease_deadline=None)  # a newer attempt fences it
        ended = await actions.end_step(
            attempt_id=stale,
            step_id=step_id,
            result=JsonValue.parse('{"charge": "ch_1"}', "result_json"),
            request_id="",
        )
        assert ended.outcome is Outcome.APPLIED
        _later, again = await _begin_later(actions, ToolEffect.NON_IDEMPOTENT_WRITE)
        assert (again.outcome, again.result_json) == (Outcome.ALREADY_APPLIED, '{"charge":"ch_1"}')

    asyncio.run(run())


def test_a_fenced_attempt_may_not_record_an_idempotent_steps_end() -> None:
    async def run() -> None:
        actions = run_actions(MemoryLedger(), MemoryStore())
        stale, step_id = await _begin(actions, ToolEffect.IDEMPOTENT_WRITE)
        await actions.begin_attempt(**RUN, lease_deadline=None)
        with pytest.raises(AttemptFenced):
            await actions.end_step(
                attempt_id=stale,
                step_id=step_id,
                result=JsonValue.parse('{"stale": true}', "result_json"),
                request_id="",
            )
        _later, again = await _begin_later(actions, ToolEffect.IDEMPOTENT_WRITE)
        assert again.outcome is Outcome.APPLIED  # runs again: no stale result to replay

    asyncio.run(run())


async def _begin_later(actions: RunActions, effect: ToolEffect) -> tuple[str, WriteResult]:
    attempt = (await actions.begin_attempt(**RUN, lease_deadline=None)).attempt_id
    answer = await actions.begin_step(
        attempt_id=attempt,
        tool="charge_card",
        effect=int(effect),
        args=JsonValue.parse('{"amount": 1}', "args_json"),
        request_id="",
    )
    return attempt, answer
