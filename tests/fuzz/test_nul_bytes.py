"""A NUL character in any string field is bad input, on both backends.

PostgreSQL text cannot hold NUL. Before the sidecar refused it, a NUL in a run id, rule,
checkpoint or request_id reached the PostgreSQL ledger, failed the whole group-commit batch,
and came back as AUDIT_PERSISTENCE_FAILED (UNKNOWN, never retried) both to the caller and to
every other caller whose event shared that batch.
"""

from __future__ import annotations

import threading
from typing import Any

import grpc
import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import types_pb2

from tests.harness import RunningSidecar, refusal

ATTEMPT = object()  # stands for the test's attempt id

CASES: list[tuple[str, dict[str, Any], str]] = [
    ("BeginAttempt", {"run_id": "r\0", "rule": "triage", "checkpoint": "c"}, "run_id"),
    ("BeginAttempt", {"run_id": "r", "rule": "tri\0age", "checkpoint": "c"}, "rule"),
    ("BeginAttempt", {"run_id": "r", "rule": "triage", "checkpoint": "\0"}, "checkpoint"),
    ("BeginAttempt", {"run_id": "r", "rule": "triage", "scope": "call\0"}, "scope"),
    ("Create", {"kind": "k\0", "data_json": "{}"}, "kind"),
    ("Create", {"kind": "k", "data_json": "{}", "request_id": "rq\0"}, "request_id"),
    ("Edit", {"artifact_id": "art\0", "path": "/a", "value_json": "1"}, "artifact_id"),
    ("Notice", {"thread_id": "thr_x", "text": "hi\0there"}, "text"),
    ("Send", {"thread_id": "thr\0", "text": "hi"}, "thread_id"),
    ("CreateThread", {"title": "\0"}, "title"),
    ("Read", {"artifact_id": "art_\0"}, "artifact_id"),
    ("Read", {"thread_id": "thr_\0"}, "thread_id"),
    ("BeginStep", {"tool": "t\0", "args_json": "{}"}, "tool"),
    ("EndStep", {"step_id": "stp_\0", "result_json": "{}"}, "step_id"),
    ("AbortStep", {"step_id": "stp_\0", "reason": "refused"}, "step_id"),
    ("AbortStep", {"step_id": "stp_x", "reason": "refused\0"}, "reason"),
]


def test_a_nul_character_is_invalid_argument_and_reaches_nothing(sidecar: RunningSidecar) -> None:
    attempt = sidecar.begin("run-nul", rule="pager")
    for rpc, fields, field in CASES:
        if rpc != "BeginAttempt":
            fields = {"attempt_id": attempt, **fields}
        before = len(sidecar.audit())
        with pytest.raises(grpc.RpcError) as caught:
            getattr(sidecar.stub, rpc)(getattr(pb, f"{rpc}Request")(**fields))
        got = refusal(caught.value)
        assert (got.code, got.reason, got.failure_class, got.fields) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_ARGUMENT",
            "REFUSED",
            [field],
        ), (rpc, field)
        assert len(sidecar.audit()) == before, (rpc, field)
    assert sidecar.health() == 1


def test_a_nul_character_does_not_fail_other_callers_writes(sidecar: RunningSidecar) -> None:
    # Writes and bad BeginAttempts at once, so that they share group-commit batches.
    attempt = sidecar.begin("run-busy")
    failures: list[str] = []

    def write(n: int) -> None:
        try:
            answer = sidecar.stub.Create(
                pb.CreateRequest(attempt_id=attempt, kind="k", data_json=f'{{"n":{n}}}')
            )
            assert answer.outcome == types_pb2.OUTCOME_APPLIED
        except grpc.RpcError as error:
            failures.append(refusal(error).reason)

    def poison() -> None:
        for _ in range(20):
            with pytest.raises(grpc.RpcError):
                sidecar.stub.BeginAttempt(
                    pb.BeginAttemptRequest(run_id="r\0", rule="triage", checkpoint="c")
                )

    threads = [threading.Thread(target=write, args=(n,)) for n in range(40)]
    threads += [threading.Thread(target=poison) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert len(sidecar.artifacts("k")) == 40
