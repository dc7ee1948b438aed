"""A write of one store call whose three commits are one job of the store client (a ThreeCommits)
is the same write as one whose three commits the core makes itself: the same events, the same
answers and errors, the same store, in every way it can go."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import pytest

from sidecar.core.actions import RunActions
from sidecar.errors import StoreUnavailable
from sidecar.ledger.base import Phase
from sidecar.rules.canonical import Document
from sidecar.store_contract import StoredArtifact
from sidecar.upstream.base import CreateArtifact
from tests.core.fakes import MemoryLedger, MemoryStore, ThreeCommitsStore, Trace, run_actions

RUN = {"run_id": "run-1", "rule": "triage", "checkpoint": "cp-1"}


class _Unavailable(MemoryStore):
    """A store whose creates land and whose answers are lost: it may have made the write."""

    async def _create_artifact(self, op: CreateArtifact, timeout: float | None) -> StoredArtifact:
        await super()._create_artifact(op, timeout)
        raise StoreUnavailable("the store went away after it acted")


class _UnavailableThreeCommits(ThreeCommitsStore, _Unavailable):
    pass


@dataclass
class Scenario:
    failing: frozenset[str] = frozenset()
    unavailable: bool = False
    fenced: bool = False


async def _create(actions: RunActions, attempt: str, request_id: str) -> object:
    return await actions.create(
        attempt_id=attempt,
        kind="ticket",
        data=Document.parse('{"n": 1}', "data_json"),
        propose=False,
        request_id=request_id,
    )


async def _notice_nowhere(actions: RunActions, attempt: str, request_id: str) -> object:
    return await actions.notice(
        attempt_id=attempt, thread_id="no-thread", text="x", request_id=request_id
    )


async def _thread_twice(actions: RunActions, attempt: str, request_id: str) -> object:
    await actions.create_thread(attempt_id=attempt, title="t", request_id="")
    return await actions.create_thread(attempt_id=attempt, title="t", request_id=request_id)


Write = Callable[[RunActions, str, str], Awaitable[object]]


def _made(write: Write, scenario: Scenario, three_commits: bool) -> tuple[object, ...]:
    """What ``write`` did under ``scenario``: its answer or error, the events and the store;
    then what a repeat of its request answered."""
    trace = Trace()
    ledger = MemoryLedger(trace)
    store: MemoryStore
    if three_commits:
        store = (_UnavailableThreeCommits if scenario.unavailable else ThreeCommitsStore)(
            ledger, trace
        )
    else:
        store = (_Unavailable if scenario.unavailable else MemoryStore)(trace)
    actions = run_actions(ledger, store, store_timeout_seconds=5.0)

    async def run() -> tuple[object, object]:
        attempt = (await actions.begin_attempt(**RUN, lease_deadline=None)).attempt_id
        if scenario.fenced:
            await actions.begin_attempt(**RUN, lease_deadline=None)
        ledger.failing = set(scenario.failing)
        answers = []
        for _ in range(2):  # the call, then its repeat once the ledger works again
            try:
                answers.append(_said(await write(actions, attempt, "q1")))
            except Exception as error:
                answers.append((type(error).__name__, getattr(error, "reason", "")))
            ledger.failing = set()
        return answers[0], answers[1]

    first, repeat = asyncio.run(run())
    events = [
        (e.event.phase, e.event.derived_id, e.event.outcome, e.event.reason,
         sorted(e.event.detail.items()))
        for e in ledger.events
        if e.event.phase in (Phase.INTENT, Phase.OUTCOME)
    ]  # fmt: skip
    return first, repeat, events, store.holdings()


def _said(answer: object) -> object:
    outcome = getattr(answer, "outcome", None)
    return (outcome.value if outcome is not None else None, getattr(answer, "id", None))


SCENARIOS = {
    "applied": Scenario(),
    "intent lost": Scenario(failing=frozenset({Phase.INTENT})),
    "outcome lost": Scenario(failing=frozenset({Phase.OUTCOME})),
    "store went away": Scenario(unavailable=True),
    "store went away, its record lost": Scenario(
        unavailable=True, failing=frozenset({Phase.OUTCOME})
    ),
    "fenced": Scenario(fenced=True),
}
WRITES: dict[str, Write] = {
    "create": _create,
    "notice refused": _notice_nowhere,
    "thread again": _thread_twice,
}


@pytest.mark.parametrize("scenario", SCENARIOS.values(), ids=SCENARIOS.keys())
@pytest.mark.parametrize("write", WRITES.values(), ids=WRITES.keys())
def test_a_write_in_three_commits_is_the_same_as_one_made_apart(
    write: Write, scenario: Scenario
) -> None:
    apart = _made(write, scenario, three_commits=False)
    assert _made(write, scenario, three_commits=True) == apart


def test_a_write_s_three_commits_are_one_call_of_the_store_client() -> None:
    trace = Trace()
    ledger = MemoryLedger(trace)
    actions = run_actions(ledger, ThreeCommitsStore(ledger, trace))

    async def run() -> None:
        attempt = (await actions.begin_attempt(**RUN, lease_deadline=None)).attempt_id
        trace.calls.clear()
        await _create(actions, attempt, "q1")

    asyncio.run(run())
    assert trace.calls == [
        "store.three_commits", f"ledger.append {Phase.INTENT}", "store.create_artifact",
        f"ledger.append {Phase.OUTCOME}",
    ]  # fmt: skip
