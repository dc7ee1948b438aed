"""Prometheus metrics of the sidecar, and the hooks that feed them.

Nothing here is called from a handler or a rule. Every number comes from one of
the places that sit around the domain code, or from the core's own word:

- :class:`MetricsInterceptor`, around every RunActionsService call: writes by RPC
  and outcome, refusals by reason and failure class, calls in flight, call latency.
- :func:`instrument_ledger`, around the audit ledger: append latency and failures
  (and, through the group-commit hooks, commit latency and batch size).
- :func:`instrument_store`, around the store client: store call latency by
  operation and result;
- the core, which tells of each re-read an edit makes after a VERSION_CONFLICT
  (``RunActions(on_reread=...)``, fed to ``version_conflict_rereads``).

Each sidecar has its own registry, so that several in one process (tests) do not
share counters; :class:`MetricsEndpoint` serves it as Prometheus text over HTTP.

Longer than most modules, on purpose: every metric is declared in one place, and
the timed ledger and store spell out each method of the interfaces they wrap, so
that the type checker sees them keep those interfaces.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Never, TypeVar

import grpc
import structlog
from actonce_api.v1 import types_pb2
from google.rpc import error_details_pb2, status_pb2
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.exposition import start_http_server

from sidecar.errors import ActonceError, StoreDeadlineExceeded, StoreUnavailable
from sidecar.fronts.grpc.interceptors import (
    RUN_ACTIONS,
    Behavior,
    Context,
    ForwardingContext,
    Handler,
    Metadata,
    RunActionsInterceptor,
    behavior_of,
)
from sidecar.ledger.base import AuditEvent, AuditLedger, FencedError, LedgerError, WrappedLedger
from sidecar.upstream.base import Refusal, Settle, StoreClient, StoreWrite, WrappedStore, nothing

log = structlog.get_logger()

_T = TypeVar("_T")
_R = TypeVar("_R")

NAMESPACE = "actonce"

# A `_created` gauge beside every counter and histogram doubles the series a scrape stores,
# and nothing here reads it: rate() and increase() already handle a restart. (The function
# has no annotations in prometheus_client.)
disable_created_metrics()  # type: ignore[no-untyped-call]

# A write is any RPC whose answer carries an Outcome; read from the descriptor so
# that a write RPC added to the proto is counted without a change here.
WRITE_RPCS: frozenset[str] = frozenset(
    method.name for method in RUN_ACTIONS.methods if "outcome" in method.output_type.fields_by_name
)

# Local disk and a LAN database: most appends take well under 100 ms, and a slow
# one (a saturated disk, a locked ledger) is what the upper buckets are for.
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


class Metrics:
    """The sidecar's metrics, in a registry of their own."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        # process_* (CPU, resident memory, open files, start time) of this process, as every
        # Prometheus client exports them, so the usual dashboards and alerts apply.
        ProcessCollector(registry=r)
        self.writes = Counter(
            "writes", "Writes answered, by RPC and outcome (applied, already_applied, "
            "skipped; failed when refused, cancelled when the call was cut off).",
            ["rpc", "outcome"], namespace=NAMESPACE, registry=r,
        )  # fmt: skip
        self.refusals = Counter(
            "refusals", "Calls refused, by RPC, ErrorInfo reason and failure class.",
            ["rpc", "reason", "failure_class"], namespace=NAMESPACE, registry=r,
        )  # fmt: skip
        self.in_flight = Gauge(
            "in_flight_requests", "RunActionsService calls being handled now, by RPC.",
            ["rpc"], namespace=NAMESPACE, registry=r,
        )  # fmt: skip
        self.request_seconds = Histogram(
            "request_seconds", "Time to answer a RunActionsService call, by RPC and status code.",
            ["rpc", "code"], namespace=NAMESPACE, registry=r, buckets=_LATENCY_BUCKETS,
        )  # fmt: skip
        self.audit_append_seconds = Histogram(
            "audit_append_seconds", "Time until an audit event was durable (or failed), "
            "as the write waiting for it saw it.",
            namespace=NAMESPACE, registry=r, buckets=_LATENCY_BUCKETS,
        )  # fmt: skip
        self.audit_append_failures = Counter(
            "audit_append_failures", "Audit events the ledger could not make durable.",
            namespace=NAMESPACE, registry=r,
        )  # fmt: skip
        self.audit_commit_seconds = Histogram(
            "audit_commit_seconds", "Time of one group commit of the ledger.",
            namespace=NAMESPACE, registry=r, buckets=_LATENCY_BUCKETS,
        )  # fmt: skip
        self.audit_commit_events = Histogram(
            "audit_commit_events", "Audit events written by one group commit.",
            namespace=NAMESPACE, registry=r, buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
        )  # fmt: skip
        self.store_call_seconds = Histogram(
            "store_call_seconds", "Time of a call to the artifact store, by operation (the "
            "store client's method) and result (ok, the store's refusal code, unavailable, "
            "deadline_exceeded).",
            ["operation", "result"], namespace=NAMESPACE, registry=r, buckets=_LATENCY_BUCKETS,
        )  # fmt: skip
        self.version_conflict_rereads = Counter(
            "version_conflict_rereads", "Re-reads of an artifact after the store refused an "
            "edit with VERSION_CONFLICT.",
            namespace=NAMESPACE, registry=r,
        )  # fmt: skip
        self.attempts_forgotten = Counter(
            "attempts_forgotten", "Attempts forgotten before they ended, by why: idle past "
            "--attempt-idle-ttl, or pressure (past --attempt-max-count or --attempt-max-mib). "
            "Their later calls get UNKNOWN_ATTEMPT.",
            ["reason"], namespace=NAMESPACE, registry=r,
        )  # fmt: skip
        self.live_attempts = Gauge(
            "live_attempts", "Attempts this sidecar holds in memory.",
            namespace=NAMESPACE, registry=r,
        )  # fmt: skip
        self.front_calls = Counter(
            "front_calls", "Calls answered, by the front they came through (grpc, mcp), "
            "RPC (or gateway tool) and outcome (applied, already_applied, skipped; ok for a "
            "read; failed when refused).",
            ["front", "rpc", "outcome"], namespace=NAMESPACE, registry=r,
        )  # fmt: skip
        self.draining = Gauge(
            "draining", "1 once SIGTERM was received and the sidecar takes no new calls.",
            namespace=NAMESPACE, registry=r,
        )  # fmt: skip
        # Set only when the sidecar traces (sidecar.ops.tracing): the latency histograms
        # then carry the current trace as an exemplar, seen when scraped as OpenMetrics.
        self.exemplar: Callable[[], dict[str, str] | None] | None = None

    def observe(self, histogram: Histogram, seconds: float) -> None:
        """``seconds`` into ``histogram`` (a child with its labels), with the trace's
        exemplar when the sidecar traces."""
        exemplar = self.exemplar
        histogram.observe(seconds, exemplar() if exemplar is not None else None)

    def front_call(self, front: str) -> Callable[[str, str, ActonceError | None], None]:
        """The counting of a front other than gRPC's interceptor: its calls count as
        writes and refusals like gRPC's, and by front."""

        def record(rpc: str, outcome: str, error: ActonceError | None) -> None:
            label = outcome.removeprefix("OUTCOME_").lower()
            self.front_calls.labels(front, rpc, label).inc()
            if error is not None:
                self.refusals.labels(rpc, error.reason, error.failure_class.value).inc()
            if rpc in WRITE_RPCS:
                self.writes.labels(rpc, label).inc()

        return record


# -- the call interceptor ------------------------------------------------------


def _outcome_label(outcome: types_pb2.Outcome.ValueType) -> str:
    name = types_pb2.Outcome.Name(outcome) if outcome else "OUTCOME_UNSPECIFIED"
    return name.removeprefix("OUTCOME_").lower()


def error_info_of(
    trailing: grpc.aio.Metadata | Sequence[tuple[str, str | bytes]] | None,
) -> error_details_pb2.ErrorInfo:
    """The ErrorInfo carried by a call's rich status trailer; empty when there is none."""
    for key, value in trailing or ():
        if key != "grpc-status-details-bin" or not isinstance(value, bytes):
            continue
        status = status_pb2.Status.FromString(value)
        for detail in status.details:
            info = error_details_pb2.ErrorInfo()
            if detail.Unpack(info):
                return info
    return error_details_pb2.ErrorInfo()


class _CallRecord:
    """One call's numbers, recorded once: at its abort, or when its handler returns.

    An abort sends the status to the caller before it raises, so a refusal counted
    only when the exception reaches the interceptor could be missing from a scrape
    that the caller makes right after seeing the error. Counting at the abort
    itself keeps the metrics ahead of every answer.
    """

    __slots__ = ("done", "is_write", "metrics", "rpc", "started")

    def __init__(self, metrics: Metrics, rpc: str, is_write: bool) -> None:
        self.metrics = metrics
        self.rpc = rpc
        self.is_write = is_write
        self.started = time.perf_counter()
        self.done = False
        metrics.in_flight.labels(rpc).inc()

    def finish(self, code: grpc.StatusCode, outcome: str, info: Any = None) -> None:
        if self.done:
            return
        self.done = True
        metrics, rpc = self.metrics, self.rpc
        if info is not None:
            metrics.refusals.labels(
                rpc, info.reason or code.name, info.metadata.get("failure_class", "")
            ).inc()
        if self.is_write:
            metrics.writes.labels(rpc, outcome).inc()
        metrics.front_calls.labels(
            "grpc", rpc, outcome or ("ok" if info is None else "failed")
        ).inc()
        metrics.in_flight.labels(rpc).dec()
        metrics.observe(
            metrics.request_seconds.labels(rpc, code.name), time.perf_counter() - self.started
        )

    def refused(self, code: grpc.StatusCode | int | None, trailing: Metadata | None) -> None:
        # grpc.aio's context answers code() with the status's number, not its enum.
        if not isinstance(code, grpc.StatusCode):
            code = _code_from_int(int(code)) if code is not None else grpc.StatusCode.UNKNOWN
        self.finish(code, "failed", error_info_of(trailing))


class _CountingContext(ForwardingContext):
    """The call's context, with its aborts counted before their status is sent."""

    def __init__(self, context: Context, record: _CallRecord) -> None:
        super().__init__(context)
        self._record = record

    async def abort_with_status(self, status: grpc.Status) -> Never:
        self._record.refused(status.code, status.trailing_metadata)
        await super().abort_with_status(status)

    async def abort(
        self, code: grpc.StatusCode, details: str = "", trailing_metadata: Metadata = ()
    ) -> Never:
        self._record.refused(code, trailing_metadata)
        await super().abort(code, details, trailing_metadata)


class MetricsInterceptor(RunActionsInterceptor):
    """Counts every RunActionsService call; other services (health, reflection) pass."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def wrap(self, rpc: str, handler: Handler) -> Behavior:
        inner = behavior_of(handler)
        metrics = self.metrics
        is_write = rpc in WRITE_RPCS

        async def counted(request: Any, context: Context) -> Any:
            record = _CallRecord(metrics, rpc, is_write)
            try:
                response = await inner(request, _CountingContext(context, record))
            except asyncio.CancelledError:
                # The caller went away, or the drain's grace ran out: no refusal was
                # given, and whether a write landed is for its audit events to say.
                record.finish(grpc.StatusCode.CANCELLED, "cancelled")
                raise
            except BaseException:
                # Aborts were counted as they were sent; anything else escaping a
                # handler is an error status of its own.
                if not record.done:
                    record.refused(context.code(), context.trailing_metadata())
                raise
            else:
                outcome = _outcome_label(response.outcome) if is_write else ""
                record.finish(grpc.StatusCode.OK, outcome)
                return response

        return counted


_CODES_BY_NUMBER = {code.value[0]: code for code in grpc.StatusCode}


def _code_from_int(number: int) -> grpc.StatusCode:
    return _CODES_BY_NUMBER.get(number, grpc.StatusCode.UNKNOWN)


# -- the ledger ------------------------------------------------------------------


class _TimedLedger(WrappedLedger):
    """Times each append of the ledger it wraps; its other calls are the ledger's own."""

    def __init__(self, inner: AuditLedger, metrics: Metrics) -> None:
        super().__init__(inner)
        self._metrics = metrics

    async def append(self, event: AuditEvent) -> int:
        started = time.perf_counter()
        try:
            return await self._inner.append(event)
        except FencedError:
            # A newer attempt's fence refused the event: the ledger worked.
            raise
        except LedgerError:
            self._metrics.audit_append_failures.inc()
            raise
        finally:
            self._metrics.observe(self._metrics.audit_append_seconds, time.perf_counter() - started)


def instrument_ledger(ledger: AuditLedger, metrics: Metrics) -> AuditLedger:
    """``ledger`` with its appends timed and counted, and its group commits observed."""
    # The group-commit ledger offers hooks for what only its writer thread sees.
    if hasattr(ledger, "on_commit"):

        def committed(seconds: float, events: int) -> None:
            metrics.observe(metrics.audit_commit_seconds, seconds)
            metrics.audit_commit_events.observe(events)

        ledger.on_commit = committed
    return _TimedLedger(ledger, metrics)


# -- the store client ----------------------------------------------------------


def _result_of(error: BaseException) -> str:
    if isinstance(error, Refusal):
        return error.code
    if isinstance(error, StoreDeadlineExceeded):
        return "deadline_exceeded"
    if isinstance(error, StoreUnavailable):
        return "unavailable"
    return "error"


class _TimedStore(WrappedStore):
    """Times each call to the store client it wraps, by operation and result."""

    def __init__(self, inner: StoreClient, metrics: Metrics) -> None:
        super().__init__(inner)
        self._metrics = metrics

    async def _around(self, operation: str, store_id: str, call: Awaitable[_T]) -> _T:
        started = time.perf_counter()
        result = "ok"
        try:
            return await call
        except Exception as error:
            result = _result_of(error)
            raise
        finally:
            self._metrics.observe(
                self._metrics.store_call_seconds.labels(operation, result),
                time.perf_counter() - started,
            )

    async def commit_write(
        self,
        intent: AuditEvent,
        call: StoreWrite,
        settle: Settle[_R],
        *,
        timeout: float | None,
        before: Callable[[], None] = nothing,
    ) -> _R:
        # The write's two events are durable with the job's commit: each is an append of
        # the job's time, as the ledger's own appends are timed until durable.
        started = time.perf_counter()
        events = 1
        try:
            result = await super().commit_write(
                intent, call, settle, timeout=timeout, before=before
            )
            events = 2
            return result
        except FencedError:
            raise
        except LedgerError:
            self._metrics.audit_append_failures.inc()
            raise
        finally:
            took = time.perf_counter() - started
            for _ in range(events):
                self._metrics.observe(self._metrics.audit_append_seconds, took)


def instrument_store(store: StoreClient, metrics: Metrics) -> StoreClient:
    """``store`` with every call timed by operation and result."""
    return _TimedStore(store, metrics)


# -- the HTTP endpoint -------------------------------------------------------------


class MetricsEndpoint:
    """Prometheus text over HTTP on ``listen`` (HOST:PORT), from a thread of its own."""

    def __init__(self, listen: str, metrics: Metrics) -> None:
        host, _, port = listen.rpartition(":")
        try:
            # "[::]:9464" names an IPv6 address; the HTTP server wants it bare.
            self._server, self._thread = start_http_server(
                int(port), addr=host.strip("[]"), registry=metrics.registry
            )
        except OSError as exc:
            raise OSError(f"could not serve metrics on {listen}: {exc.strerror}") from None
        self.port: int = self._server.server_port

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
