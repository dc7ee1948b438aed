"""The metrics on the seams: an interceptor of the gRPC front, a hook of the ledger's appends,
and middleware of the store client.

All three feed the sidecar's registry (:class:`sidecar.ops.metrics.Metrics`, which declares
every metric and counts none), and each is what its seam asks for and nothing more:
:class:`MetricsInterceptor` is a
:class:`~sidecar.fronts.grpc.interceptors.RunActionsInterceptor`, around every
RunActionsService call (writes by RPC and outcome, refusals by reason and failure class,
calls in flight, call latency); :class:`TimedAppends` is an
:class:`~sidecar.ledger.base.AppendHook`, around each append and each commit;
:class:`TimedStore` is a :class:`~sidecar.upstream.base.StoreClient`, around each call.
Every latency goes through :func:`observe`.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any, TypeVar, cast

import grpc
from actonce_api.v1 import types_pb2
from prometheus_client import Histogram

from sidecar.errors import ActonceError, LeaseExpired, StoreDeadlineExceeded, StoreUnavailable
from sidecar.fronts.grpc.aborts import AbortWatchingContext, Trailing, error_info_of, status_code_of
from sidecar.fronts.grpc.interceptors import (
    Behavior,
    Context,
    Handler,
    RunActionsInterceptor,
    behavior_of,
)
from sidecar.ledger.base import Append, AuditEvent, FencedError, LedgerError
from sidecar.ops.metrics import WRITE_RPCS, Metrics
from sidecar.store_contract import Refusal
from sidecar.upstream.base import (
    AUDITED,
    Committed,
    OneCommit,
    StoreCall,
    StoreClient,
    ThreeCommits,
)

_T = TypeVar("_T")
_R = TypeVar("_R")


def observe(metrics: Metrics, histogram: Histogram, seconds: float) -> None:
    """``seconds`` into ``histogram`` (a child with its labels), with the trace's exemplar
    when the sidecar traces."""
    exemplar = metrics.exemplar
    histogram.observe(seconds, exemplar() if exemplar is not None else None)


# -- the gRPC front ----------------------------------------------------------------


def _outcome_label(outcome: types_pb2.Outcome.ValueType) -> str:
    name = types_pb2.Outcome.Name(outcome) if outcome else "OUTCOME_UNSPECIFIED"
    return name.removeprefix("OUTCOME_").lower()


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
        observe(
            metrics,
            metrics.request_seconds.labels(rpc, code.name),
            time.perf_counter() - self.started,
        )

    def refused(self, code: grpc.StatusCode | int | None, trailing: Trailing) -> None:
        self.finish(status_code_of(code), "failed", error_info_of(trailing))


class _CountingContext(AbortWatchingContext):
    """The call's context, with its aborts counted before their status is sent."""

    def __init__(self, context: Context, record: _CallRecord) -> None:
        super().__init__(context)
        self._record = record

    def refused(self, code: grpc.StatusCode, trailing: Trailing) -> None:
        self._record.refused(code, trailing)


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


# -- the ledger ------------------------------------------------------------------


class TimedAppends:
    """Times each append until durable (or failed) and counts the failures; times each
    group commit and the events it carries."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    async def append(self, event: AuditEvent, append: Append) -> int:
        metrics = self._metrics
        started = time.perf_counter()
        try:
            return await append(event)
        except FencedError:
            # A newer attempt's fence refused the event: the ledger worked.
            raise
        except LedgerError:
            metrics.audit_append_failures.inc()
            raise
        finally:
            observe(metrics, metrics.audit_append_seconds, time.perf_counter() - started)

    def commit(self, appends: Sequence[contextvars.Context]) -> _TimedCommit:
        return _TimedCommit(self._metrics, len(appends))


class _TimedCommit:
    __slots__ = ("_events", "_metrics", "_started")

    def __init__(self, metrics: Metrics, events: int) -> None:
        self._metrics = metrics
        self._events = events
        self._started = 0.0

    def __enter__(self) -> None:
        self._started = time.perf_counter()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if error is not None:  # a failed append is counted where it is seen, once per append
            return
        metrics = self._metrics
        observe(metrics, metrics.audit_commit_seconds, time.perf_counter() - self._started)
        metrics.audit_commit_events.observe(self._events)


# -- the store client ----------------------------------------------------------


def _result_of(error: BaseException) -> str:
    if isinstance(error, Refusal):
        return error.code
    if isinstance(error, StoreDeadlineExceeded):
        return "deadline_exceeded"
    if isinstance(error, StoreUnavailable):
        return "unavailable"
    return "error"


def _store_not_called(op: OneCommit[Any] | ThreeCommits[Any], error: Exception) -> bool:
    """Whether a write's job failed with ``error`` before its store call: fenced, its lease
    run out, or (in three commits) its intent not durable or its wait for the store's thread
    past its deadline."""
    if isinstance(error, FencedError | LeaseExpired):
        return True
    if isinstance(op, ThreeCommits):
        return isinstance(error, LedgerError) or (
            isinstance(error, ActonceError) and error.nothing_sent
        )
    return False


class TimedStore:
    """Times each call of the store client it wraps, by operation and result (ok, the
    store's refusal code, unavailable, deadline_exceeded)."""

    def __init__(self, inner: StoreClient, metrics: Metrics) -> None:
        self._inner = inner
        self._metrics = metrics

    async def call(self, op: StoreCall[_T], timeout: float | None = None) -> _T:
        if isinstance(op, AUDITED):
            return cast(_T, await self._with_audit(op, timeout))
        started = time.perf_counter()
        result = "ok"
        try:
            return await self._inner.call(op, timeout)
        except Exception as error:
            result = _result_of(error)
            raise
        finally:
            self._observe(op.operation, result, time.perf_counter() - started)

    async def _with_audit(
        self, op: OneCommit[_R] | ThreeCommits[_R], timeout: float | None
    ) -> Committed[_R]:
        """The write's store call is timed as any other, by the store's own answer inside the
        job; its two events are durable with the job's commits, so each is an append of the
        job's time, as the ledger's own appends are timed until durable."""
        metrics = self._metrics
        started = time.perf_counter()
        result, events = "ok", 1
        try:
            committed = await self._inner.call(op, timeout)
        except Exception as error:
            if isinstance(error, LedgerError) and not isinstance(error, FencedError):
                metrics.audit_append_failures.inc()
            result = "" if _store_not_called(op, error) else _result_of(error)
            raise
        else:
            events = 2
            lost = committed.outcome_lost
            if lost is not None and not isinstance(lost, FencedError):
                metrics.audit_append_failures.inc()
            if isinstance(committed.answer, Exception):
                result = _result_of(committed.answer)
            return committed
        finally:
            took = time.perf_counter() - started
            if result:  # a write refused before the store was called makes no store call
                self._observe(op.write.operation, result, took)
            for _ in range(events):
                observe(metrics, metrics.audit_append_seconds, took)

    def _observe(self, operation: str, result: str, seconds: float) -> None:
        metrics = self._metrics
        observe(metrics, metrics.store_call_seconds.labels(operation, result), seconds)
