"""Every await point of the write path, cancelled.

For each kind of write, a run makes the write with a request_id; its caller gives up
(the call is cancelled) after k iterations of the event loop, for every k until the
write ends before it; the caller repeats the call with the same request_id and gives up
again after j iterations, for every j; repeats it once more and waits; and the run is then
retried on a new attempt. Cutting the call off after every number of iterations cuts it off at
every point where it waits, whatever that point is: a new await point added to the write
path is cut off too, with no change here.

After each case: the store holds what one uncut run holds, the ledger has an intent for
everything the store holds, no answer names an id the store does not hold, the run's
retry makes nothing new, and a step began under one id and ended once.

The tables below name the points each write passes through (the ledger and store calls
the fakes see) and the places a caller can be waiting in the sidecar's code. A change to
either fails :func:`test_the_await_points_are_the_ones_the_table_names` until the table
says so, and the other test shows every named point was cut off at least once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from sidecar.core.actions import RunActions
from sidecar.core.types import Outcome, WriteResult
from sidecar.ledger.base import Phase
from sidecar.rules.canonical import Document, JsonValue
from sidecar.rules.effects import ToolEffect
from tests.core.fakes import MemoryLedger, MemoryStore, Trace, run_actions

RUN = {"run_id": "run-1", "rule": "pager", "checkpoint": "cp-1"}
OBJECT = {"title": "a", "labels": {"team": "x"}}
ARRAY = {"items": ["a", "b", "c"]}

Call = Callable[[RunActions, str, str, Any], Awaitable[WriteResult]]
Setup = Callable[[RunActions, str], Awaitable[Any]]
Finish = Callable[[RunActions, str, WriteResult, Any], Awaitable[object]]


async def _nothing(actions: RunActions, attempt_id: str) -> None:
    return None


async def _no_finish(actions: RunActions, attempt_id: str, answer: WriteResult, ctx: Any) -> None:
    return None


async def _begin_pay(actions: RunActions, attempt_id: str, request_id: str = "") -> WriteResult:
    return await actions.begin_step(
        attempt_id=attempt_id,
        tool="pay",
        effect=int(ToolEffect.NON_IDEMPOTENT_WRITE),
        args=JsonValue.parse('{"amount": 5}', "args_json"),
        request_id=request_id,
    )


async def _end_pay(
    actions: RunActions, attempt_id: str, step_id: str, request_id: str
) -> WriteResult:
    return await actions.end_step(
        attempt_id=attempt_id,
        step_id=step_id,
        result=JsonValue.parse('{"paid": true}', "result_json"),
        request_id=request_id,
    )


async def _begun(actions: RunActions, attempt_id: str) -> str:
    return (await _begin_pay(actions, attempt_id)).id


async def _begun_lookup(actions: RunActions, attempt_id: str) -> str:
    # An idempotent step: a retry runs it again after a failed call.
    answer = await actions.begin_step(
        attempt_id=attempt_id,
        tool="lookup",
        effect=int(ToolEffect.IDEMPOTENT_WRITE),
        args=JsonValue.parse('{"q": 1}', "args_json"),
        request_id="",
    )
    return answer.id


PAID = '{"paid":true}'


@dataclass(frozen=True)
class Kind:
    """One kind of write: the call, what the run does before and after it, and the
    points (ledger and store calls) one uncut call of it passes through, in order."""

    call: Call
    points: tuple[str, ...]
    before: Setup = _nothing
    after: Finish = _no_finish
    # The run's retry acts anew: an abort of the step the retry began again, since
    # the first attempt's abort let it run.
    acts_again: bool = False
    # Where a repeat waits for the first call's answer, seen from its caller: a step's whole
    # call runs in a task of its own, so its caller waits in to_the_end.
    repeat_waits_in: str = "claim"


def _edit(artifact_id: str, path: str, value: str, *, propose: bool = False) -> Call:
    async def call(actions: RunActions, attempt_id: str, request_id: str, ctx: Any) -> WriteResult:
        return await actions.edit(
            attempt_id=attempt_id,
            artifact_id=artifact_id,
            path=path,
            value=JsonValue.parse(value, "value_json"),
            propose=propose,
            request_id=request_id,
        )

    return call


def _create(*, propose: bool) -> Call:
    async def call(actions: RunActions, attempt_id: str, request_id: str, ctx: Any) -> WriteResult:
        return await actions.create(
            attempt_id=attempt_id,
            kind="ticket",
            data=Document.parse('{"n": 1, "tags": ["x"]}', "data_json"),
            propose=propose,
            request_id=request_id,
        )

    return call


async def _notice(actions: RunActions, attempt_id: str, request_id: str, ctx: Any) -> WriteResult:
    return await actions.notice(
        attempt_id=attempt_id, thread_id="thr-1", text="looked", request_id=request_id
    )


async def _send(actions: RunActions, attempt_id: str, request_id: str, ctx: Any) -> WriteResult:
    return await actions.send(
        attempt_id=attempt_id, thread_id="thr-1", text="your turn", request_id=request_id
    )


async def _thread(actions: RunActions, attempt_id: str, request_id: str, ctx: Any) -> WriteResult:
    return await actions.create_thread(
        attempt_id=attempt_id, title="incident", request_id=request_id
    )


async def _step_call(
    actions: RunActions, attempt_id: str, request_id: str, ctx: Any
) -> WriteResult:
    # A step's whole call, as the gateway makes it: begun, sent, ended, in a task of its own
    # that goes on when its caller gives up. Its request identity stands for all of it: a
    # repeat waits for the step's end and gets its result, and never sends again.
    async def whole() -> WriteResult:
        began = await _begin_pay(actions, attempt_id, request_id)
        if began.outcome is not Outcome.APPLIED:
            return began
        await _end_pay(actions, attempt_id, began.id, "")
        return WriteResult(Outcome.ALREADY_APPLIED, id=began.id, result_json=PAID)

    return await actions.to_the_end(attempt_id, whole())


async def _end_step(actions: RunActions, attempt_id: str, request_id: str, ctx: Any) -> WriteResult:
    assert isinstance(ctx, str)
    return await _end_pay(actions, attempt_id, ctx, request_id)


async def _abort_step(
    actions: RunActions, attempt_id: str, request_id: str, ctx: Any
) -> WriteResult:
    assert isinstance(ctx, str)
    return await actions.abort_step(
        attempt_id=attempt_id, step_id=ctx, reason="refused", request_id=request_id
    )


async def _fail_step(
    actions: RunActions, attempt_id: str, request_id: str, ctx: Any
) -> WriteResult:
    assert isinstance(ctx, str)
    return await actions.fail_step(
        attempt_id=attempt_id, step_id=ctx, error="connection reset", request_id=request_id
    )


INTENT = f"ledger.append {Phase.INTENT}"
OUTCOME = f"ledger.append {Phase.OUTCOME}"

KINDS: dict[str, Kind] = {
    "create": Kind(_create(propose=False), (INTENT, "store.create_artifact", OUTCOME)),
    "create by proposal": Kind(_create(propose=True), (INTENT, "store.create_proposal", OUTCOME)),
    "edit of an object": Kind(
        _edit("art-obj", "/labels/team", '"y"'),
        (INTENT, "store.get_artifact", "store.patch_artifact", OUTCOME),
    ),
    "edit of an array": Kind(
        _edit("art-arr", "/items/1", '"y"'),
        (INTENT, "store.get_artifact", "store.patch_artifact", OUTCOME),
    ),
    "edit by proposal": Kind(
        _edit("art-obj", "/title", '"b"', propose=True),
        (INTENT, "store.get_artifact", "store.create_proposal", OUTCOME),
    ),
    "notice": Kind(_notice, (INTENT, "store.post_message", OUTCOME)),
    "thread": Kind(_thread, (INTENT, "store.create_thread", OUTCOME)),
    "send": Kind(_send, (INTENT, "store.post_message", OUTCOME)),
    "begin step": Kind(
        _step_call,
        (
            f"ledger.append {Phase.STEP_BEGIN}",
            "ledger.events_for",
            OUTCOME,
            f"ledger.append {Phase.STEP_END}",
        ),
        repeat_waits_in="to_the_end",
    ),
    "end step": Kind(_end_step, (f"ledger.append {Phase.STEP_END}",), before=_begun),
    "abort step": Kind(
        _abort_step, (f"ledger.append {Phase.STEP_ABORT}",), before=_begun, acts_again=True
    ),
    "failed step": Kind(
        _fail_step,
        (f"ledger.append {Phase.STEP_FAILED}",),
        before=_begun_lookup,
        acts_again=True,
    ),
}

# Where in the sidecar's code a caller can be waiting when it gives up: for the first
# answer to its request_id, or for its write, which goes on without it.
WAITING_SITES = frozenset({"before it began", "claim", "to_the_end"})

# More iterations of the event loop than any write takes: a case that needs them is stuck.
MAX_ITERATIONS = 200


def _seeded(trace: Trace) -> MemoryStore:
    store = MemoryStore(trace)
    store.seed_artifact("art-obj", "ticket", OBJECT)
    store.seed_artifact("art-arr", "ticket", ARRAY)
    store.threads["thr-1"] = "triage"
    return store


@dataclass(frozen=True)
class Reached:
    """Where a call was when its caller gave up."""

    site: str  # the innermost function of the sidecar the caller waited in
    in_flight: str  # the ledger or store call under way, if any


@dataclass
class Cut:
    task: asyncio.Future[WriteResult]
    reached: Reached | None


def _waiting_in(task: asyncio.Task[Any]) -> str:
    """The innermost sidecar function the suspended ``task`` waits in."""
    site = "before it began"
    awaited: Any = task.get_coro()
    while awaited is not None and hasattr(awaited, "cr_code"):
        if "/sidecar/" in awaited.cr_code.co_filename:
            site = awaited.cr_code.co_name
        awaited = awaited.cr_await
    return site


async def _cut_off(call: Awaitable[WriteResult], iterations: int, trace: Trace) -> Cut:
    """Run ``call``; if it has not ended after ``iterations`` iterations of the loop, cancel it.
    The cancelled call is not waited for: a caller that gives up repeats at once."""
    task = asyncio.ensure_future(call)
    for _ in range(iterations):
        if task.done():
            break
        await asyncio.sleep(0)
    reached = None
    if not task.done():
        reached = Reached(_waiting_in(task), trace.in_flight)
        task.cancel()
    return Cut(task, reached)


async def _answer(cut: Cut) -> WriteResult | None:
    try:
        return await cut.task
    except asyncio.CancelledError:
        return None


async def _quiet() -> None:
    """Let everything the calls left running (writes whose callers gave up) end."""
    for _ in range(MAX_ITERATIONS):
        if len(asyncio.all_tasks()) == 1:
            return
        await asyncio.sleep(0)
    raise AssertionError("writes still running long after their callers gave up")


@dataclass
class Played:
    """One case: the run, cut off at iteration k and at iteration j of its repeat, then retried."""

    ledger: MemoryLedger
    store: MemoryStore
    first: Cut
    repeat: Cut
    answers: list[WriteResult] = field(default_factory=list)  # attempt one's, in order
    retried: WriteResult | None = None
    points: list[str] = field(default_factory=list)  # what the first call passed through


async def _play(kind: Kind, k: int, j: int) -> Played:
    trace = Trace()
    ledger = MemoryLedger(trace)
    store = _seeded(trace)
    actions = run_actions(ledger, store, send_allowlist=frozenset({"pager"}))
    first_attempt = (await actions.begin_attempt(**RUN, lease_deadline=None)).attempt_id
    ctx = await kind.before(actions, first_attempt)
    began = len(trace.calls)
    first = await _cut_off(kind.call(actions, first_attempt, "q", ctx), k, trace)
    points = trace.calls[began:]
    repeat = await _cut_off(kind.call(actions, first_attempt, "q", ctx), j, trace)
    final = await kind.call(actions, first_attempt, "q", ctx)
    answers = [a for a in (await _answer(first), await _answer(repeat)) if a is not None]
    answers.append(final)
    await kind.after(actions, first_attempt, final, ctx)
    await _quiet()
    await actions.end_attempt(first_attempt)
    # The run's retry: a new attempt makes the same writes, uncut.
    second_attempt = (await actions.begin_attempt(**RUN, lease_deadline=None)).attempt_id
    ctx = await kind.before(actions, second_attempt)
    retried = await kind.call(actions, second_attempt, "q", ctx)
    await kind.after(actions, second_attempt, retried, ctx)
    await _quiet()
    return Played(ledger, store, first, repeat, answers, retried, points)


def _check(case: Played, uncut: Played, label: str, kind: Kind) -> None:
    store, ledger = case.store, case.ledger
    # The store holds what one uncut run holds: nothing twice, nothing lost.
    assert store.holdings() == uncut.store.holdings(), label
    # Every answer to the request_id is the same answer, and names what the store holds.
    assert all(answer == case.answers[0] for answer in case.answers), (label, case.answers)
    steps = {e.derived_id for e in ledger.phases(Phase.STEP_BEGIN)}
    for answer in [*case.answers, case.retried]:
        assert answer is not None
        named = {answer.id, answer.proposal_id} - {""}
        assert named <= store.ids() | steps, (label, answer)
    # The retry finds the write made: it makes nothing new.
    assert case.retried is not None, label
    assert kind.acts_again or case.retried.outcome is not Outcome.APPLIED, (label, case.retried)
    # An intent for everything the store holds.
    intents = ledger.phases(Phase.INTENT)
    intended = {e.derived_id for e in intents}
    made = store.ids() - _seeded(Trace()).ids()
    assert made <= intended, (label, made - intended)
    for artifact_id, artifact in store.artifacts.items():
        if artifact.version > 1:
            edits = [e for e in intents if e.detail.get("artifact_id") == artifact_id]
            assert edits, (label, artifact_id)
    # A step began under one id, whatever its caller did, and ended once.
    assert steps == {e.derived_id for e in uncut.ledger.phases(Phase.STEP_BEGIN)}, label
    ends = [e.derived_id for e in ledger.phases(Phase.STEP_END)]
    assert ends == [e.derived_id for e in uncut.ledger.phases(Phase.STEP_END)], label


@pytest.mark.parametrize("name", sorted(KINDS))
def test_a_write_cut_off_at_any_await_point_lands_once(name: str) -> None:
    kind = KINDS[name]

    async def every_case() -> tuple[set[str], set[str], set[str]]:
        uncut = await _play(kind, MAX_ITERATIONS, MAX_ITERATIONS)
        assert uncut.first.reached is None and uncut.repeat.reached is None
        in_flight: set[str] = set()
        sites: set[str] = set()
        repeat_sites: set[str] = set()
        for k in range(MAX_ITERATIONS):
            for j in range(MAX_ITERATIONS):
                case = await _play(kind, k, j)
                _check(
                    case, uncut, f"{name}: cut off after {k} iterations, its repeat after {j}", kind
                )
                if case.first.reached is not None:
                    in_flight.add(case.first.reached.in_flight)
                    sites.add(case.first.reached.site)
                if case.repeat.reached is None:
                    break
                repeat_sites.add(case.repeat.reached.site)
            else:
                raise AssertionError(f"{name}: a repeat never ends")
            if case.first.reached is None:
                return in_flight, sites, repeat_sites
        raise AssertionError(f"{name}: the write never ends")

    in_flight, sites, repeat_sites = asyncio.run(every_case())
    # Each named point was under way when a caller gave up; and a repeat was cut off
    # while it waited for the first call's answer.
    assert set(kind.points) <= in_flight, set(kind.points) - in_flight
    assert kind.repeat_waits_in in repeat_sites, repeat_sites
    assert sites | repeat_sites <= WAITING_SITES, (sites | repeat_sites) - WAITING_SITES


@pytest.mark.parametrize("name", sorted(KINDS))
def test_the_await_points_are_the_ones_the_table_names(name: str) -> None:
    # A new ledger or store call in the write path changes this list: name it in KINDS,
    # and the test above shows it cut off and harmless.
    uncut = asyncio.run(_play(KINDS[name], MAX_ITERATIONS, MAX_ITERATIONS))
    assert tuple(uncut.points) == KINDS[name].points


def test_every_write_of_run_actions_has_a_kind_above() -> None:
    # A new public operation is a new kind of write, to be added to KINDS, until this
    # test says otherwise.
    others = {"begin_attempt", "end_attempt", "extend_lease", "read", "settle", "to_the_end",
              "scoped_attempt", "permit_step"}  # fmt: skip
    public = {n for n in dir(RunActions) if not n.startswith("_")} - others
    assert public == {"create", "edit", "notice", "send", "create_thread", "begin_step",
                      "end_step", "abort_step", "fail_step"}  # fmt: skip
