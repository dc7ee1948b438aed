"""The checker's model of a gateway charge is not vacuous: a seed whose charge is slower than
the gateway's timeout, played for real (payments upstream, `actonce serve` with its MCP front,
the operator's `actonce audit` CLI), passes; the same seed's record, tampered with the way a
double charge or a hasty decision would leave it, is caught; and the ledger's permits and
decisions are held to the contract's rule, event by event. A sidecar killed after its charge's
permit leaves the charge in doubt, listed once the ledger says it is decidable."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from chaos.check_decisions import _check_decisions
from chaos.check_gateway import GatewayRecord
from chaos.findings import Findings
from chaos.operator import DID_NOT_RUN, RAN, Listing
from chaos.plan import SeedPlan, make_plan
from chaos.plan_kills import Kill
from chaos.plan_time import TimeFaults
from chaos.plan_writes import Op, OpKind, RunPlan, Segment
from chaos.play import Played, play
from sidecar.ledger.base import AuditEvent, Phase, StoredEvent

# One run, a few writes, then its gateway charge (customer c8-0).
SEED = 8


def _slow_charge(
    plan: SeedPlan,
    *,
    seconds: float = 3.0,
    timeout: float = 2.0,
    operator: bool = True,
    lease: float | None = None,
) -> SeedPlan:
    """The seed's plan with its charge answering after ``seconds``, past the gateway's
    ``timeout``, an operator watching or not, its attempts' lease the plan's or ``lease``
    (0: none), and nothing else of time."""

    def slow(op: Op) -> Op:
        if op.kind is not OpKind.GATEWAY:
            return op
        return replace(op, args={**op.args, "seconds": seconds})

    runs = tuple(
        RunPlan(
            run.run_id,
            run.rule,
            tuple(
                Segment(
                    s.checkpoint,
                    tuple(tuple(slow(op) for op in phase) for phase in s.phases),
                    s.lease_seconds if lease is None else lease,
                )
                for s in run.segments
            ),
        )
        for run in plan.runs
    )
    return replace(plan, runs=runs, time=TimeFaults(upstream_timeout=timeout, operator=operator))


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Played]:
    plan = _slow_charge(make_plan(SEED, topology="embedded", max_kills=0, caller_faults=False))
    seed_dir = tmp_path_factory.mktemp("chaos") / "seed"
    seed_dir.mkdir()
    yield play(plan, seed_dir)


def _record(played: Played) -> GatewayRecord:
    assert played.gateway is not None
    return played.gateway


def test_a_slow_charge_is_decided_from_the_upstream_and_replayed_once(played: Played) -> None:
    (run,) = played.results.values()
    record = _record(played)
    assert run.finished and run.gateway_step
    # Past the timeout the call was in doubt; the operator saw the charge and said so.
    assert [(d.step_id, d.decision, d.counted) for d in record.decisions] == [
        (run.gateway_step, RAN, 1)
    ]
    assert record.charged == Counter({"c8-0": 1})
    assert record.left.code == 0 and record.left.items == []
    found = played.check()
    assert (found.duplicates, found.losses, found.violations) == (0, 0, [])


def test_a_second_upstream_charge_is_a_duplicate(played: Played) -> None:
    doubled = replace(_record(played), charged=Counter({"c8-0": 2}))
    found = replace(played, gateway=doubled).check()
    assert found.duplicates == 1
    assert any("charged c8-0 2 times" in v for v in found.violations)
    # The operator said it ran once; the upstream says otherwise.
    assert any("decided ran" in v and "counted 2" in v for v in found.violations)


def test_a_finished_runs_charge_the_upstream_never_made_is_a_loss(played: Played) -> None:
    found = replace(played, gateway=replace(_record(played), charged=Counter())).check()
    assert found.losses == 1
    assert any("never charged c8-0" in v for v in found.violations)


def test_a_charge_left_in_doubt_must_be_listed_for_a_person(played: Played) -> None:
    (run,) = played.results.values()
    doubt = replace(run, finished=False, in_doubt_step=run.gateway_step)
    found = replace(played, results={run.run_id: doubt}).check()
    assert any("left in doubt" in v and "not listed" in v for v in found.violations)
    item = {"id": run.gateway_step, "run_id": run.run_id, "tool": "payments__charge"}
    listed = replace(_record(played), left=Listing(3, [item]))
    found = replace(played, results={run.run_id: doubt}, gateway=listed).check()
    assert not any("not listed" in v for v in found.violations)
    # Listed while its run finished: a conflict shown, and reported.
    found = replace(played, gateway=listed).check()
    assert any("of a finished run is listed" in v for v in found.violations)


def test_a_killed_sidecars_charge_is_listed_once_the_ledger_says_it_is_decidable(
    tmp_path: Path,
) -> None:
    # The sidecar is killed 2 s into a charge sent under its permit (no lease: its deadline
    # is the 20 s timeout's); the redelivery, on the restarted sidecar, is refused IN_DOUBT
    # and, with no operator, the run settles for a person at once, while the killed
    # sidecar's call may not be decided yet: not before its deadline has passed and its
    # heartbeat has been silent 10 s. The last listing, made once the ledger says the call
    # is decidable, must show it; made at once, it did not.
    plan = _slow_charge(
        make_plan(SEED, topology="embedded", max_kills=0, caller_faults=False),
        seconds=22.0,
        timeout=20.0,
        operator=False,
        lease=0.0,
    )
    (run,) = plan.runs
    kill = Kill(0, "sidecar", delay_ms=2000.0, down_ms=100.0, at_step=run.run_id)
    played = play(replace(plan, kills=(kill,)), tmp_path)
    (result,) = played.results.values()
    record = _record(played)
    assert not result.finished and result.in_doubt_step == result.gateway_step
    assert record.charged == Counter({"c8-0": 1})
    # In flight when every process had stopped; listed once the ledger said it was decidable.
    assert record.waited_for == 1 and record.flying.items == []
    assert [item["id"] for item in record.left.items] == [result.in_doubt_step]
    found = played.check()
    assert (found.duplicates, found.losses, found.violations) == (0, 0, [])


def _event(seq: int, ts: str, attempt: str, phase: str, **detail: str) -> StoredEvent:
    event = AuditEvent(
        run_id="r", attempt_id=attempt, rpc="x", phase=phase, derived_id="stp_1", detail=detail
    )
    return StoredEvent(seq, ts, event, "", "")


def _permit(seq: int, ts: str, deadline: str) -> StoredEvent:
    return _event(seq, ts, "att_1", "step_permit", deadline=deadline)


def _decided(seq: int, ts: str, decision: str) -> StoredEvent:
    return _event(seq, ts, "att_1", Phase.DECISION, decision=decision)


T = "2026-12-02T10:00:{:02d}+00:00"


def _findings(*events: StoredEvent) -> list[str]:
    found = Findings()
    _check_decisions(found, list(events))
    return found.violations


def test_a_decision_before_a_permitted_calls_deadline_is_caught() -> None:
    begun = _event(1, T.format(0), "att_1", Phase.STEP_BEGIN)
    permit = _permit(2, T.format(1), T.format(31))
    early = _findings(begun, permit, _decided(3, T.format(20), DID_NOT_RUN))
    assert len(early) == 1 and "could be under way until" in early[0]
    # Past the deadline, or after the call's end was recorded, a decision is the operator's.
    assert _findings(begun, permit, _decided(3, T.format(32), DID_NOT_RUN)) == []
    failed = _event(3, T.format(5), "att_1", Phase.STEP_FAILED)
    assert _findings(begun, permit, failed, _decided(4, T.format(20), RAN)) == []


def test_a_step_end_after_did_not_run_and_a_permit_after_a_decision_are_caught() -> None:
    begun = _event(1, T.format(0), "att_1", Phase.STEP_BEGIN)
    permit = _permit(2, T.format(1), T.format(3))
    decided = _decided(3, T.format(10), DID_NOT_RUN)
    ended = _event(4, T.format(11), "att_1", Phase.STEP_END)
    late = _findings(begun, permit, decided, ended)
    assert len(late) == 1 and "under way when decided" in late[0]
    # The attempt that began the step before the decision is granted no permit after it.
    again = _permit(4, T.format(11), T.format(13))
    assert any("before the decision" in v for v in _findings(begun, decided, again))
    # A new attempt's permit after the decision is what the decision allows.
    fresh = replace(again, event=replace(again.event, attempt_id="att_2"))
    assert _findings(begun, decided, fresh) == []
