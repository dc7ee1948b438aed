"""ADR-111 on both backends: steps of the agent's own tools, in-doubt writes, fencing."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import types_pb2

from tests.conftest import MakeConfig
from tests.harness import RunningSidecar, refusal, start_sidecar
from tests.helpers.locks import ledger_locked

NON_IDEMPOTENT = types_pb2.TOOL_EFFECT_NON_IDEMPOTENT_WRITE
IDEMPOTENT = types_pb2.TOOL_EFFECT_IDEMPOTENT_WRITE
READ_ONLY = types_pb2.TOOL_EFFECT_READ_ONLY
UNSPECIFIED = types_pb2.TOOL_EFFECT_UNSPECIFIED


def _begin_step(
    sc: RunningSidecar,
    attempt: str,
    effect: int,
    tool: str = "send_email",
) -> pb.BeginStepResponse:
    answer: pb.BeginStepResponse = sc.stub.BeginStep(
        pb.BeginStepRequest(
            attempt_id=attempt,
            tool=tool,
            effect=types_pb2.ToolEffect.ValueType(effect),
            args_json='{"to":"ops"}',
        )
    )
    return answer


@pytest.mark.parametrize("effect", [NON_IDEMPOTENT, UNSPECIFIED])
def test_a_non_idempotent_step_that_never_ended_is_in_doubt_on_a_later_attempt(
    sidecar: RunningSidecar, effect: int
) -> None:
    first = _begin_step(sidecar, sidecar.begin("run-s", checkpoint="c"), effect)
    assert first.outcome == types_pb2.OUTCOME_APPLIED  # make the call now
    # The attempt dies mid-call: no EndStep. The run is retried.
    with pytest.raises(grpc.RpcError) as caught:
        _begin_step(sidecar, sidecar.begin("run-s", checkpoint="c"), effect)
    got = refusal(caught.value)
    assert (got.code, got.reason, got.failure_class) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "IN_DOUBT",
        "UNKNOWN",
    )
    assert got.metadata["step_id"] == first.step_id
    # The refusal names what a person runs next, with this step's id.
    assert got.message.endswith(
        f"decide with `actonce audit resolve {first.step_id} --ran|--did-not-run`"
    )


def test_a_step_that_ended_answers_already_applied_with_its_recorded_result(
    sidecar: RunningSidecar,
) -> None:
    attempt = sidecar.begin("run-s", checkpoint="c")
    began = _begin_step(sidecar, attempt, NON_IDEMPOTENT)
    ended = sidecar.stub.EndStep(
        pb.EndStepRequest(attempt_id=attempt, step_id=began.step_id, result_json='{"sent": 1}')
    )
    assert ended.outcome == types_pb2.OUTCOME_APPLIED
    again = _begin_step(sidecar, sidecar.begin("run-s", checkpoint="c"), NON_IDEMPOTENT)
    assert (again.step_id, again.outcome) == (began.step_id, types_pb2.OUTCOME_ALREADY_APPLIED)
    assert json.loads(again.result_json) == {"sent": 1}


@pytest.mark.parametrize("effect", [READ_ONLY, IDEMPOTENT])
def test_read_only_and_idempotent_steps_always_run(sidecar: RunningSidecar, effect: int) -> None:
    first = _begin_step(sidecar, sidecar.begin("run-s", checkpoint="c"), effect, tool="lookup")
    again = _begin_step(sidecar, sidecar.begin("run-s", checkpoint="c"), effect, tool="lookup")
    assert (again.step_id, again.outcome) == (first.step_id, types_pb2.OUTCOME_APPLIED)


def test_end_step_for_an_unknown_or_another_attempts_step_is_refused(
    sidecar: RunningSidecar,
) -> None:
    mine = sidecar.begin("run-a")
    theirs = sidecar.begin("run-b")
    step = _begin_step(sidecar, theirs, NON_IDEMPOTENT).step_id
    for step_id in ("stp_unknown", step):
        with pytest.raises(grpc.RpcError) as caught:
            sidecar.stub.EndStep(
                pb.EndStepRequest(attempt_id=mine, step_id=step_id, result_json="{}")
            )
        got = refusal(caught.value)
        assert (got.code, got.reason, got.failure_class) == (
            grpc.StatusCode.FAILED_PRECONDITION,
            "UNKNOWN_STEP",
            "REFUSED",
        )


def test_write_steps_audit_fail_closed_and_read_only_steps_fail_soft(
    make_config: MakeConfig, tmp_path: Path
) -> None:
    sc = start_sidecar(make_config(tmp_path / "data", audit_busy_timeout_ms=200))
    try:
        attempt = sc.begin("run-l")
        with ledger_locked(sc.config):
            read = _begin_step(sc, attempt, READ_ONLY, tool="lookup")
            with pytest.raises(grpc.RpcError) as caught:
                _begin_step(sc, attempt, NON_IDEMPOTENT)
        assert read.outcome == types_pb2.OUTCOME_APPLIED
        got = refusal(caught.value)
        assert (got.reason, got.failure_class) == ("AUDIT_PERSISTENCE_FAILED", "UNKNOWN")
    finally:
        sc.stop()


def test_a_lease_deadline_in_the_past_is_refused_at_begin(sidecar: RunningSidecar) -> None:
    from google.protobuf import timestamp_pb2

    past = timestamp_pb2.Timestamp(seconds=1)
    with pytest.raises(grpc.RpcError) as caught:
        sidecar.stub.BeginAttempt(
            pb.BeginAttemptRequest(run_id="r", rule="x", checkpoint="c", lease_deadline=past)
        )
    got = refusal(caught.value)
    assert (got.reason, got.fields) == ("INVALID_ARGUMENT", ["lease_deadline"])


def test_a_newer_attempt_fences_the_older_across_sidecars_sharing_the_ledger(
    make_config: MakeConfig, tmp_path: Path
) -> None:
    first_config = make_config(tmp_path / "one")
    # The second sidecar shares the first's ledger and store.
    from dataclasses import replace

    second_config = replace(first_config, listen="127.0.0.1:0")
    one = start_sidecar(first_config)
    if first_config.store_dsn is None:
        # SQLite: a second sidecar on the same host shares the ledger file and
        # reaches the first's embedded store.
        second_config = replace(second_config, store_target=one.sidecar.store_target)
    two = start_sidecar(second_config)
    try:
        older = one.begin("run-f", checkpoint="c")
        one.stub.Create(pb.CreateRequest(attempt_id=older, kind="k", data_json='{"n":1}'))
        newer = two.begin("run-f", checkpoint="c")
        with pytest.raises(grpc.RpcError) as caught:
            one.stub.Create(pb.CreateRequest(attempt_id=older, kind="k", data_json='{"n":2}'))
        got = refusal(caught.value)
        assert (got.reason, got.failure_class) == ("ATTEMPT_FENCED", "RETRYABLE")
        answers = [
            two.stub.Create(pb.CreateRequest(attempt_id=newer, kind="k", data_json=data)).outcome
            for data in ('{"n":1}', '{"n":2}')
        ]
        assert answers == [types_pb2.OUTCOME_ALREADY_APPLIED, types_pb2.OUTCOME_APPLIED]
        assert sorted(a.data_json for a in one.artifacts("k")) == ['{"n":1}', '{"n":2}']
    finally:
        two.stop()
        one.stop()


def test_a_begin_step_repeated_with_its_request_id_never_gives_a_second_go_ahead(
    sidecar: RunningSidecar,
) -> None:
    attempt = sidecar.begin("run-r", checkpoint="c")
    request = pb.BeginStepRequest(
        attempt_id=attempt,
        tool="charge_card",
        effect=NON_IDEMPOTENT,
        args_json='{"cents": 500}',
        request_id="charge-1",
    )
    first = sidecar.stub.BeginStep(request)
    assert first.outcome == types_pb2.OUTCOME_APPLIED  # the agent sends its charge now
    # The caller repeats the call with its identity while the charge may be under way: it
    # waits as long as its own deadline lets it, then learns the charge is in doubt.
    with pytest.raises(grpc.RpcError) as caught:
        sidecar.stub.BeginStep(request, timeout=1.0)
    got = refusal(caught.value)
    assert (got.reason, got.failure_class, got.metadata["step_id"]) == (
        "IN_DOUBT",
        "UNKNOWN",
        first.step_id,
    )
    sidecar.stub.EndStep(
        pb.EndStepRequest(attempt_id=attempt, step_id=first.step_id, result_json='{"ch": 1}')
    )
    # Once the step ended, the identity answers the step's result: nothing to send again.
    again = sidecar.stub.BeginStep(request)
    assert (again.step_id, again.outcome, json.loads(again.result_json)) == (
        first.step_id,
        types_pb2.OUTCOME_ALREADY_APPLIED,
        {"ch": 1},
    )
    begins = [e for e in sidecar.audit("run-r") if e.event.phase == "step_begin"]
    assert len(begins) == 1
