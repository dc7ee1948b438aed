"""A key the caller chooses (scheme version 3), over real gRPC, against sidecar processes
and the real reference store on both backends: a Create whose data holds a timestamp lands
once across a redelivery when it names a key, and without a key makes an artifact per
delivery (the trap the key is for); the same key with other data in one attempt is refused
KEY_REUSED and changes nothing; a run of version 2 refuses a key."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import grpc
import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc
from actonce_api.v1 import types_pb2

from chaos.store_snapshot import StoreSnapshot, read_postgres_store, read_sqlite_store
from sidecar.config.serve import Config
from tests.conftest import MakeConfig
from tests.harness import RunningSidecar, refusal, spawn_sidecar, start_sidecar

APPLIED = types_pb2.OUTCOME_APPLIED
ALREADY = types_pb2.OUTCOME_ALREADY_APPLIED
NON_IDEMPOTENT = types_pb2.TOOL_EFFECT_NON_IDEMPOTENT_WRITE


def _store(config: Config) -> StoreSnapshot:
    if config.store_dsn:
        return read_postgres_store(config.store_dsn)
    return read_sqlite_store(config.store_path)


def _order(at: str, order: str = "o-1") -> str:
    return json.dumps({"order": order, "amount": 120, "sent_at": at})


def _deliver(
    target: str, *, at: str, key: str, kind: str = "order"
) -> tuple[pb.BeginAttemptResponse, pb.CreateResponse]:
    """One delivery of the run: an attempt from the run's checkpoint, and its create, whose
    data carries the time it was made (as an agent's code or a model writes it)."""
    with grpc.insecure_channel(target) as channel:
        stub = pb_grpc.RunActionsServiceStub(channel)
        begun = stub.BeginAttempt(
            pb.BeginAttemptRequest(run_id="run-k", rule="triage", checkpoint="cp-1")
        )
        made = stub.Create(
            pb.CreateRequest(attempt_id=begun.attempt_id, kind=kind, data_json=_order(at), key=key)
        )
        return begun, made


def test_a_keyed_create_with_a_timestamp_lands_once_across_a_redelivery(
    make_config: MakeConfig, tmp_path: Path
) -> None:
    config = make_config(tmp_path / "data")
    log = tmp_path / "sidecar.log"
    first = spawn_sidecar(config, log)
    try:
        begun, made = _deliver(first.target, at="2026-12-06T05:40:00.000Z", key="order-o-1")
        trap = _deliver(first.target, at="2026-12-06T05:40:00.000Z", key="", kind="note")[1]
    finally:
        first.stop()  # the delivery's worker dies; the queue redelivers the run
    assert begun.id_scheme_version == 3
    assert made.outcome == APPLIED
    # The redelivery reaches another sidecar process of the same store and ledger, and its
    # data was made again: another timestamp.
    second = spawn_sidecar(config, log)
    try:
        again = _deliver(second.target, at="2026-12-06T05:47:13.250Z", key="order-o-1")[1]
        trap_again = _deliver(second.target, at="2026-12-06T05:47:13.250Z", key="", kind="note")[1]
    finally:
        second.stop()
    assert (again.outcome, again.id) == (ALREADY, made.id)
    stored = _store(config).artifacts
    orders = {i: a for i, a in stored.items() if a[0] == "order"}
    assert list(orders) == [made.id]
    assert json.loads(orders[made.id][2])["sent_at"] == "2026-12-06T05:40:00.000Z"
    # Without a key the timestamp is part of what the write is: each delivery made one.
    assert trap.outcome == trap_again.outcome == APPLIED
    assert trap.id != trap_again.id
    assert sorted(i for i, a in stored.items() if a[0] == "note") == sorted(
        [trap.id, trap_again.id]
    )


def test_the_same_key_with_other_data_in_an_attempt_is_refused_and_changes_nothing(
    sidecar: RunningSidecar,
) -> None:
    stub = sidecar.stub
    attempt = sidecar.begin("run-r", checkpoint="cp-1")
    made = stub.Create(
        pb.CreateRequest(attempt_id=attempt, kind="order", data_json=_order("05:40"), key="o-1")
    )
    before = _store(sidecar.config).artifacts
    with pytest.raises(grpc.RpcError) as refused:
        stub.Create(
            pb.CreateRequest(
                attempt_id=attempt, kind="order", data_json=_order("05:40", "o-2"), key="o-1"
            )
        )
    r = refusal(refused.value)
    assert (r.code, r.reason, r.domain, r.failure_class) == (
        grpc.StatusCode.ALREADY_EXISTS,
        "KEY_REUSED",
        "actonce",
        "REFUSED",
    )
    assert r.metadata["id"] == made.id and r.metadata["key"] == "o-1"
    assert "choose another key" in r.message
    assert _store(sidecar.config).artifacts == before
    # Nothing of the refused call was audited as tried: one intent, the first create's.
    intents = [e for e in sidecar.audit("run-r") if e.event.phase == "intent"]
    assert [e.event.derived_id for e in intents] == [made.id]
    # The same key and the same data is the same write, as without a key.
    same = stub.Create(
        pb.CreateRequest(attempt_id=attempt, kind="order", data_json=_order("05:40"), key="o-1")
    )
    assert (same.outcome, same.id) == (ALREADY, made.id)
    # Another key is another write; a key names a create of its kind only.
    other = stub.Create(
        pb.CreateRequest(
            attempt_id=attempt, kind="order", data_json=_order("05:40", "o-2"), key="o-2"
        )
    )
    assert other.outcome == APPLIED and other.id != made.id


def test_a_thread_and_a_step_named_by_a_key(sidecar: RunningSidecar) -> None:
    stub = sidecar.stub
    first = sidecar.begin("run-t", checkpoint="cp-1")
    thread = stub.CreateThread(
        pb.CreateThreadRequest(attempt_id=first, title="Daily report", key="day-1")
    )
    other_day = stub.CreateThread(
        pb.CreateThreadRequest(attempt_id=first, title="Daily report", key="day-2")
    )
    assert thread.thread_id != other_day.thread_id
    with pytest.raises(grpc.RpcError) as refused:
        stub.CreateThread(
            pb.CreateThreadRequest(attempt_id=first, title="Weekly report", key="day-1")
        )
    assert refusal(refused.value).reason == "KEY_REUSED"
    step = stub.BeginStep(
        pb.BeginStepRequest(
            attempt_id=first,
            tool="send_invoice",
            effect=NON_IDEMPOTENT,
            args_json='{"invoice":"i-9","at":"05:40"}',
            key="i-9",
        )
    )
    stub.EndStep(pb.EndStepRequest(attempt_id=first, step_id=step.step_id, result_json='"sent"'))
    with pytest.raises(grpc.RpcError) as refused:
        stub.BeginStep(
            pb.BeginStepRequest(
                attempt_id=first,
                tool="send_invoice",
                effect=NON_IDEMPOTENT,
                args_json='{"invoice":"i-10"}',
                key="i-9",
            )
        )
    assert refusal(refused.value).reason == "KEY_REUSED"
    # A redelivery whose arguments were made again finds the step ended, with its result.
    again = sidecar.begin("run-t", checkpoint="cp-1")
    redone = stub.BeginStep(
        pb.BeginStepRequest(
            attempt_id=again,
            tool="send_invoice",
            effect=NON_IDEMPOTENT,
            args_json='{"invoice":"i-9","at":"05:47"}',
            key="i-9",
        )
    )
    assert (redone.outcome, redone.step_id, redone.result_json) == (
        ALREADY,
        step.step_id,
        '"sent"',
    )


@pytest.mark.parametrize(
    "key", ["k" * 256, "é" * 128, "a\x00b"], ids=["256 bytes", "256 bytes of UTF-8", "NUL"]
)
def test_a_bad_key_is_refused_naming_it(sidecar: RunningSidecar, key: str) -> None:
    attempt = sidecar.begin("run-b")
    with pytest.raises(grpc.RpcError) as refused:
        sidecar.stub.Create(
            pb.CreateRequest(attempt_id=attempt, kind="order", data_json="{}", key=key)
        )
    r = refusal(refused.value)
    assert (r.code, r.reason, r.failure_class, r.fields) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_ARGUMENT",
        "REFUSED",
        ["key"],
    )


def test_a_run_of_version_2_refuses_a_key_and_keeps_its_ids(
    make_config: MakeConfig, tmp_path: Path
) -> None:
    before = make_config(tmp_path / "data", id_scheme=2)
    sc = start_sidecar(before)
    try:
        begun = sc.stub.BeginAttempt(pb.BeginAttemptRequest(run_id="run-2", rule="triage"))
        assert begun.id_scheme_version == 2
        made = sc.stub.Create(
            pb.CreateRequest(attempt_id=begun.attempt_id, kind="order", data_json=_order("05:40"))
        )
    finally:
        sc.stop()
    # The upgrade: new runs get version 3; this one keeps 2, its ids, and no keys.
    sc = start_sidecar(dataclasses.replace(before, id_scheme=3))
    try:
        retry = sc.stub.BeginAttempt(pb.BeginAttemptRequest(run_id="run-2", rule="triage"))
        assert retry.id_scheme_version == 2
        again = sc.stub.Create(
            pb.CreateRequest(attempt_id=retry.attempt_id, kind="order", data_json=_order("05:40"))
        )
        assert (again.outcome, again.id) == (ALREADY, made.id)
        with pytest.raises(grpc.RpcError) as refused:
            sc.stub.Create(
                pb.CreateRequest(
                    attempt_id=retry.attempt_id, kind="order", data_json="{}", key="o-1"
                )
            )
        r = refusal(refused.value)
        assert (r.reason, r.fields) == ("INVALID_ARGUMENT", ["key"])
        assert "scheme 2, which has no keys" in r.message
        assert "--id-scheme 3" in r.message
    finally:
        sc.stop()


def test_a_keyed_step_begun_again_in_its_attempt_is_that_step(sidecar: RunningSidecar) -> None:
    """The key names one step: begun again in the same attempt under the key, by a new
    request identity or by none, once it ended, it answers its result and is not sent
    again, as a redelivery's is; an unkeyed step would be a new one."""
    stub = sidecar.stub
    attempt = sidecar.begin("run-c", checkpoint="cp-1")

    def charge(request_id: str) -> pb.BeginStepResponse:
        begun: pb.BeginStepResponse = stub.BeginStep(
            pb.BeginStepRequest(attempt_id=attempt, tool="charge", effect=NON_IDEMPOTENT,
                                args_json='{"amount":5}', request_id=request_id, key="c-1")
        )  # fmt: skip
        return begun

    first = charge("r-1")
    assert first.outcome == APPLIED
    stub.EndStep(pb.EndStepRequest(attempt_id=attempt, step_id=first.step_id,
                                   result_json='{"charged":1}', request_id="e-1"))  # fmt: skip
    for request_id in ("r-2", ""):
        again = charge(request_id)
        assert (again.outcome, again.step_id, again.result_json) == (
            ALREADY,
            first.step_id,
            '{"charged":1}',
        ), request_id
    begins = [e for e in sidecar.audit("run-c") if e.event.phase == "step_begin"]
    assert [e.event.derived_id for e in begins] == [first.step_id]
