"""Graceful drain of a real `actonce serve` process on SIGTERM, with a slow call in flight."""

from __future__ import annotations

import contextlib
import itertools
import json
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc
from actonce_api.v1 import types_pb2
from actonce_client import ActonceError, Client
from grpc_status import rpc_status

from chaos.store_snapshot import read_sqlite_store
from sidecar.ledger.audit_command import open_reader
from sidecar.ledger.base import Phase
from tests.harness import begin, refusal, start_store
from tests.helpers.health import health_answer
from tests.server.processes import serve_draining, wait_for_status
from tests.server.stores import SlowCreates


def test_sigterm_lets_the_call_in_flight_finish_refuses_new_ones_and_exits_0(
    tmp_path: Path,
) -> None:
    slow = SlowCreates(delay=3.0)
    store = start_store(tmp_path / "store", interceptors=[slow])
    served, api, probes = serve_draining(tmp_path, store.target, grace=20)
    channel = grpc.insecure_channel(api)
    try:
        stub = pb_grpc.RunActionsServiceStub(channel)
        attempt = begin(stub, "run-drain", "triage", "c")
        in_flight = stub.Create.future(
            pb.CreateRequest(attempt_id=attempt, kind="ticket", data_json='{"a": 1}')
        )
        assert slow.reached.wait(10), "the write never reached the store"
        signalled = time.monotonic()
        served.process.send_signal(signal.SIGTERM)

        # Readiness becomes NOT_SERVING at once; liveness does not, or the kubelet would cut the drain.
        wait_for_status(probes, "NOT_SERVING", timeout=2)
        assert health_answer(probes, "liveness") == "SERVING"
        with pytest.raises(grpc.RpcError) as caught:
            stub.BeginAttempt(pb.BeginAttemptRequest(run_id="late", rule="triage", checkpoint="c"))
        late = refusal(caught.value)
        assert (late.code, late.reason, late.failure_class) == (
            grpc.StatusCode.UNAVAILABLE,
            "SHUTTING_DOWN",
            "RETRYABLE",
        )

        answer = in_flight.result(timeout=15)
        assert answer.outcome == types_pb2.OUTCOME_APPLIED
        assert served.process.wait(15) == 0, served.log()[-2000:]
        # It left as soon as the call finished, not at the end of the grace period.
        assert time.monotonic() - signalled < 10
    finally:
        channel.close()
        served.stop()

    # The ledger was flushed and closed: the write's outcome is durable after exit.
    reader = open_reader({"audit_dsn": None, "audit_db": tmp_path / "data" / "audit.db"})
    try:
        events = [stored.event for stored in reader.events(run_id="run-drain")]
    finally:
        reader.close()
    outcomes = [e for e in events if e.rpc == "Create" and e.phase == Phase.OUTCOME]
    assert [e.outcome for e in outcomes] == ["OUTCOME_APPLIED"]
    assert not [e for e in events if e.run_id == "late"]
    assert [a.id for a in store.backend.list_artifacts("ticket").artifacts] == [answer.id]
    store.stop()
    assert '"event": "draining_calls"' in served.log()


def test_a_call_still_running_when_the_grace_period_ends_is_refused_and_the_exit_is_0(
    tmp_path: Path,
) -> None:
    slow = SlowCreates(delay=30.0)
    store = start_store(tmp_path / "store", interceptors=[slow])
    served, api, _probes = serve_draining(tmp_path, store.target, grace=1)
    channel = grpc.insecure_channel(api)
    try:
        stub = pb_grpc.RunActionsServiceStub(channel)
        attempt = begin(stub, "run-cut", "triage", "c")
        in_flight = stub.Create.future(
            pb.CreateRequest(attempt_id=attempt, kind="ticket", data_json='{"a": 1}')
        )
        assert slow.reached.wait(10)
        signalled = time.monotonic()
        served.process.send_signal(signal.SIGTERM)

        assert served.process.wait(15) == 0, served.log()[-2000:]
        assert time.monotonic() - signalled < 8
        with pytest.raises(grpc.RpcError) as caught:
            in_flight.result(timeout=5)
        # Answered, not cancelled: a bare CANCELLED is a failure no client can classify.
        cut = refusal(caught.value)
        assert (cut.code, cut.reason, cut.failure_class) == (
            grpc.StatusCode.UNAVAILABLE,
            "SHUTTING_DOWN",
            "RETRYABLE",
        )
        assert '"event": "drain_grace_ran_out"' in served.log()
    finally:
        channel.close()
        served.stop()
        store.stop()


def test_agents_that_call_after_the_calls_in_flight_were_cut_are_refused_not_cancelled(
    tmp_path: Path,
) -> None:
    # The agent whose write was cut calls again, and agents that start only now make their
    # first call: the server still answers them SHUTTING_DOWN. Stopped at the cut, grpc's
    # server would cancel the calls it had just accepted (a bare CANCELLED) and refuse the
    # connections after them.
    slow = SlowCreates(delay=30.0)
    store = start_store(tmp_path / "store", interceptors=[slow])
    grace = 5.0
    served, api, _probes = serve_draining(tmp_path, store.target, grace=grace)
    channel = grpc.insecure_channel(api)
    try:
        stub = pb_grpc.RunActionsServiceStub(channel)
        attempt = stub.BeginAttempt(
            pb.BeginAttemptRequest(run_id="run-cut", rule="triage", checkpoint="c")
        ).attempt_id
        in_flight = stub.Create.future(
            pb.CreateRequest(attempt_id=attempt, kind="ticket", data_json='{"a": 1}')
        )
        assert slow.reached.wait(10)
        signalled = time.monotonic()
        served.process.send_signal(signal.SIGTERM)
        with pytest.raises(grpc.RpcError) as caught:
            in_flight.result(timeout=15)
        cut = time.monotonic()
        answers = [_failure(caught.value)]
        again = pb.BeginAttemptRequest(run_id="run-cut", rule="triage", checkpoint="c")
        with pytest.raises(grpc.RpcError) as caught:
            stub.BeginAttempt(again, timeout=10)
        answers.append(_failure(caught.value))
        for after_the_cut in (0.2, 0.5):
            time.sleep(max(0.0, cut + after_the_cut - time.monotonic()))
            with grpc.insecure_channel(api) as late_channel:
                late = pb_grpc.RunActionsServiceStub(late_channel)
                first = pb.BeginAttemptRequest(run_id="late", rule="triage", checkpoint="c")
                with pytest.raises(grpc.RpcError) as caught:
                    late.BeginAttempt(first, timeout=10)
                answers.append(_failure(caught.value))
        assert served.process.wait(grace + 10) == 0, served.log()[-2000:]
        # Within the grace, and a little more for the interpreter to exit.
        assert time.monotonic() - signalled < grace + 2.5
        # The cut write waited on the store, yet everything was closed with part of the
        # grace left for the process to exit in.
        closed = [e for e in _events(served.log()) if e.get("event") == "closed"]
        assert len(closed) == 1 and closed[0]["seconds"] <= grace - 0.25, closed
    finally:
        channel.close()
        served.stop()
        store.stop()
    assert answers == [(grpc.StatusCode.UNAVAILABLE, "SHUTTING_DOWN", "RETRYABLE")] * 4
    assert '"event": "drain_grace_ran_out"' in served.log()


def _failure(error: grpc.RpcError) -> tuple[grpc.StatusCode, str, str]:
    """A failed call's code, reason and class; a bare status (no ErrorInfo) has neither."""
    if rpc_status.from_call(error) is None:  # type: ignore[arg-type]
        return error.code(), "", ""
    answer = refusal(error)
    return answer.code, answer.reason, answer.failure_class


def test_sigterm_with_nothing_in_flight_exits_0_at_once(tmp_path: Path) -> None:
    store = start_store(tmp_path / "store")
    served, _api, _probes = serve_draining(tmp_path, store.target, grace=30)
    try:
        signalled = time.monotonic()
        served.process.send_signal(signal.SIGTERM)
        assert served.process.wait(15) == 0, served.log()[-2000:]
        assert time.monotonic() - signalled < 5
    finally:
        served.stop()
        store.stop()


@dataclass
class Agent:
    """An agent on the Python client that runs runs back to back until a call fails."""

    client: Client
    name: str
    acknowledged: list[str] = field(default_factory=list)
    failure: ActonceError | None = None
    thread: threading.Thread = field(init=False)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._work, daemon=True)
        self.thread.start()

    def _work(self) -> None:
        try:
            for run in itertools.count():
                attempt = self.client.begin(f"{self.name}-{run}", "triage", checkpoint="c")
                for n in range(3):
                    written = attempt.create("ticket", {"agent": self.name, "run": run, "n": n})
                    self.acknowledged.append(written.id)
                attempt.end()
        except ActonceError as error:
            self.failure = error


@pytest.mark.parametrize("delay", [0.05, 30.0], ids=["store-answers", "store-outlasts-grace"])
def test_under_load_every_call_is_answered_or_refused_shutting_down_never_cancelled(
    tmp_path: Path, delay: float
) -> None:
    slow = SlowCreates(delay=delay)
    store = start_store(tmp_path / "store", interceptors=[slow])
    grace = 3.0
    served, api, _probes = serve_draining(tmp_path, store.target, grace=grace)
    client = Client(api, timeout=30)
    agents = [Agent(client, f"agent{i}") for i in range(12)]
    try:
        assert slow.reached.wait(10), "no write reached the store"
        time.sleep(1.0)  # under load: every agent has a call in flight or about to start one
        signalled = time.monotonic()
        served.process.send_signal(signal.SIGTERM)
        assert served.process.wait(grace + 10) == 0, served.log()[-2000:]
        exited = time.monotonic() - signalled
        for agent in agents:
            agent.thread.join(30)
    finally:
        client.close()
        served.stop()
    # Each agent called until its first failure, and that failure is the drain's refusal; or,
    # for an agent silent past the quiet period (starved of CPU) that called after the
    # listener had closed, no listener: UNAVAILABLE without ErrorInfo, RETRYABLE. Never a
    # bare CANCELLED, nor anything a client would not retry.
    failures = [
        (a.failure.code, a.failure.reason, str(a.failure.failure_class)) if a.failure else None
        for a in agents
    ]
    refused = (grpc.StatusCode.UNAVAILABLE, "SHUTTING_DOWN", "RETRYABLE")
    no_listener = (grpc.StatusCode.UNAVAILABLE, "UNAVAILABLE", "RETRYABLE")
    assert set(failures) <= {refused, no_listener}, failures
    assert failures.count(refused) >= len(agents) * 2 // 3, failures
    if delay < grace:
        # It stopped serving only once its callers had gone quiet (with a slower store the
        # calls' time can run out first: those still calling then were refused all the same).
        assert "drain_callers_still_calling" not in served.log()
    # Within the grace, and a little more for closing.
    assert exited < grace + 2.5, exited
    # Every acknowledged write is in the ledger and in the store.
    acknowledged = {written for a in agents for written in a.acknowledged}
    if delay < grace:
        assert acknowledged, "no write was acknowledged before the drain"
    reader = open_reader({"audit_dsn": None, "audit_db": tmp_path / "data" / "audit.db"})
    try:
        audited = {
            e.event.derived_id
            for e in reader.events()
            if e.event.phase == Phase.OUTCOME and e.event.outcome == "OUTCOME_APPLIED"
        }
    finally:
        reader.close()
    store.stop()
    stored = set(read_sqlite_store(tmp_path / "store" / "store.db").artifacts)
    assert acknowledged <= audited
    assert acknowledged <= stored


def _events(log: str) -> list[dict[str, Any]]:
    """The sidecar's JSON log lines, as events (other lines, a traceback say, skipped)."""
    events = []
    for line in log.splitlines():
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                events.append(json.loads(line))
    return events
