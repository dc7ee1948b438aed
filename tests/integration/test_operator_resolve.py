"""A step interrupted by a killed sidecar is handed to a person, decided, and honoured.

On both backends: the sidecar process is killed with SIGKILL between BeginStep
and EndStep; ``actonce audit pending`` lists the step and exits 3; ``actonce
audit resolve`` records the decision; a later attempt on another sidecar over
the same ledger, running before the decision was taken, gets its answer; the
chain still verifies.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import grpc
import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc
from actonce_api.v1 import types_pb2

from sidecar.config import Config
from sidecar.ledger import liveness
from tests.conftest import MakeConfig
from tests.harness import refusal, spawn_sidecar
from tests.server.processes import run_cli

NON_IDEMPOTENT = types_pb2.TOOL_EFFECT_NON_IDEMPOTENT_WRITE


def ledger_flags(config: Config) -> list[str]:
    if config.audit_dsn:
        return ["--audit-dsn", config.audit_dsn]
    return ["--audit-db", str(config.audit_path)]


def begin_step(target: str, run_id: str) -> pb.BeginStepResponse:
    with grpc.insecure_channel(target) as channel:
        stub = pb_grpc.RunActionsServiceStub(channel)
        attempt = stub.BeginAttempt(
            pb.BeginAttemptRequest(run_id=run_id, rule="billing", checkpoint="cp-1")
        ).attempt_id
        answer: pb.BeginStepResponse = stub.BeginStep(
            pb.BeginStepRequest(
                attempt_id=attempt,
                tool="charge_card",
                effect=NON_IDEMPOTENT,
                args_json='{"amount": 30, "card": "tok_1"}',
            )
        )
        return answer


def interrupted_step(config: Config, tmp_path: Path) -> str:
    """Begin a non-idempotent step on a sidecar process, then SIGKILL it before EndStep."""
    sidecar = spawn_sidecar(config, tmp_path / "sidecar.log")
    began = begin_step(sidecar.target, "run-pay")
    assert began.outcome == types_pb2.OUTCOME_APPLIED
    sidecar.process.kill()  # SIGKILL: no EndStep, no EndAttempt, nothing flushed by hand
    sidecar.process.wait(10)
    # Its heartbeat goes stale within the bound the README states: only then is the step
    # in doubt rather than in flight, and decidable.
    deadline = time.monotonic() + liveness.STALE_SECONDS + 5
    while str(began.step_id) not in run_cli("audit", "pending", *ledger_flags(config)).stdout:
        assert time.monotonic() < deadline, "the killed sidecar's step never became decidable"
        time.sleep(0.5)
    return str(began.step_id)


@pytest.mark.parametrize(
    ("decision", "expected"),
    [
        (["--ran", "--result-json", '{"charge": "ch_9", "ok": true}'], "ALREADY_APPLIED"),
        (["--did-not-run"], "APPLIED"),
    ],
)
def test_a_step_in_doubt_is_listed_resolved_and_honoured_by_a_later_attempt(
    make_config: MakeConfig, tmp_path: Path, decision: list[str], expected: str
) -> None:
    config = make_config(tmp_path / "data")
    step_id = interrupted_step(config, tmp_path)

    # Before any decision, a later attempt is refused IN_DOUBT (the sidecar's own rule).
    # This sidecar keeps running while the decision is taken by another process.
    again = spawn_sidecar(config, tmp_path / "sidecar.log")
    try:
        with pytest.raises(grpc.RpcError) as caught:
            begin_step(again.target, "run-pay")
        assert refusal(caught.value).reason == "IN_DOUBT"
        decide_and_check(config, step_id, decision, expected, again.target)
    finally:
        again.stop()


def decide_and_check(
    config: Config, step_id: str, decision: list[str], expected: str, running: str
) -> None:
    flags = ledger_flags(config)

    listed = run_cli("audit", "pending", *flags)
    assert listed.returncode == 3, listed.stderr
    assert step_id in listed.stdout and "step_in_doubt" in listed.stdout
    assert "charge_card" in listed.stdout and "tok_1" not in listed.stdout  # never a payload
    as_json = run_cli("audit", "pending", "--json", *flags)
    assert as_json.returncode == 3
    items = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [(i["id"], i["kind"], i["run_id"], i["rule"], i["tool"]) for i in items] == [
        (step_id, "step_in_doubt", "run-pay", "billing", "charge_card")
    ]

    resolved = run_cli(
        "audit", "resolve", step_id, *decision, "--by", "alice", "--reason", "checked the PSP",
        *flags,
    )  # fmt: skip
    assert resolved.returncode == 0, resolved.stderr
    assert run_cli("audit", "pending", *flags).returncode == 0

    # A second decision on the same step is refused, naming the first.
    twice = run_cli(
        "audit", "resolve", step_id, "--did-not-run", "--by", "bob", "--reason", "again", *flags
    )
    assert twice.returncode == 1
    assert "already decided" in twice.stderr and "alice" in twice.stderr

    # A later attempt on the sidecar that was running all along honours it.
    answer = begin_step(running, "run-pay")
    assert answer.step_id == step_id
    assert types_pb2.Outcome.Name(answer.outcome) == f"OUTCOME_{expected}"
    if expected == "ALREADY_APPLIED":
        assert json.loads(answer.result_json) == {"charge": "ch_9", "ok": True}

    verified = run_cli("audit", "verify", *flags)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    shown = run_cli("audit", "show", "run-pay", *flags)
    # Who decided: the role PostgreSQL authenticated, or (SQLite, no key) the name typed.
    assert f"decision on {step_id}: {decision[0][2:].replace('-', '_')} by " in shown.stdout
    assert "alice" in shown.stdout


def test_resolve_refuses_a_write_decision_for_a_step_and_an_unknown_id(
    make_config: MakeConfig, tmp_path: Path
) -> None:
    config = make_config(tmp_path / "data")
    flags = ledger_flags(config)
    step_id = interrupted_step(config, tmp_path)
    wrong = run_cli("audit", "resolve", step_id, "--landed", "--by", "a", "--reason", "r", *flags)
    assert wrong.returncode == 1 and "--ran or --did-not-run" in wrong.stderr
    no_result = run_cli("audit", "resolve", step_id, "--ran", "--by", "a", "--reason", "r", *flags)
    assert no_result.returncode == 1 and "--result-json" in no_result.stderr
    unknown = run_cli(
        "audit", "resolve", "stp_nothing", "--did-not-run", "--by", "a", "--reason", "r", *flags
    )
    assert unknown.returncode == 1 and "no step or write" in unknown.stderr
    bad_json = run_cli(
        "audit", "resolve", step_id, "--ran", "--result-json", "{nope", "--by", "a",
        "--reason", "r", *flags,
    )  # fmt: skip
    assert bad_json.returncode == 2
    said = bad_json.stderr.strip()
    assert said.startswith("actonce: error: --result-json: is not valid JSON: "), said
    assert said.count("--result-json") == 1, said
    # None of the refusals wrote anything: the step is still pending.
    assert run_cli("audit", "pending", *flags).returncode == 3
