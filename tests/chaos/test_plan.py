"""Plans are a function of their seed, and hold the deliberately identical writes they promise."""

from __future__ import annotations

import json
import random
from collections import Counter

from chaos.plan import make_plan
from chaos.plan_kills import FREEZE
from chaos.plan_writes import OpKind, render_json
from sidecar.rules import canonical


def test_a_seed_replays_the_same_plan_and_kill_schedule() -> None:
    assert make_plan(7) == make_plan(7)
    assert make_plan(7) != make_plan(8)


def test_plans_make_identical_writes_on_purpose() -> None:
    twins = Counter[str]()
    for seed in range(60):
        for run in make_plan(seed).runs:
            for segment in run.segments:
                seen = Counter(
                    json.dumps([op.kind, op.artifact_kind, op.data, op.title, op.target,
                                op.text, op.tool, op.args], sort_keys=True)
                    for op in segment.ops() if op.kind is not OpKind.EDIT
                )  # fmt: skip
                for key, count in seen.items():
                    if count > 1:
                        twins[json.loads(key)[0]] += 1
    # Each kind of write that can be repeated is repeated in some plan.
    assert {OpKind.CREATE, OpKind.THREAD, OpKind.NOTICE, OpKind.STEP} <= set(twins)


def test_no_write_targets_an_identical_twin_of_its_own_phase() -> None:
    # Which of two identical creates in one phase gets occurrence 0 depends on the attempt's
    # order; an edit of "the first" would land on either. Plans never ask for that.
    for seed in range(100):
        for run in make_plan(seed).runs:
            targets = {op.target for op in run.ops() if op.target >= 0}
            for segment in run.segments:
                for phase in segment.phases:
                    keys = Counter(
                        json.dumps([op.kind, op.artifact_kind, op.data, op.title], sort_keys=True)
                        for op in phase
                        if op.kind in (OpKind.CREATE, OpKind.THREAD)
                    )
                    for op in phase:
                        key = json.dumps(
                            [op.kind, op.artifact_kind, op.data, op.title], sort_keys=True
                        )
                        if op.kind in (OpKind.CREATE, OpKind.THREAD) and keys[key] > 1:
                            assert op.index not in targets


def test_json_is_spelled_differently_but_means_the_same() -> None:
    value = {"b": [1, 2.5, {"z": "ü", "a": None}], "a": 10, "c": True}
    spellings = {render_json(value, random.Random(n)) for n in range(30)}
    assert len(spellings) > 5
    assert {canonical.json_digest(json.loads(s)) for s in spellings} == {
        canonical.json_digest(value)
    }


def test_plans_hold_the_faults_of_time() -> None:
    plans = [make_plan(seed) for seed in range(60)]
    freezes = [k for p in plans for k in p.kills if k.action == FREEZE]
    # Freezes at call counts, and while a gateway charge is under way, some of them longer
    # than the silence after which a frozen sidecar's calls may be decided.
    assert any(not k.at_step for k in freezes) and any(k.at_step for k in freezes)
    assert any(k.at_step and k.down_ms > 10_000 for k in freezes)
    assert any(k.at_step and k.down_ms < 10_000 for k in freezes)
    charges = [op for p in plans for run in p.runs for op in run.ops() if op.kind is OpKind.GATEWAY]
    assert any(op.args["seconds"] < 0.5 for op in charges)
    assert any(
        op.args["seconds"] > min(p.time.upstream_timeout, p.time.lease_seconds or 1e9)
        for p in plans
        for run in p.runs
        for op in run.ops()
        if op.kind is OpKind.GATEWAY
    )
    gateway = [p for p in plans if p.gateway]
    assert any(p.time.operator for p in gateway) and not all(p.time.operator for p in gateway)
    assert any(p.time.operator_skew for p in gateway) and any(p.time.sidecar_skew for p in plans)


def test_a_gateway_charge_is_its_runs_last_segment_under_the_lease_and_its_own() -> None:
    customers = Counter[str]()
    for seed in range(60):
        plan = make_plan(seed)
        for run in plan.runs:
            for segment in run.segments:
                if any(op.kind is OpKind.GATEWAY for op in segment.ops()):
                    assert segment is run.segments[-1]
                    assert segment.lease_seconds == plan.time.lease_seconds
                    (charge,) = segment.ops()
                    customers[charge.args["customer"]] += 1
    # One logical charge per customer: the upstream's count is that charge's.
    assert customers and set(customers.values()) == {1}


def test_time_faults_leave_a_seeds_writes_and_kills_as_they_were() -> None:
    # Drawn from a generator of their own: the plan without them is the seed's plan as it
    # was, so that earlier figures and failing seeds still replay.
    plan = make_plan(7)
    kills = [k for k in plan.kills if k.action != FREEZE]
    assert [k.at_call for k in kills] == [2, 3, 8, 9]  # as before time's faults came
    assert next(iter(plan.runs[0].ops())).kind is OpKind.THREAD
