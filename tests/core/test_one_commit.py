"""A write that is one store call, made one commit with its audit where the store can."""

from __future__ import annotations

import asyncio

import pytest

from sidecar.core.types import Outcome
from sidecar.errors import AuditPersistenceFailed, StoreRefused
from sidecar.ledger.base import Phase
from sidecar.rules.canonical import Document, JsonValue
from tests.core.fakes import MemoryLedger, OneCommitStore, Trace, run_actions

RUN = {"run_id": "run-1", "rule": "triage", "checkpoint": "cp-1"}


def _fakes() -> tuple[Trace, MemoryLedger, OneCommitStore]:
    trace = Trace()
    ledger = MemoryLedger(trace)
    store = OneCommitStore(ledger, trace)
    store.seed_artifact("art-1", "ticket", {"title": "a"})
    return trace, ledger, store


def test_a_create_is_one_job_with_its_intent_and_outcome() -> None:
    trace, ledger, store = _fakes()
    actions = run_actions(ledger, store)

    async def run() -> Outcome:
        attempt = await actions.begin_attempt(**RUN, lease_deadline=None)
        trace.calls.clear()
        made = await actions.create(
            attempt_id=attempt.attempt_id,
            kind="ticket",
            data=Document.parse('{"n":1}', "data_json"),
            propose=False,
            request_id="r1",
        )
        return made.outcome

    assert asyncio.run(run()) is Outcome.APPLIED
    assert trace.calls[0] == "store.commit_write"
    assert [e.phase for e in ledger.phases(Phase.INTENT) + ledger.phases(Phase.OUTCOME)] == [
        Phase.INTENT, Phase.OUTCOME]  # fmt: skip
    assert len(store.artifacts) == 2


def test_an_outcome_that_cannot_be_kept_takes_the_intent_and_the_row_with_it() -> None:
    _, ledger, store = _fakes()
    actions = run_actions(ledger, store)

    async def run() -> None:
        attempt = await actions.begin_attempt(**RUN, lease_deadline=None)
        ledger.failing.add(Phase.OUTCOME)
        with pytest.raises(AuditPersistenceFailed):
            await actions.notice(attempt_id=attempt.attempt_id, thread_id="no-thread",
                                 text="x", request_id="r1")  # fmt: skip
        with pytest.raises(AuditPersistenceFailed):
            await actions.create(
                attempt_id=attempt.attempt_id,
                kind="ticket",
                data=Document.parse('{"n":1}', "data_json"),
                propose=False,
                request_id="r2",
            )

    asyncio.run(run())
    assert ledger.phases(Phase.INTENT) == []
    assert list(store.artifacts) == ["art-1"]


def test_a_refusal_of_the_store_is_the_write_s_recorded_outcome() -> None:
    _, ledger, store = _fakes()
    actions = run_actions(ledger, store)

    async def run() -> None:
        attempt = await actions.begin_attempt(**RUN, lease_deadline=None)
        with pytest.raises(StoreRefused):
            await actions.notice(attempt_id=attempt.attempt_id, thread_id="no-thread",
                                 text="x", request_id="r1")  # fmt: skip

    asyncio.run(run())
    (outcome,) = ledger.phases(Phase.OUTCOME)
    assert outcome.reason == "NOT_FOUND"
    assert len(ledger.phases(Phase.INTENT)) == 1


def test_an_edit_still_makes_its_three_phases_one_after_another() -> None:
    trace, ledger, store = _fakes()
    actions = run_actions(ledger, store)

    async def run() -> Outcome:
        attempt = await actions.begin_attempt(**RUN, lease_deadline=None)
        trace.calls.clear()
        edited = await actions.edit(
            attempt_id=attempt.attempt_id,
            artifact_id="art-1",
            path="/title",
            value=JsonValue.parse('"b"', "value_json"),
            propose=False,
            request_id="r1",
        )
        return edited.outcome

    assert asyncio.run(run()) is Outcome.APPLIED
    assert "store.commit_write" not in trace.calls
    assert trace.calls[0] == f"ledger.append {Phase.INTENT}"
