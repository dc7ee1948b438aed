"""Several sidecars in one seed: each attempt goes to one the seed picks, each kill hits one,
and with one sidecar the plan is what it always was."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from itertools import pairwise

import pytest
from actonce_api.v1 import run_actions_pb2 as pb

from chaos.plan import attempt_sidecar, make_plan
from chaos.plan_kills import FREEZE, sidecar_name
from chaos.play import _require_chains
from chaos.processes import HarnessError, seed_ports
from chaos.sidecar_api import Api
from tests.helpers import postgres as pg
from tests.helpers.env import scrubbed_env


def test_a_plan_with_four_sidecars_spreads_attempts_over_more_than_one() -> None:
    moved = delivered = 0
    for seed in range(40):
        plan = make_plan(seed, sidecars=4)
        assert plan.sidecars == 4
        for run in plan.runs:
            picks = [attempt_sidecar(seed, run.run_id, n, plan.sidecars) for n in range(1, 9)]
            assert set(picks) <= {0, 1, 2, 3}
            assert len(set(picks)) > 1, (seed, run.run_id, picks)
            delivered += len(picks) - 1
            moved += sum(1 for a, b in pairwise(picks) if a != b)
            twins = {attempt_sidecar(seed, run.run_id, n, 4, twin=True) for n in range(1, 9)}
            assert len(twins) > 1
    # A redelivery usually lands on another sidecar than the attempt before it.
    assert moved > delivered / 2


def test_kills_at_call_counts_hit_several_sidecars_and_the_rest_of_the_plan_stays() -> None:
    hit: set[str] = set()
    for seed in range(40):
        one, four = make_plan(seed), make_plan(seed, sidecars=4)
        assert make_plan(seed, sidecars=1) == one
        assert [replace(k, target="x") for k in one.kills] == [
            replace(k, target="x") for k in four.kills
        ]
        assert replace(four, kills=one.kills, sidecars=1) == one
        for before, after in zip(one.kills, four.kills, strict=True):
            if before.at_step or before.target == "store":
                # A kill waiting for a run's step hits the sidecar that step is on.
                assert after.target == before.target
            else:
                assert after.target in {sidecar_name(n) for n in range(4)}
                hit.add(after.target)
    assert len(hit) > 1


def test_with_one_sidecar_every_attempt_goes_to_it() -> None:
    assert {attempt_sidecar(5, "chaos-5-0", n, 1) for n in range(1, 50)} == {0}
    assert {k.target for s in range(40) for k in make_plan(s).kills if k.action != FREEZE} <= {
        "sidecar",
        "store",
    }


def test_an_attempts_calls_go_to_the_sidecar_its_begin_went_to() -> None:
    api = Api(["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"])  # channels connect lazily
    try:
        begin = api.method("BeginAttempt", pb.BeginAttemptResponse)
        create = api.method("Create", pb.CreateResponse)
        assert begin.on(2).sidecar_for(pb.BeginAttemptRequest(run_id="r")) == 2
        api.route("a1", 2)
        api.route("a2", 1)
        assert create.sidecar_for(pb.CreateRequest(attempt_id="a1")) == 2
        assert create.sidecar_for(pb.CreateRequest(attempt_id="a2")) == 1
        assert create.call(pb.CreateRequest(attempt_id="a1")) is api.callable(
            2, "Create", pb.CreateResponse
        )
    finally:
        api.close()


def test_each_sidecar_gets_ports_of_its_own() -> None:
    ports = seed_ports(11, 0, sidecars=4)
    every = [*ports.sidecars, *ports.mcps, ports.store, ports.upstream]
    assert len(ports.sidecars) == len(ports.mcps) == 4
    assert len(set(every)) == len(every)
    one = seed_ports(11, 0)
    assert one.more == () and one.sidecars == [one.sidecar]


@pytest.mark.parametrize("chains", [1, 128])
def test_several_sidecars_are_tried_on_a_ledger_of_many_chains_only(chains: int) -> None:
    dsn = pg.fresh_database("chaos_chains")
    try:
        subprocess.run(
            [sys.executable, "-m", "sidecar.cli", "audit", "migrate", "--audit-dsn", dsn,
             "--chains", str(chains)],
            check=True, capture_output=True, env=scrubbed_env(),
        )  # fmt: skip
        if chains == 1:
            with pytest.raises(HarnessError, match="1 chain"):
                _require_chains(dsn)
        else:
            _require_chains(dsn)
    finally:
        pg.drop_database(dsn)
