"""Prometheus metrics, scraped over HTTP from a real sidecar after real calls."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Never
from unittest.mock import create_autospec

import grpc
import pytest
import structlog.testing
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import types_pb2

from sidecar.fronts.grpc.interceptors import ForwardingContext, Handler, behavior_of
from tests.harness import (
    RunningSidecar,
    RunningStore,
    refusal,
    sidecar_config,
    start_sidecar,
    start_store,
)
from tests.helpers.locks import ledger_locked
from tests.server.scrape import scrape, value
from tests.server.stores import ConcurrentWriter, SlowCreates


def metrics_port(running: RunningSidecar) -> int:
    endpoint = running.sidecar.metrics_endpoint
    assert endpoint is not None, "the sidecar serves no metrics"
    return endpoint.port


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[RunningSidecar]:
    running = start_sidecar(sidecar_config(tmp_path / "data", metrics_listen="127.0.0.1:0"))
    try:
        yield running
    finally:
        running.stop()


@contextlib.contextmanager
def metered_sidecar(
    tmp_path: Path, *in_the_way: grpc.aio.ServerInterceptor
) -> Iterator[tuple[RunningStore, RunningSidecar]]:
    """A sidecar serving its metrics, before a store with ``in_the_way`` put in its way."""
    store = start_store(tmp_path / "store", interceptors=in_the_way)
    sc = start_sidecar(
        sidecar_config(tmp_path / "data", store_target=store.target, metrics_listen="127.0.0.1:0")
    )
    try:
        yield store, sc
    finally:
        sc.stop()
        store.stop()


def create(sc: RunningSidecar, attempt: str, data: Any) -> Any:
    return sc.stub.Create(
        pb.CreateRequest(attempt_id=attempt, kind="ticket", data_json=json.dumps(data))
    )


def test_writes_are_counted_by_rpc_and_outcome(sidecar: RunningSidecar) -> None:
    first = create(sidecar, sidecar.begin("r", checkpoint="c"), {"a": 1})
    retried = sidecar.begin("r", checkpoint="c")
    again = create(sidecar, retried, {"a": 1})
    assert again.outcome == types_pb2.OUTCOME_ALREADY_APPLIED
    sidecar.stub.Edit(
        pb.EditRequest(attempt_id=retried, artifact_id=first.id, path="/a", value_json="1")
    )
    sidecar.stub.Edit(
        pb.EditRequest(attempt_id=retried, artifact_id=first.id, path="/b", value_json="2")
    )

    samples = scrape(metrics_port(sidecar))

    assert value(samples, "actonce_writes_total", rpc="Create", outcome="applied") == 1
    assert value(samples, "actonce_writes_total", rpc="Create", outcome="already_applied") == 1
    assert value(samples, "actonce_writes_total", rpc="Edit", outcome="skipped") == 1
    assert value(samples, "actonce_writes_total", rpc="Edit", outcome="applied") == 1
    # BeginAttempt answers no Outcome: it is not a write.
    assert not any(
        name == "actonce_writes_total" and ("rpc", "BeginAttempt") in labels
        for name, labels in samples
    )


def test_refusals_are_counted_by_reason_and_failure_class(sidecar: RunningSidecar) -> None:
    attempt = sidecar.begin()
    with pytest.raises(grpc.RpcError):
        sidecar.stub.Create(pb.CreateRequest(attempt_id=attempt, kind="ticket", data_json="{"))
    with pytest.raises(grpc.RpcError):
        sidecar.stub.Create(pb.CreateRequest(attempt_id="att_unknown", kind="t", data_json="{}"))

    samples = scrape(metrics_port(sidecar))

    assert (
        value(
            samples,
            "actonce_refusals_total",
            rpc="Create",
            reason="INVALID_ARGUMENT",
            failure_class="REFUSED",
        )
        == 1
    )
    assert (
        value(
            samples,
            "actonce_refusals_total",
            rpc="Create",
            reason="UNKNOWN_ATTEMPT",
            failure_class="RETRYABLE",
        )
        == 1
    )
    assert value(samples, "actonce_writes_total", rpc="Create", outcome="failed") == 2
    count = "actonce_request_seconds_count"
    assert value(samples, count, rpc="Create", code="INVALID_ARGUMENT") == 1
    assert value(samples, count, rpc="Create", code="FAILED_PRECONDITION") == 1


def test_store_calls_are_timed_by_operation_and_result(sidecar: RunningSidecar) -> None:
    create(sidecar, sidecar.begin("r", checkpoint="c"), {"a": 1})
    create(sidecar, sidecar.begin("r", checkpoint="c"), {"a": 1})  # the store refuses the used id

    samples = scrape(metrics_port(sidecar))

    count = "actonce_store_call_seconds_count"
    assert value(samples, count, operation="create_artifact", result="ok") == 1
    assert value(samples, count, operation="create_artifact", result="INVALID_STATE") == 1
    assert (
        value(samples, "actonce_store_call_seconds_sum", operation="create_artifact", result="ok")
        > 0
    )


@pytest.mark.parametrize("files", ["one file", "two files"])
def test_a_write_refused_before_the_store_makes_no_store_call(tmp_path: Path, files: str) -> None:
    data = tmp_path / "data"
    if files == "two files":  # a folder made before the store moved into the ledger's file
        data.mkdir(mode=0o700)
        (data / "store.db").touch(mode=0o600)
    sc = start_sidecar(sidecar_config(data, metrics_listen="127.0.0.1:0"))
    try:
        fenced = sc.begin("run-fenced", checkpoint="c")
        sc.begin("run-fenced", checkpoint="c")  # a newer attempt of the run fences the first
        with pytest.raises(grpc.RpcError) as refused:
            create(sc, fenced, {"a": 1})
        assert refusal(refused.value).reason == "ATTEMPT_FENCED"
        create(sc, sc.begin("run-other", checkpoint="c"), {"a": 1})
        samples = scrape(metrics_port(sc))
    finally:
        sc.stop()
    count = "actonce_store_call_seconds_count"
    assert value(samples, count, operation="create_artifact", result="ok") == 1
    assert value(samples, count, operation="create_artifact", result="error") == 0


def test_audit_appends_are_timed_and_their_failures_counted(tmp_path: Path) -> None:
    config = sidecar_config(
        tmp_path / "data", metrics_listen="127.0.0.1:0", audit_busy_timeout_ms=200
    )
    sc = start_sidecar(config)
    try:
        attempt = sc.begin()
        create(sc, attempt, {"a": 1})
        before = scrape(metrics_port(sc))
        # BeginAttempt, then the write's intent and outcome: three durable events.
        assert value(before, "actonce_audit_append_seconds_count") == 3
        assert value(before, "actonce_audit_append_failures_total") == 0
        assert value(before, "actonce_audit_commit_events_count") >= 1

        with ledger_locked(config), pytest.raises(grpc.RpcError) as caught:
            create(sc, attempt, {"a": 2})
        assert refusal(caught.value).reason == "AUDIT_PERSISTENCE_FAILED"

        after = scrape(metrics_port(sc))
        assert value(after, "actonce_audit_append_failures_total") >= 1
        labels = {"rpc": "Create", "reason": "AUDIT_PERSISTENCE_FAILED", "failure_class": "UNKNOWN"}
        assert value(after, "actonce_refusals_total", **labels) == 1
    finally:
        sc.stop()


@pytest.mark.parametrize(("conflicts", "rereads"), [(2, 2), (4, 3)])
def test_version_conflict_rereads_are_counted(tmp_path: Path, conflicts: int, rereads: int) -> None:
    holder: list[RunningStore] = []
    with metered_sidecar(tmp_path, ConcurrentWriter(holder, conflicts)) as (store, sc):
        holder.append(store)
        artifact = create(sc, sc.begin(), {"hot": 0})
        edit = pb.EditRequest(
            attempt_id=sc.begin(), artifact_id=artifact.id, path="/mine", value_json="1"
        )
        if conflicts <= 3:
            assert sc.stub.Edit(edit).outcome == types_pb2.OUTCOME_APPLIED
        else:
            with pytest.raises(grpc.RpcError) as caught:
                sc.stub.Edit(edit)
            assert refusal(caught.value).reason == "VERSION_CONFLICT"

        samples = scrape(metrics_port(sc))
        assert value(samples, "actonce_version_conflict_rereads_total") == rereads
        count = "actonce_store_call_seconds_count"
        assert (
            value(samples, count, operation="patch_artifact", result="VERSION_CONFLICT")
            == conflicts
        )


def test_in_flight_requests_rise_during_a_call_and_fall_after(tmp_path: Path) -> None:
    slow = SlowCreates(delay=1.5)
    with metered_sidecar(tmp_path, slow) as (_store, sc):
        attempt = sc.begin()
        answers: list[Any] = []
        call = threading.Thread(target=lambda: answers.append(create(sc, attempt, {"a": 1})))
        call.start()
        assert slow.reached.wait(10)
        during = scrape(metrics_port(sc))
        call.join(10)
        after = scrape(metrics_port(sc))

        assert value(during, "actonce_in_flight_requests", rpc="Create") == 1
        assert value(after, "actonce_in_flight_requests", rpc="Create") == 0
        assert answers and answers[0].outcome == types_pb2.OUTCOME_APPLIED
        # The slow call shows in the latency histogram's upper buckets, not the lower.
        bucket = "actonce_request_seconds_bucket"
        assert value(after, bucket, rpc="Create", code="OK", le="1.0") == 0
        assert value(after, bucket, rpc="Create", code="OK", le="2.5") == 1


def test_every_metric_is_prefixed_and_the_unlabelled_ones_show_from_the_start(
    sidecar: RunningSidecar,
) -> None:
    samples = scrape(metrics_port(sidecar))
    names = {name for name, _labels in samples}
    assert names, "nothing scraped"
    # Ours, and the process collector's standard process_* (which dashboards expect as named).
    assert all(name.startswith(("actonce_", "process_")) for name in names), sorted(names)
    assert {"process_cpu_seconds_total", "process_resident_memory_bytes"} <= names
    assert not [name for name in names if name.endswith("_created")], sorted(names)
    # Labelled series appear with their first call; these have no labels, so a
    # dashboard sees them (at 0) before anything happened.
    for wanted in (
        "actonce_audit_append_seconds_count",
        "actonce_audit_append_failures_total",
        "actonce_audit_commit_seconds_count",
        "actonce_version_conflict_rereads_total",
        "actonce_draining",
    ):
        assert wanted in names, wanted
    assert value(samples, "actonce_draining") == 0


def test_metrics_stay_off_unless_asked(tmp_path: Path) -> None:
    sc = start_sidecar(sidecar_config(tmp_path / "data"))
    try:
        assert sc.sidecar.metrics_endpoint is None
    finally:
        sc.stop()


def test_each_sidecar_counts_only_its_own_calls(tmp_path: Path) -> None:
    one = start_sidecar(sidecar_config(tmp_path / "one", metrics_listen="127.0.0.1:0"))
    two = start_sidecar(sidecar_config(tmp_path / "two", metrics_listen="127.0.0.1:0"))
    try:
        create(one, one.begin(), {"a": 1})
        assert (
            value(
                scrape(metrics_port(one)), "actonce_writes_total", rpc="Create", outcome="applied"
            )
            == 1
        )
        assert (
            value(
                scrape(metrics_port(two)), "actonce_writes_total", rpc="Create", outcome="applied"
            )
            == 0
        )
    finally:
        one.stop()
        two.stop()


def test_a_call_the_agent_cancels_is_counted_as_cancelled_not_refused(tmp_path: Path) -> None:
    slow = SlowCreates(delay=2.0)
    with metered_sidecar(tmp_path, slow) as (_store, sc):
        call = sc.stub.Create.future(
            pb.CreateRequest(attempt_id=sc.begin(), kind="ticket", data_json="{}")
        )
        assert slow.reached.wait(10)
        call.cancel()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            samples = scrape(metrics_port(sc))
            if value(samples, "actonce_in_flight_requests", rpc="Create") == 0:
                break
            time.sleep(0.05)
        assert value(samples, "actonce_writes_total", rpc="Create", outcome="cancelled") == 1
        assert value(samples, "actonce_writes_total", rpc="Create", outcome="failed") == 0
        assert not any(name == "actonce_refusals_total" for name, _labels in samples)


def test_a_refusal_is_counted_before_its_status_is_sent() -> None:
    # An abort sends the status to the caller and only then raises: the caller can scrape
    # before the exception gets back to the interceptor. So the count must already be there
    # when the handler's abort begins to send.
    import asyncio

    from sidecar.assembly.instruments import MetricsInterceptor
    from sidecar.errors import UnknownAttempt
    from sidecar.fronts.grpc.status import to_grpc_status
    from sidecar.ops.metrics import Metrics

    metrics = Metrics()
    seen_when_sent: list[float] = []

    def refusals() -> float:
        got = metrics.registry.get_sample_value(
            "actonce_refusals_total",
            {"rpc": "Create", "reason": "UNKNOWN_ATTEMPT", "failure_class": "RETRYABLE"},
        )
        return got or 0.0

    class SendingContext(ForwardingContext):
        """Stands in for grpc's context: its abort is where the caller would get the status.
        Nothing else of it is called."""

        def __init__(self) -> None:
            super().__init__(create_autospec(grpc.aio.ServicerContext, instance=True))

        async def abort_with_status(self, status: grpc.Status) -> Never:
            seen_when_sent.append(refusals())
            raise grpc.aio.AbortError("sent")

    async def refuse(request: Any, context: Any) -> Any:
        await context.abort_with_status(to_grpc_status(UnknownAttempt("att_x")))

    async def continuation(details: grpc.HandlerCallDetails) -> Handler:
        return grpc.unary_unary_rpc_method_handler(refuse)

    class Details(grpc.HandlerCallDetails):
        method = "/actonce.v1.RunActionsService/Create"
        invocation_metadata = ()

    async def call() -> None:
        handler = await MetricsInterceptor(metrics).intercept_service(continuation, Details())
        with pytest.raises(grpc.aio.AbortError):
            assert handler is not None
            await behavior_of(handler)(pb.CreateRequest(), SendingContext())

    asyncio.run(call())

    assert seen_when_sent == [1.0]
    assert refusals() == 1.0  # and counted once, not again as the abort passed by
    assert (
        metrics.registry.get_sample_value(
            "actonce_writes_total", {"rpc": "Create", "outcome": "failed"}
        )
        == 1.0
    )


def test_an_attempt_forgotten_under_pressure_is_counted_logged_and_unknown(
    tmp_path: Path,
) -> None:
    sc = start_sidecar(
        sidecar_config(tmp_path / "data", metrics_listen="127.0.0.1:0", attempt_max_count=2)
    )
    try:
        with structlog.testing.capture_logs() as logs:
            first = sc.begin("run-first")
            sc.begin("run-second")
            sc.begin("run-third")
        with pytest.raises(grpc.RpcError) as caught:
            create(sc, first, {"a": 1})
        got = refusal(caught.value)
        assert (got.reason, got.failure_class) == ("UNKNOWN_ATTEMPT", "RETRYABLE")
        samples = scrape(metrics_port(sc))
        assert value(samples, "actonce_attempts_forgotten_total", reason="pressure") == 1
        assert value(samples, "actonce_live_attempts") == 2
        (line,) = [e for e in logs if e["event"] == "attempt_forgotten_under_pressure"]
        assert (line["run_id"], line["forgotten_attempt_id"]) == ("run-first", first)
    finally:
        sc.stop()
