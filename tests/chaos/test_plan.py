"""Plans are a function of their seed, and hold the deliberately identical writes they promise."""

from __future__ import annotations

import json
import random
from collections import Counter

from chaos.plan import OpKind, make_plan, render_json
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
