"""Restarts (the store keeps refusing used ids; attempts are forgotten) and request_id replay."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import types_pb2

from tests.conftest import MakeConfig
from tests.harness import RunningSidecar, refusal, start_sidecar, start_store


def test_a_used_id_is_still_refused_after_the_store_restarts(
    make_config: MakeConfig, tmp_path: Path
) -> None:
    store = start_store(tmp_path / "store")
    port = store.port
    sc = start_sidecar(make_config(tmp_path / "sidecar", store_target=store.target))
    try:
        request = pb.CreateRequest(kind="ticket", data_json='{"a":1}')
        request.attempt_id = sc.begin("r", checkpoint="c")
        first = sc.stub.Create(request)
        store.stop()
        store = start_store(tmp_path / "store", port=port)
        request.attempt_id = sc.begin("r", checkpoint="c")
        again = sc.stub.Create(request)
        assert (again.id, again.outcome) == (first.id, types_pb2.OUTCOME_ALREADY_APPLIED)
        assert len(store.backend.list_artifacts("ticket").artifacts) == 1
    finally:
        sc.stop()
        store.stop()


def test_an_attempt_begun_before_a_restart_is_unknown_after_it(
    make_config: MakeConfig, tmp_path: Path
) -> None:
    config = make_config(tmp_path / "data")
    sc = start_sidecar(config)
    attempt = sc.begin("r", checkpoint="c")
    first = sc.stub.Create(pb.CreateRequest(attempt_id=attempt, kind="k", data_json="{}"))
    sc.stop()
    sc = start_sidecar(config)
    try:
        with pytest.raises(grpc.RpcError) as caught:
            sc.stub.Create(pb.CreateRequest(attempt_id=attempt, kind="k", data_json="{}"))
        got = refusal(caught.value)
        assert (got.reason, got.failure_class) == ("UNKNOWN_ATTEMPT", "RETRYABLE")
        # A new attempt of the run goes on safely: the embedded store kept the id.
        again = sc.stub.Create(
            pb.CreateRequest(attempt_id=sc.begin("r", checkpoint="c"), kind="k", data_json="{}")
        )
        assert (again.id, again.outcome) == (first.id, types_pb2.OUTCOME_ALREADY_APPLIED)
    finally:
        sc.stop()


def test_a_repeated_request_id_gets_the_first_answer_and_counts_no_new_occurrence(
    sidecar: RunningSidecar,
) -> None:
    attempt = sidecar.begin()
    request = pb.CreateRequest(attempt_id=attempt, kind="k", data_json='{"x":1}', request_id="q1")
    first = sidecar.stub.Create(request)
    with ThreadPoolExecutor(max_workers=4) as pool:
        repeats = list(pool.map(lambda _: sidecar.stub.Create(request), range(4)))
    assert {(r.id, r.outcome) for r in repeats} == {(first.id, types_pb2.OUTCOME_APPLIED)}
    # Without the same request_id, the same write is a second occurrence.
    request.request_id = "q2"
    second = sidecar.stub.Create(request)
    assert second.id != first.id
    assert len(sidecar.artifacts("k")) == 2
    counts = sidecar.stub.EndAttempt(pb.EndAttemptRequest(attempt_id=attempt))
    assert counts.applied == 2


def test_a_request_id_reused_for_another_request_is_refused(sidecar: RunningSidecar) -> None:
    attempt = sidecar.begin()
    sidecar.stub.Create(
        pb.CreateRequest(attempt_id=attempt, kind="k", data_json="{}", request_id="q")
    )
    with pytest.raises(grpc.RpcError) as caught:
        sidecar.stub.Create(
            pb.CreateRequest(attempt_id=attempt, kind="k", data_json='{"other":1}', request_id="q")
        )
    got = refusal(caught.value)
    assert (got.reason, got.fields) == ("INVALID_ARGUMENT", ["request_id"])
    assert [json.loads(a.data_json) for a in sidecar.artifacts("k")] == [{}]


def test_every_write_is_audited_intent_then_outcome_before_the_answer(
    sidecar: RunningSidecar,
) -> None:
    attempt = sidecar.begin("run-audit")
    answer = sidecar.stub.Create(
        pb.CreateRequest(attempt_id=attempt, kind="k", data_json='{"s":"secret"}')
    )
    events = [e.event for e in sidecar.audit("run-audit")]
    phases = [(e.phase, e.derived_id, e.outcome) for e in events]
    assert phases == [
        ("attempt_begin", "", ""),
        ("intent", answer.id, ""),
        ("outcome", answer.id, "OUTCOME_APPLIED"),
    ]
    # Digests, never payloads.
    assert all("secret" not in json.dumps(e.detail) for e in events)


def test_a_repeated_end_attempt_gets_the_same_counts_and_writes_stay_refused(
    sidecar: RunningSidecar,
) -> None:
    attempt = sidecar.begin()
    sidecar.stub.Create(pb.CreateRequest(attempt_id=attempt, kind="k", data_json="{}"))
    first = sidecar.stub.EndAttempt(pb.EndAttemptRequest(attempt_id=attempt))
    again = sidecar.stub.EndAttempt(pb.EndAttemptRequest(attempt_id=attempt))
    assert (again.applied, again.failed) == (first.applied, first.failed) == (1, 0)
    with pytest.raises(grpc.RpcError) as caught:
        sidecar.stub.Create(pb.CreateRequest(attempt_id=attempt, kind="k", data_json="{}"))
    assert refusal(caught.value).reason == "UNKNOWN_ATTEMPT"
    ends = [e for e in sidecar.audit() if e.event.phase == "attempt_end"]
    assert len(ends) == 1  # the repeat is an answer, not a second end
