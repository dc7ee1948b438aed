"""The write path's phases with in-memory fakes: unknown outcomes, leases, step ends."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from sidecar.core import attempts
from sidecar.core.actions import RunActions
from sidecar.core.types import Outcome, WriteResult
from sidecar.errors import (
    AuditPersistenceFailed,
    LeaseExpired,
    StoreDeadlineExceeded,
    StoreUnavailable,
)
from sidecar.ledger.base import Phase
from sidecar.rules.canonical import Document, JsonValue
from sidecar.rules.effects import ToolEffect
from tests.core.fakes import MemoryLedger, MemoryStore, Trace, run_actions

RUN = {"run_id": "run-1", "rule": "triage", "checkpoint": "cp-1"}
T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Clock:
    """The time the write path reads, moved by the test."""

    def __init__(self) -> None:
        self.now = T0

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(attempts, "now", lambda: clock.now)
    return clock


def _fakes() -> tuple[Trace, MemoryLedger, MemoryStore, RunActions]:
    trace = Trace()
    ledger = MemoryLedger(trace)
    store = MemoryStore(trace)
    store.seed_artifact("art-1", "ticket", {"title": "a"})
    return trace, ledger, store, run_actions(ledger, store, store_timeout_seconds=5.0)


async def _create(actions: RunActions, attempt_id: str, request_id: str) -> WriteResult:
    return await actions.create(
        attempt_id=attempt_id,
        kind="ticket",
        data=Document.parse('{"n": 1}', "data_json"),
        propose=False,
        request_id=request_id,
    )


def _lose_answer_of(trace: Trace, call: str) -> None:
    """The next ``call`` takes effect, and its answer never comes back."""

    def answering(name: str) -> None:
        if name == call:
            trace.answering = lambda name: None
            raise StoreDeadlineExceeded(f"{call} did not answer in time")

    trace.answering = answering


# -- a write whose outcome is unknown keeps its id, bound to its request_id --------------


def test_a_repeat_of_a_write_whose_store_call_timed_out_gets_its_id_not_a_new_one() -> None:
    async def run() -> None:
        trace, _ledger, store, actions = _fakes()
        attempt = (await actions.begin_attempt(**RUN, lease_deadline=None)).attempt_id
        _lose_answer_of(trace, "store.create_artifact")
        with pytest.raises(StoreDeadlineExceeded):
            await _create(actions, attempt, "q1")
        # Another, identical write of this attempt (another request) is another write...
        other = await _create(actions, attempt, "q2")
        assert other.outcome is Outcome.APPLIED
        # ...and the repeat of the first is the first: the store refuses its used id.
        repeat = await _create(actions, attempt, "q1")
        assert repeat.outcome is Outcome.ALREADY_APPLIED
        assert {repeat.id, other.id} == set(store.artifacts) - {"art-1"}

    asyncio.run(run())


def test_a_create_found_made_never_answers_a_version_it_could_not_read() -> None:
    # A redelivery's create finds its id used and reads the version the store holds. Twin
    # calls of one request identity each read it: a store that stops answering one of those
    # reads must not make that call answer version 0 while its twin answers 1.
    async def run() -> None:
        trace, _ledger, _store, actions = _fakes()
        first = (await actions.begin_attempt(**RUN, lease_deadline=None)).attempt_id
        made = await _create(actions, first, "q1")
        second = (await actions.begin_attempt(**RUN, lease_deadline=None)).attempt_id

        def unreachable(name: str) -> None:
            if name == "store.get_artifact":
                trace.answering = lambda name: None
                raise StoreUnavailable("the store did not answer")

        trace.answering = unreachable
        with pytest.raises(StoreUnavailable) as refused:
            await _create(actions, second, "q1")
        assert refused.value.failure_class.value == "RETRYABLE"
        repeat = await _create(actions, second, "q1")
        assert (repeat.outcome, repeat.id, repeat.version) == (
            Outcome.ALREADY_APPLIED,
            made.id,
            made.version,
        )

    asyncio.run(run())


def test_a_repeat_of_a_write_whose_outcome_audit_failed_gets_its_id_not_a_new_one() -> None:
    async def run() -> None:
        _trace, ledger, store, actions = _fakes()
        attempt = (await actions.begin_attempt(**RUN, lease_deadline=None)).attempt_id
        ledger.failing = {Phase.OUTCOME}
        with pytest.raises(AuditPersistenceFailed):
            await _create(actions, attempt, "q1")
        ledger.failing = set()
        repeat = await _create(actions, attempt, "q1")
        assert repeat.outcome is Outcome.ALREADY_APPLIED
        assert set(store.artifacts) == {"art-1", repeat.id}
        # Now the write has its outcome in the ledger, under the id it landed with.
        outcomes = [e for e in ledger.phases(Phase.OUTCOME) if e.outcome]
        assert [(e.derived_id, e.outcome) for e in outcomes] == [
            (repeat.id, Outcome.ALREADY_APPLIED.value)
        ]

    asyncio.run(run())


def test_a_write_without_request_id_made_again_after_a_timeout_is_the_same_write() -> None:
    async def run() -> None:
        trace, _ledger, store, actions = _fakes()
        attempt = (await actions.begin_attempt(**RUN, lease_deadline=None)).attempt_id
        _lose_answer_of(trace, "store.create_artifact")
        with pytest.raises(StoreDeadlineExceeded):
            await _create(actions, attempt, "")
        again = await _create(actions, attempt, "")
        assert again.outcome is Outcome.ALREADY_APPLIED
        assert set(store.artifacts) == {"art-1", again.id}

    asyncio.run(run())


# -- the lease bounds the whole write -------------------------------------------------


def test_a_write_whose_lease_ran_out_in_its_intent_does_not_call_the_store(
    clock: Clock,
) -> None:
    async def run() -> None:
        trace, ledger, store, actions = _fakes()
        lease = T0 + timedelta(seconds=6)  # enough for one 5 s store call, at the start
        attempt = (await actions.begin_attempt(**RUN, lease_deadline=lease)).attempt_id

        def slow_intent(name: str) -> None:
            if name == f"ledger.append {Phase.INTENT}":
                clock.advance(2)  # the intent waited for a busy ledger

        trace.answering = slow_intent
        with pytest.raises(LeaseExpired) as refused:
            await _create(actions, attempt, "q")
        assert refused.value.failure_class.value == "RETRYABLE"
        assert store.timeouts == []
        assert set(store.artifacts) == {"art-1"}
        # Refused before acting: tried again under a longer lease, it is the same write.
        await actions.extend_lease(attempt, clock.now + timedelta(minutes=1))
        again = await _create(actions, attempt, "q")
        assert again.outcome is Outcome.APPLIED
        intents = {e.derived_id for e in ledger.phases(Phase.INTENT)}
        assert intents == {again.id}

    asyncio.run(run())


def test_an_edit_whose_lease_ran_out_after_its_read_does_not_patch(clock: Clock) -> None:
    async def run() -> None:
        trace, _ledger, store, actions = _fakes()
        lease = T0 + timedelta(seconds=7)
        attempt = (await actions.begin_attempt(**RUN, lease_deadline=lease)).attempt_id

        def slow_read(name: str) -> None:
            if name == "store.get_artifact":
                clock.advance(3)

        trace.answering = slow_read
        with pytest.raises(LeaseExpired):
            await actions.edit(
                attempt_id=attempt,
                artifact_id="art-1",
                path="/title",
                value=JsonValue.parse('"b"', "value_json"),
                propose=False,
                request_id="q",
            )
        assert [name for name, _ in store.timeouts] == ["get_artifact"]
        assert store.artifacts["art-1"].version == 1

    asyncio.run(run())


def test_a_lease_that_ran_out_is_not_extended(clock: Clock) -> None:
    async def run() -> None:
        _trace, ledger, store, actions = _fakes()
        attempt = (
            await actions.begin_attempt(**RUN, lease_deadline=T0 + timedelta(seconds=10))
        ).attempt_id
        clock.advance(11)  # the queue's lease ran out: it may have delivered the run again
        with pytest.raises(LeaseExpired, match="is not extended") as refused:
            await actions.extend_lease(attempt, clock.now + timedelta(minutes=5))
        assert refused.value.failure_class.value == "RETRYABLE"
        assert ledger.phases(Phase.LEASE) == []  # nothing audited
        with pytest.raises(LeaseExpired):  # and the attempt writes no more
            await _create(actions, attempt, "q")
        assert set(store.artifacts) == {"art-1"}

    asyncio.run(run())


def test_every_store_call_of_a_write_ends_before_the_lease(clock: Clock) -> None:
    async def run() -> None:
        trace, _ledger, store, actions = _fakes()
        lease = T0 + timedelta(seconds=5.5)
        attempt = (await actions.begin_attempt(**RUN, lease_deadline=lease)).attempt_id
        lefts: list[float] = []

        def record(name: str) -> None:
            if name.startswith("store."):
                lefts.append((lease - clock.now).total_seconds())
                clock.advance(0.1)

        trace.answering = record
        await actions.edit(
            attempt_id=attempt,
            artifact_id="art-1",
            path="/title",
            value=JsonValue.parse('"b"', "value_json"),
            propose=False,
            request_id="",
        )
        given = [timeout for _, timeout in store.timeouts]
        assert len(given) == 2 and all(t is not None for t in given)
        assert all(t is not None and 0 < t <= left for t, left in zip(given, lefts, strict=True))

    asyncio.run(run())


# -- a step ends once -----------------------------------------------------------------


async def _begun(actions: RunActions, attempt_id: str) -> str:
    began = await actions.begin_step(
        attempt_id=attempt_id,
        tool="pay",
        effect=int(ToolEffect.NON_IDEMPOTENT_WRITE),
        args=JsonValue.parse("{}", "args_json"),
        request_id="",
    )
    return began.id


def test_two_concurrent_ends_of_one_step_append_once_and_count_once() -> None:
    async def run() -> None:
        _trace, ledger, _store, actions = _fakes()
        attempt = (await actions.begin_attempt(**RUN, lease_deadline=None)).attempt_id
        step_id = await _begun(actions, attempt)
        ends = await asyncio.gather(
            *(
                actions.end_step(
                    attempt_id=attempt,
                    step_id=step_id,
                    result=JsonValue.parse('{"n": 1}', "result_json"),
                    request_id=request_id,
                )
                for request_id in ("e1", "e2")
            )
        )
        assert sorted(end.outcome for end in ends) == [
            Outcome.ALREADY_APPLIED,
            Outcome.APPLIED,
        ]
        assert [e.derived_id for e in ledger.phases(Phase.STEP_END)] == [step_id]
        counts = await actions.end_attempt(attempt)
        assert counts.applied == 1  # the step, once: its end is not another write

    asyncio.run(run())


def test_a_repeated_end_step_gets_the_first_answer() -> None:
    async def run() -> None:
        _trace, ledger, _store, actions = _fakes()
        attempt = (await actions.begin_attempt(**RUN, lease_deadline=None)).attempt_id
        step_id = await _begun(actions, attempt)
        first, repeat = await asyncio.gather(
            *(
                actions.end_step(
                    attempt_id=attempt,
                    step_id=step_id,
                    result=JsonValue.parse("{}", "result_json"),
                    request_id="e1",
                )
                for _ in range(2)
            )
        )
        assert first == repeat == WriteResult(Outcome.APPLIED, id=step_id)
        assert len(ledger.phases(Phase.STEP_END)) == 1

    asyncio.run(run())
