"""Each phase of the write path with in-memory fakes: what fails closed, what is best
effort, what a fenced attempt meets, and what the core tells the metrics."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import pytest

from sidecar.core.actions import RunActions
from sidecar.core.edits import VERSION_CONFLICT_REREADS
from sidecar.core.types import Outcome, WriteResult
from sidecar.errors import (
    AttemptFenced,
    AuditPersistenceFailed,
    SendNotAllowed,
    StoreDeadlineExceeded,
    StoreRefused,
)
from sidecar.ledger.base import Phase
from sidecar.rules.canonical import Document, JsonValue
from sidecar.rules.effects import ToolEffect
from sidecar.store_contract import Refusal, RefusalCode, StoredArtifact
from sidecar.upstream.base import PatchArtifact
from tests.core.fakes import MemoryLedger, MemoryStore, Trace, run_actions

RUN = {"run_id": "run-1", "rule": "triage", "checkpoint": "cp-1"}


def _fakes() -> tuple[Trace, MemoryLedger, MemoryStore, RunActions]:
    trace = Trace()
    ledger = MemoryLedger(trace)
    store = MemoryStore(trace)
    store.seed_artifact("art-1", "ticket", {"title": "a"})
    store.threads["thr-1"] = "triage"
    return trace, ledger, store, run_actions(ledger, store)


async def _create(actions: RunActions, attempt_id: str, request_id: str) -> WriteResult:
    return await actions.create(
        attempt_id=attempt_id,
        kind="ticket",
        data=Document.parse('{"n": 1}', "data_json"),
        propose=False,
        request_id=request_id,
    )


async def _step(
    actions: RunActions, attempt_id: str, effect: ToolEffect, request_id: str = ""
) -> WriteResult:
    return await actions.begin_step(
        attempt_id=attempt_id,
        tool="lookup",
        effect=int(effect),
        args=JsonValue.parse('{"q": 1}', "args_json"),
        request_id=request_id,
    )


# -- audit the intent: fail closed -----------------------------------------------------


def test_a_write_whose_intent_is_not_durable_never_reaches_the_store_and_is_released() -> None:
    async def run() -> None:
        trace, ledger, store, actions = _fakes()
        attempt = (await actions.begin_attempt(**RUN, lease_deadline=None)).attempt_id
        ledger.failing = {Phase.INTENT}
        with pytest.raises(AuditPersistenceFailed, match="the store was not called"):
            await _create(actions, attempt, "q1")
        assert not any(call.startswith("store.") for call in trace.calls)
        assert set(store.artifacts) == {"art-1"}
        # Its request_id and occurrence were given back: the repeat is the first try.
        ledger.failing = set()
        repeat = await _create(actions, attempt, "q1")
        assert repeat.outcome is Outcome.APPLIED
        assert [e.occurrence for e in ledger.phases(Phase.INTENT)] == [0]
        assert (await actions.end_attempt(attempt)).failed == 1

    asyncio.run(run())


# -- perform: a failure answers as itself, its record is best effort ------------------


def test_a_refused_write_whose_failure_record_is_lost_still_answers_the_refusal() -> None:
    async def run() -> None:
        _trace, ledger, _store, actions = _fakes()
        attempt = (await actions.begin_attempt(**RUN, lease_deadline=None)).attempt_id
        ledger.failing = {Phase.OUTCOME}
        with pytest.raises(StoreRefused) as refused:
            await actions.edit(
                attempt_id=attempt,
                artifact_id="art-none",
                path="/title",
                value=JsonValue.parse('"b"', "value_json"),
                propose=False,
                request_id="q1",
            )
        assert refused.value.reason == "NOT_FOUND"
        assert [e.derived_id for e in ledger.phases(Phase.INTENT)] != []
        assert ledger.phases(Phase.OUTCOME) == []

    asyncio.run(run())


def test_a_send_the_allowlist_refuses_is_audited_and_never_reaches_the_store() -> None:
    async def run() -> None:
        trace, ledger, store, actions = _fakes()
        attempt = (await actions.begin_attempt(**RUN, lease_deadline=None)).attempt_id
        with pytest.raises(SendNotAllowed):
            await actions.send(attempt_id=attempt, thread_id="thr-1", text="hi", request_id="")
        [refusal] = ledger.phases(Phase.OUTCOME)
        assert (refusal.rpc, refusal.reason, refusal.write_type) == ("Send", "FORBIDDEN", "message")
        # Lost, its record does not turn the refusal into another error.
        ledger.failing = {Phase.OUTCOME}
        with pytest.raises(SendNotAllowed):
            await actions.send(attempt_id=attempt, thread_id="thr-1", text="hi", request_id="")
        assert "store.post_message" not in trace.calls and store.messages == {}

    asyncio.run(run())


# -- reads and read-only steps: best effort --------------------------------------------


def test_a_read_answers_when_its_audit_is_lost() -> None:
    async def run() -> None:
        _trace, ledger, _store, actions = _fakes()
        attempt = (await actions.begin_attempt(**RUN, lease_deadline=None)).attempt_id
        ledger.failing = {Phase.READ}
        read = await actions.read(attempt_id=attempt, artifact_id="art-1", thread_id=None)
        assert read.artifact is not None and read.artifact.id == "art-1"
        ledger.failing = set()
        await actions.read(attempt_id=attempt, artifact_id=None, thread_id="thr-1")
        assert [e.derived_id for e in ledger.phases(Phase.READ)] == ["thr-1"]

    asyncio.run(run())


def test_a_read_only_step_goes_on_when_its_audit_is_lost() -> None:
    async def run() -> None:
        _trace, ledger, _store, actions = _fakes()
        attempt = (await actions.begin_attempt(**RUN, lease_deadline=None)).attempt_id
        ledger.failing = {Phase.STEP_BEGIN, Phase.OUTCOME, Phase.STEP_END}
        begun = await _step(actions, attempt, ToolEffect.READ_ONLY, "q1")
        assert begun.outcome is Outcome.APPLIED
        ended = await actions.end_step(
            attempt_id=attempt,
            step_id=begun.id,
            result=JsonValue.parse("{}", "result_json"),
            request_id="q2",
        )
        assert ended.outcome is Outcome.APPLIED
        assert [e.event.phase for e in ledger.events] == [Phase.ATTEMPT_BEGIN]

    asyncio.run(run())


def test_a_write_step_fails_closed_at_its_begin_and_at_its_end() -> None:
    async def run() -> None:
        _trace, ledger, _store, actions = _fakes()
        attempt = (await actions.begin_attempt(**RUN, lease_deadline=None)).attempt_id
        ledger.failing = {Phase.STEP_BEGIN}
        with pytest.raises(AuditPersistenceFailed):
            await _step(actions, attempt, ToolEffect.IDEMPOTENT_WRITE, "q1")
        ledger.failing = {Phase.STEP_END}
        begun = await _step(actions, attempt, ToolEffect.IDEMPOTENT_WRITE, "q1")
        with pytest.raises(AuditPersistenceFailed):
            await actions.end_step(
                attempt_id=attempt,
                step_id=begun.id,
                result=JsonValue.parse("{}", "result_json"),
                request_id="q2",
            )

    asyncio.run(run())


# -- a fenced attempt stops, whatever its audit's class -------------------------------


def test_an_attempt_a_newer_one_fenced_stops_before_the_store_even_for_a_read_only_step() -> None:
    async def run() -> None:
        trace, _ledger, store, actions = _fakes()
        older = (await actions.begin_attempt(**RUN, lease_deadline=None)).attempt_id
        await actions.begin_attempt(**RUN, lease_deadline=None)
        with pytest.raises(AttemptFenced):
            await _create(actions, older, "q1")
        with pytest.raises(AttemptFenced):
            await _step(actions, older, ToolEffect.READ_ONLY)
        assert not any(call.startswith("store.") for call in trace.calls)
        assert set(store.artifacts) == {"art-1"}

    asyncio.run(run())


# -- claim or replay -------------------------------------------------------------------


def test_a_replayed_request_gets_the_first_answer_and_appends_nothing() -> None:
    async def run() -> None:
        _trace, ledger, _store, actions = _fakes()
        attempt = (await actions.begin_attempt(**RUN, lease_deadline=None)).attempt_id
        first = await _create(actions, attempt, "q1")
        appended = len(ledger.events)
        assert await _create(actions, attempt, "q1") == first
        assert len(ledger.events) == appended
        counts = await actions.end_attempt(attempt)
        assert (counts.applied, counts.failed) == (1, 0)

    asyncio.run(run())


# -- the core tells the metrics of each re-read after a version conflict ---------------


class _Conflicting(MemoryStore):
    """Refuses the first ``conflicts`` patches with VERSION_CONFLICT."""

    conflicts = 0

    async def _patch_artifact(self, op: PatchArtifact, timeout: float | None) -> StoredArtifact:
        if self.conflicts > 0:
            self.conflicts -= 1
            raise Refusal(RefusalCode.VERSION_CONFLICT, "someone else patched it")
        return await super()._patch_artifact(op, timeout)


@pytest.mark.parametrize(("conflicts", "rereads"), [(0, 0), (2, 2), (4, 3)])
def test_each_reread_after_a_version_conflict_is_told_to_the_observer(
    conflicts: int, rereads: int
) -> None:
    async def run() -> None:
        store = _Conflicting()
        store.seed_artifact("art-1", "ticket", {"title": "a"})
        store.conflicts = conflicts
        told: list[None] = []
        actions = run_actions(MemoryLedger(), store, on_reread=lambda: told.append(None))
        attempt = (await actions.begin_attempt(**RUN, lease_deadline=None)).attempt_id
        edit = actions.edit(
            attempt_id=attempt,
            artifact_id="art-1",
            path="/title",
            value=JsonValue.parse('"b"', "value_json"),
            propose=False,
            request_id="",
        )
        if conflicts > VERSION_CONFLICT_REREADS:
            with pytest.raises(StoreRefused):
                await edit
        else:
            assert (await edit).outcome is Outcome.APPLIED
        assert len(told) == rereads

    asyncio.run(run())


# -- edits of one artifact patch one at a time; one that waits too long fails as a deadline --


class _SlowPatch(MemoryStore):
    """Holds each patch until ``go`` is set."""

    go: asyncio.Event | None = None
    patches = 0

    async def _patch_artifact(self, op: PatchArtifact, timeout: float | None) -> StoredArtifact:
        self.patches += 1
        assert self.go is not None
        await self.go.wait()
        return await super()._patch_artifact(op, timeout)


def test_an_edit_that_waits_for_another_past_its_deadline_fails_retryable_unsent() -> None:
    async def run() -> None:
        store = _SlowPatch()
        store.go = asyncio.Event()
        store.seed_artifact("art-1", "ticket", {"title": "a"})
        actions = run_actions(MemoryLedger(), store, store_timeout_seconds=0.1)
        attempt = (await actions.begin_attempt(**RUN, lease_deadline=None)).attempt_id

        def edit(path: str) -> Awaitable[WriteResult]:
            return actions.edit(
                attempt_id=attempt,
                artifact_id="art-1",
                path=path,
                value=JsonValue.parse('"b"', "value_json"),
                propose=False,
                request_id="",
            )

        first = asyncio.ensure_future(edit("/title"))
        await asyncio.sleep(0.01)
        with pytest.raises(StoreDeadlineExceeded):
            await edit("/owner")
        assert store.patches == 1  # the second edit sent nothing
        store.go.set()
        assert (await first).outcome is Outcome.APPLIED

    asyncio.run(run())
