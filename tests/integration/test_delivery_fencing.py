"""A delivery fences its tool calls, through real `actonce serve` processes on both backends.

A queue's delivery of a job is an unscoped attempt of its run; the scoped attempts of its
tool calls name it (``delivery_attempt_id``). A newer delivery, begun on another sidecar
that shares the ledger (PostgreSQL, or one SQLite file), fences the older delivery's
scoped attempts too: their next write is refused ``ATTEMPT_FENCED`` and never reaches the
store, a scoped attempt that names the stale delivery is refused as it begins, and a
stale delivery's step end (a model's answer it recorded late) is refused, so that the
answer later deliveries replay is the newer delivery's. A scoped attempt's lease is
bounded by its delivery's, which ExtendLease of the delivery moves.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc
from actonce_api.v1 import types_pb2
from google.protobuf import timestamp_pb2

from tests.harness import ServerProcess, refusal, sidecar_config, spawn_sidecar
from tests.helpers import postgres as pg

IDEMPOTENT = types_pb2.TOOL_EFFECT_IDEMPOTENT_WRITE
RUN = "run-job-7"


@dataclass
class Pod:
    process: ServerProcess
    channel: grpc.Channel
    stub: pb_grpc.RunActionsServiceStub

    def begin(self, *, scope: str = "", delivery: str = "", lease: float | None = None) -> str:
        request = pb.BeginAttemptRequest(
            run_id=RUN, rule="billing", checkpoint="", scope=scope, delivery_attempt_id=delivery
        )
        if lease is not None:
            request.lease_deadline.CopyFrom(_stamp(datetime.now(UTC) + timedelta(seconds=lease)))
        return str(self.stub.BeginAttempt(request, timeout=10).attempt_id)

    def create(self, attempt: str, title: str) -> pb.CreateResponse:
        request = pb.CreateRequest(
            attempt_id=attempt, kind="ticket", data_json=json.dumps({"title": title})
        )
        answer: pb.CreateResponse = self.stub.Create(request, timeout=10)
        return answer

    def begin_step(self, attempt: str) -> pb.BeginStepResponse:
        request = pb.BeginStepRequest(
            attempt_id=attempt, tool="model_turn", effect=IDEMPOTENT,
            args_json='{"agent":"billing","turn":0}',
        )  # fmt: skip
        answer: pb.BeginStepResponse = self.stub.BeginStep(request, timeout=10)
        return answer

    def end_step(self, attempt: str, step_id: str, result: object) -> pb.EndStepResponse:
        request = pb.EndStepRequest(
            attempt_id=attempt, step_id=step_id, result_json=json.dumps(result)
        )
        answer: pb.EndStepResponse = self.stub.EndStep(request, timeout=10)
        return answer


def _stamp(moment: datetime) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(moment)
    return stamp


def _refused(call: object) -> tuple[grpc.StatusCode, str, str, list[str]]:
    assert callable(call)
    with pytest.raises(grpc.RpcError) as caught:
        call()
    got = refusal(caught.value)
    return got.code, got.reason, got.failure_class, got.fields


FENCED: tuple[grpc.StatusCode, str, str, list[str]] = (
    grpc.StatusCode.FAILED_PRECONDITION,
    "ATTEMPT_FENCED",
    "RETRYABLE",
    [],
)


@pytest.fixture(params=["postgres", "one-sqlite-file"])
def pods(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Pod, Pod]]:
    """Two sidecars, as in two pods, sharing one ledger; on PostgreSQL one store too."""
    databases: list[str] = []
    made: list[Pod] = []
    try:
        for name in ("pod-a", "pod-b"):
            extra: tuple[str, ...] = ("--store-timeout", "0.5")
            if request.param == "postgres":
                if not databases:
                    databases += [pg.fresh_database("ledger"), pg.fresh_database("store")]
                config = sidecar_config(
                    tmp_path / name, audit_dsn=databases[0], store_dsn=databases[1]
                )
            else:
                config = sidecar_config(tmp_path / name)
                extra += ("--audit-db", str(tmp_path / "volume" / "audit.db"))
            process = spawn_sidecar(config, tmp_path / f"{name}.log", *extra)
            channel = grpc.insecure_channel(process.target)
            made.append(Pod(process, channel, pb_grpc.RunActionsServiceStub(channel)))
        yield made[0], made[1]
    finally:
        for pod in made:
            pod.channel.close()
            pod.process.stop()
        for dsn in databases:
            pg.drop_database(dsn)


def test_a_newer_delivery_on_another_sidecar_fences_every_tool_call_of_the_older(
    pods: tuple[Pod, Pod],
) -> None:
    a, b = pods
    stale = a.begin()
    call = a.begin(scope="call-1", delivery=stale)
    first = a.create(call, "Disk full")
    assert first.outcome == types_pb2.OUTCOME_APPLIED

    newer = b.begin()  # the queue delivers the job again, to another worker
    # The stale delivery's tool call: its next write, its next step and a new tool call of
    # it are refused, before anything reaches the store.
    assert _refused(lambda: a.create(call, "Printer jam")) == FENCED
    assert _refused(lambda: a.begin_step(call)) == FENCED
    assert _refused(lambda: a.begin(scope="call-2", delivery=stale)) == FENCED
    # The newer delivery's same tool call makes the same write under the same id: the
    # delivery is not an input of any id.
    again = b.create(b.begin(scope="call-1", delivery=newer), "Disk full")
    assert again.id == first.id
    # The refused write never landed: the newer delivery makes it now (on PostgreSQL's
    # shared store, an ALREADY_APPLIED would tell it had).
    made = b.create(b.begin(scope="call-3", delivery=newer), "Printer jam")
    assert made.outcome == types_pb2.OUTCOME_APPLIED


def test_a_stale_deliverys_late_model_answer_is_not_the_one_later_deliveries_replay(
    pods: tuple[Pod, Pod],
) -> None:
    a, b = pods
    stale = a.begin()
    asked = a.begin_step(stale)  # the model is asked; its answer is slow in coming
    newer = b.begin()  # the lease ran out, the queue delivered again
    answered = b.begin_step(newer)
    assert (answered.step_id, answered.outcome) == (asked.step_id, types_pb2.OUTCOME_APPLIED)
    late = {"tool_calls": [{"id": "call-stale"}]}
    assert _refused(lambda: a.end_step(stale, asked.step_id, late)) == FENCED
    assert b.end_step(newer, answered.step_id, {"tool_calls": [{"id": "call-new"}]}).outcome == (
        types_pb2.OUTCOME_APPLIED
    )
    replayed = a.begin_step(a.begin())  # a third delivery replays the newer one's answer
    assert replayed.outcome == types_pb2.OUTCOME_ALREADY_APPLIED
    assert json.loads(replayed.result_json) == {"tool_calls": [{"id": "call-new"}]}


def test_a_tool_call_naming_a_delivery_begun_elsewhere_brings_its_own_lease(
    pods: tuple[Pod, Pod],
) -> None:
    a, b = pods
    delivery = a.begin()
    code, reason, _, fields = _refused(lambda: b.begin(scope="call-1", delivery=delivery))
    assert (code, reason, fields) == (
        grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT", ["lease_deadline"]
    )  # fmt: skip
    call = b.begin(scope="call-1", delivery=delivery, lease=30)
    assert b.create(call, "Disk full").outcome == types_pb2.OUTCOME_APPLIED


def test_a_tool_calls_lease_is_bounded_by_its_deliverys_which_extend_lease_moves(
    pods: tuple[Pod, Pod],
) -> None:
    a, _ = pods
    delivery = a.begin(lease=1.2)  # the queue's visibility timeout
    call = a.begin(scope="call-1", delivery=delivery)  # no lease of its own
    assert a.create(call, "one").outcome == types_pb2.OUTCOME_APPLIED
    # The delivery's lease has less left than a store call's deadline (0.5 s): refused.
    time.sleep(0.8)
    refused = _refused(lambda: a.create(call, "two"))
    assert refused[1:3] == ("LEASE_EXPIRED", "RETRYABLE")
    # The worker's heartbeat extends the delivery's lease: its tool calls write again.
    a.stub.ExtendLease(
        pb.ExtendLeaseRequest(
            attempt_id=delivery, lease_deadline=_stamp(datetime.now(UTC) + timedelta(seconds=30))
        ),
        timeout=10,
    )
    assert a.create(call, "two").outcome == types_pb2.OUTCOME_APPLIED


def test_a_delivery_is_named_only_by_a_scoped_attempt_of_its_own_run(
    pods: tuple[Pod, Pod],
) -> None:
    a, _ = pods
    delivery = a.begin()
    unscoped = _refused(lambda: a.begin(delivery=delivery))
    assert unscoped[1:] == ("INVALID_ARGUMENT", "REFUSED", ["delivery_attempt_id"])
    other = a.stub.BeginAttempt(pb.BeginAttemptRequest(run_id="another-run", rule="billing"))
    wrong = _refused(lambda: a.begin(scope="call-1", delivery=other.attempt_id))
    assert wrong[1:] == ("INVALID_ARGUMENT", "REFUSED", ["delivery_attempt_id"])
