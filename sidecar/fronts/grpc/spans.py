"""The call's span on the gRPC front, when the sidecar traces (imported only then).

Each RunActionsService call gets a SERVER span from the OpenTelemetry instrumentation's
interceptor (:meth:`sidecar.ops.tracing.Tracing.run_actions_interceptor`); :class:`CallSpans`
names it after its RPC and gives it the status of the answer: the status code, and the
refusal's reason and failure class from its ErrorInfo.
"""

from __future__ import annotations

from typing import Any, Never

import grpc
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

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
from sidecar.fronts.grpc.metrics import error_info_of
from sidecar.ops.tracing import FAILURE_CLASS, REASON, Tracing


def server_interceptors(tracing: Tracing) -> list[grpc.aio.ServerInterceptor]:
    """The SERVER span of each RunActionsService call, then its name and status as the
    sidecar answers."""
    return [tracing.run_actions_interceptor(), CallSpans()]


# Server span statuses that are errors (the RPC conventions: the server's own faults).
_SERVER_ERRORS = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)
_CODES_BY_NUMBER = {code.value[0]: code for code in grpc.StatusCode}


class CallSpans(RunActionsInterceptor):
    """Names each call's SERVER span after its RPC and gives it the status of the answer:
    the status code, and the refusal's reason and failure class from its ErrorInfo."""

    def wrap(self, rpc: str, handler: Handler) -> Behavior:
        inner = behavior_of(handler)
        name = f"{RUN_ACTIONS.full_name}/{rpc}"

        async def spanned(request: Any, context: Context) -> Any:
            span = trace.get_current_span()
            if not span.is_recording():
                return await inner(request, context)  # not sampled: nothing to tell it
            span.update_name(name)
            return await inner(request, _SpanStatusContext(context, span))

        return spanned


class _SpanStatusContext(ForwardingContext):
    """The call's context, with each abort's status told to the span before it is sent."""

    def __init__(self, context: Context, span: trace.Span) -> None:
        super().__init__(context)
        self._span = span

    def _refused(self, code: Any, trailing: Any) -> None:
        if not isinstance(code, grpc.StatusCode):
            code = _CODES_BY_NUMBER.get(int(code), grpc.StatusCode.UNKNOWN)
        info = error_info_of(trailing)
        span = self._span
        span.set_attribute("rpc.grpc.status_code", code.value[0])
        if info.reason:
            span.set_attributes(
                {REASON: info.reason, FAILURE_CLASS: info.metadata.get("failure_class", "")}
            )
        if code in _SERVER_ERRORS:
            span.set_status(Status(StatusCode.ERROR, info.reason or code.name))

    async def abort_with_status(self, status: grpc.Status) -> Never:
        self._refused(status.code, status.trailing_metadata)
        await super().abort_with_status(status)

    async def abort(
        self, code: grpc.StatusCode, details: str = "", trailing_metadata: Metadata = ()
    ) -> Never:
        self._refused(code, trailing_metadata)
        await super().abort(code, details, trailing_metadata)
