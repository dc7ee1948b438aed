"""The gRPC front's metrics: an interceptor around every RunActionsService call.

It counts writes by RPC and outcome, refusals by reason and failure class, calls in flight
and call latency, into the sidecar's registry (:class:`sidecar.ops.metrics.Metrics`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any, Never

import grpc
from actonce_api.v1 import types_pb2
from google.rpc import error_details_pb2, status_pb2

from sidecar.fronts.grpc.interceptors import (
    Behavior,
    Context,
    ForwardingContext,
    Handler,
    Metadata,
    RunActionsInterceptor,
    behavior_of,
)
from sidecar.ops.metrics import WRITE_RPCS, Metrics


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
