"""A caller that gives up mid-write, over real gRPC: its repeat gets the write's answer.

The write is held at a chosen point with a real hazard: the store holds the write until
the test locks the ledger, so that the write lands and its outcome audit waits for the
ledger while the caller's deadline passes. On the ledger's backend (SQLite, PostgreSQL).
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import types_pb2
from google.protobuf import timestamp_pb2

from tests.conftest import MakeConfig
from tests.harness import RunningSidecar, RunningStore, refusal, start_sidecar, start_store
from tests.helpers.locks import ledger_locked

_WRITES = ("/CreateArtifact", "/PatchArtifact", "/CreateProposal", "/CreateThread",
           "/PostMessage")  # fmt: skip


class HeldWrites(grpc.aio.ServerInterceptor):
    """Holds each write that reaches the store until the test lets it go on."""

    def __init__(self) -> None:
        self.arrived = threading.Event()
        self.go_on = threading.Event()

    async def intercept_service(self, continuation: Callable[[Any], Any], details: Any) -> Any:
        if details.method.endswith(_WRITES):
            self.arrived.set()
            await asyncio.to_thread(self.go_on.wait, 30)
        return await continuation(details)

    def reset(self) -> None:
        self.arrived.clear()
        self.go_on.clear()


@pytest.fixture
def held(
    make_config: MakeConfig, tmp_path: Path
) -> Iterator[tuple[RunningSidecar, RunningStore, HeldWrites]]:
    holding = HeldWrites()
    store = start_store(tmp_path / "store", interceptors=[holding])
    sc = start_sidecar(
        make_config(tmp_path / "sidecar", store_target=store.target,
                    send_allowlist=frozenset({"pager"}))
    )  # fmt: skip
    try:
        yield sc, store, holding
    finally:
        holding.go_on.set()
        sc.stop()
        store.stop()


def _cut_off_in_its_outcome_audit(
    sc: RunningSidecar, holding: HeldWrites, call: Any, request: Any, how: str
) -> None:
    """Call; the write lands while the ledger is locked, and the caller gives up while
    its outcome audit waits for the ledger: its deadline passes, or it cancels."""
    holding.reset()
    future = call.future(request, timeout=1.0 if how == "deadline" else 30)
    assert holding.arrived.wait(10)
    with ledger_locked(sc.config):
        holding.go_on.set()
        if how == "cancel":
            time.sleep(0.5)  # the write lands, and its outcome audit waits for the ledger
            assert future.cancel()
        with pytest.raises((grpc.RpcError, grpc.FutureCancelledError)) as cut:
            future.result()
        if how == "deadline":
            assert isinstance(cut.value, grpc.RpcError)
            assert cut.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


def _ticket(store: RunningStore) -> None:
    store.backend.create_artifact("art-1", "ticket", '{"title": "a"}')


CASES: dict[str, Callable[[RunningStore, str, str], tuple[str, Any]]] = {
    "create": lambda store, attempt, rid: ("Create", pb.CreateRequest(
        attempt_id=attempt, kind="ticket", data_json='{"n": 1}', request_id=rid)),
    "create by proposal": lambda store, attempt, rid: ("Create", pb.CreateRequest(
        attempt_id=attempt, kind="ticket", data_json='{"n": 1}', propose=True, request_id=rid)),
    "edit": lambda store, attempt, rid: ("Edit", pb.EditRequest(
        attempt_id=attempt, artifact_id="art-1", path="/title", value_json='"b"',
        request_id=rid)),
    "edit by proposal": lambda store, attempt, rid: ("Edit", pb.EditRequest(
        attempt_id=attempt, artifact_id="art-1", path="/title", value_json='"b"', propose=True,
        request_id=rid)),
    "thread": lambda store, attempt, rid: ("CreateThread", pb.CreateThreadRequest(
        attempt_id=attempt, title="incident", request_id=rid)),
    "notice": lambda store, attempt, rid: ("Notice", pb.NoticeRequest(
        attempt_id=attempt, thread_id="thr-1", text="looked", request_id=rid)),
    "send": lambda store, attempt, rid: ("Send", pb.SendRequest(
        attempt_id=attempt, thread_id="thr-1", text="your turn", request_id=rid)),
}  # fmt: skip


def _holdings(store: RunningStore) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the store's database, table by table."""
    db = sqlite3.connect(f"file:{store.data_dir / 'store.db'}?mode=ro", uri=True)
    try:
        return {
            table: sorted(db.execute(f"SELECT * FROM {table}").fetchall())
            for table in ("artifacts", "proposals", "threads", "messages", "turn_requests")
        }
    finally:
        db.close()


def _named(answer: Any) -> set[str]:
    fields = ("id", "thread_id", "message_id", "proposal_id")
    return {getattr(answer, f) for f in fields if hasattr(answer, f)} - {""}


@pytest.mark.parametrize(
    ("case", "how"),
    [(case, "deadline") for case in sorted(CASES)]
    + [(case, "cancel") for case in ("create", "edit", "send")],
)
def test_a_write_whose_caller_gave_up_in_its_outcome_audit_lands_once(
    held: tuple[RunningSidecar, RunningStore, HeldWrites], case: str, how: str
) -> None:
    sc, store, holding = held
    _ticket(store)
    store.backend.create_thread("thr-1", "triage")
    before = _holdings(store)
    attempt = sc.begin(run_id="run-1", rule="pager")
    rpc, request = CASES[case](store, attempt, "q")
    call = getattr(sc.stub, rpc)
    _cut_off_in_its_outcome_audit(sc, holding, call, request, how)
    # The repeat with the request_id gets the write's answer: the write it was.
    holding.go_on.set()
    answer = call(request, timeout=10)
    assert answer.outcome in (types_pb2.OUTCOME_APPLIED, types_pb2.OUTCOME_ALREADY_APPLIED)
    landed = _holdings(store)
    # One write made one thing: one row more, or one version more of the artifact.
    added = sum(len(landed[t]) - len(before[t]) for t in landed if t != "turn_requests")
    versions = [row[2] for row in landed["artifacts"] if row[0] == "art-1"]
    assert (added, versions) in ((1, [1]), (0, [2])), (added, versions)
    # The run's next attempt finds it made, and makes nothing more.
    retry = sc.begin(run_id="run-1", rule="pager")
    _rpc, again = CASES[case](store, retry, "q")
    assert call(again, timeout=10).outcome != types_pb2.OUTCOME_APPLIED
    assert _holdings(store) == landed
    # The answer names what the store holds; the ledger has an intent for all it made.
    held_ids = {row[0] for rows in landed.values() for row in rows if isinstance(row[0], str)}
    assert _named(answer) <= held_ids
    made = held_ids - {row[0] for rows in before.values() for row in rows}
    intents = {e.event.derived_id for e in sc.audit("run-1") if e.event.phase == "intent"}
    assert made <= intents


def test_two_concurrent_ends_of_one_step_append_once_and_count_once(
    held: tuple[RunningSidecar, RunningStore, HeldWrites],
) -> None:
    sc, _store, _holding = held
    attempt = sc.begin(run_id="run-steps")
    step = sc.stub.BeginStep(
        pb.BeginStepRequest(attempt_id=attempt, tool="pay", args_json="{}",
                            effect=types_pb2.TOOL_EFFECT_NON_IDEMPOTENT_WRITE)
    )  # fmt: skip
    ends = [
        pb.EndStepRequest(attempt_id=attempt, step_id=step.step_id, result_json='{"ok": 1}',
                          request_id=rid)
        for rid in ("e1", "e2", "e1")
    ]  # fmt: skip
    with ledger_locked(sc.config):
        futures = [sc.stub.EndStep.future(end, timeout=30) for end in ends]
        time.sleep(0.5)  # all three reach the sidecar and wait for the ledger
    outcomes = [future.result().outcome for future in futures]
    # The first of e1 and e2 ends the step; the other is told it had ended; the
    # repeat of e1 gets e1's answer.
    assert outcomes[0] == outcomes[2]
    assert sorted(outcomes[:2]) == sorted(
        [types_pb2.OUTCOME_APPLIED, types_pb2.OUTCOME_ALREADY_APPLIED]
    )
    step_ends = [e for e in sc.audit("run-steps") if e.event.phase == "step_end"]
    assert len(step_ends) == 1
    counts = sc.stub.EndAttempt(pb.EndAttemptRequest(attempt_id=attempt))
    assert counts.applied == 1  # the step, once: its end is not another write


def test_a_write_whose_lease_ran_out_while_its_intent_waited_does_not_call_the_store(
    make_config: MakeConfig, tmp_path: Path
) -> None:
    sc = start_sidecar(make_config(tmp_path / "data", store_timeout_seconds=1.0))
    try:
        lease = timestamp_pb2.Timestamp()
        lease.FromDatetime(datetime.now(UTC) + timedelta(seconds=2.5))
        attempt = sc.stub.BeginAttempt(
            pb.BeginAttemptRequest(run_id="run-lease", rule="triage", checkpoint="c",
                                   lease_deadline=lease)
        ).attempt_id  # fmt: skip
        request = pb.CreateRequest(attempt_id=attempt, kind="leased", data_json="{}")
        with ledger_locked(sc.config):
            future = sc.stub.Create.future(request, timeout=30)
            time.sleep(2.0)  # the intent waits for the ledger while the lease runs out
        with pytest.raises(grpc.RpcError) as refused:
            future.result()
        got = refusal(refused.value)
        assert (got.reason, got.failure_class) == ("LEASE_EXPIRED", "RETRYABLE")
        # Refused before the store: the store holds nothing. Where the intent commits on
        # its own, it was written first; where intent, row and outcome are one commit (a
        # data folder of one file), the lease is checked where that commit runs, once the
        # file is free, and nothing at all was written.
        phases = [e.event.phase for e in sc.audit("run-lease") if e.event.rpc == "Create"]
        assert phases[:1] == ([] if sc.config.one_file else ["intent"])
        assert sc.artifacts("leased") == []
    finally:
        sc.stop()
