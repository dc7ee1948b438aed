"""The spans on the seams, when the sidecar traces (imported only then): a hook of the
ledger's appends and middleware of the store client.

:class:`TracedAppends` is an :class:`~sidecar.ledger.base.AppendHook`: a
``ledger.append`` span per audit event, whose attributes say what the event says (run,
attempt, write type, derived id, outcome, reason, failure class), never a payload; the call's
span gets the same attributes, and each event records the trace and span ids of the call
that wrote it (here, the one place that does). A ``ledger.commit`` span per group commit in
which at least one traced append waits, in the trace of the first of them and linked to each.

:class:`TracedStore` is a :class:`~sidecar.upstream.base.StoreClient`: a
``store.<operation>`` span per store call (sidecar.ops.tracing says what follows it on the
wire).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from contextvars import Context
from dataclasses import replace
from typing import TypeVar, cast

from opentelemetry import trace
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode
from opentelemetry.trace.span import format_span_id, format_trace_id

from sidecar.ledger.base import Append, AuditEvent
from sidecar.ops.tracing import (
    ATTEMPT_ID,
    BATCH_SIZE,
    DERIVED_ID,
    FAILURE_CLASS,
    LEDGER_SEQ,
    OCCURRENCE,
    OUTCOME,
    PHASE,
    REASON,
    RULE,
    RUN_ID,
    STORE_ID,
    STORE_OPERATION,
    STORE_RESULT,
    WRITE_TYPE,
)
from sidecar.store_contract import Refusal
from sidecar.upstream import base as upstream

_T = TypeVar("_T")
_R = TypeVar("_R")


def event_attributes(event: AuditEvent) -> dict[str, str | int]:
    """What a span may say of an audit event: its names and ids, never its content."""
    attributes: dict[str, str | int] = {
        RUN_ID: event.run_id,
        ATTEMPT_ID: event.attempt_id,
        RULE: event.rule,
        PHASE: event.phase,
        WRITE_TYPE: event.write_type,
        DERIVED_ID: event.derived_id,
        OUTCOME: event.outcome,
        REASON: event.reason,
        FAILURE_CLASS: event.failure_class,
    }
    attributes = {key: value for key, value in attributes.items() if value}
    if event.occurrence >= 0:
        attributes[OCCURRENCE] = event.occurrence
    return attributes


class TracedAppends:
    """A span per append, and one per group commit in which a traced append waits; each event
    records the trace and span of the call appending it."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self._tracer = tracer

    async def append(self, event: AuditEvent, append: Append) -> int:
        call = trace.get_current_span()
        if not call.is_recording():
            # A call whose trace is not sampled (or no call at all): no span, and no trace
            # named in the event, which would point at a trace nobody keeps.
            return await append(event)
        event = _in_trace(event, call.get_span_context())
        attributes = event_attributes(event)
        _tell_call(call, attributes)
        with self._tracer.start_as_current_span("ledger.append", attributes=attributes) as span:
            seq = await append(event)
            span.set_attribute(LEDGER_SEQ, seq)
            return seq

    @contextlib.contextmanager
    def commit(self, appends: Sequence[Context]) -> Iterator[None]:
        # Each append's context holds its ledger.append span: the commit's span links to it.
        links = [context.run(_current_span_context) for context in appends]
        sampled = [link for link in links if link.is_valid and link.trace_flags.sampled]
        if not sampled:
            yield
            return
        # One span for the commit, in the trace of its first traced append, linked to
        # every traced append it carries.
        parent = trace.set_span_in_context(NonRecordingSpan(sampled[0]))
        with self._tracer.start_as_current_span(
            "ledger.commit",
            context=parent,
            links=[Link(context) for context in sampled],
            attributes={BATCH_SIZE: len(appends)},
        ):
            yield


def _current_span_context() -> SpanContext:
    return trace.get_current_span().get_span_context()


def _in_trace(event: AuditEvent, context: SpanContext) -> AuditEvent:
    """``event``, naming the call's trace and span."""
    trace_id, span_id = format_trace_id(context.trace_id), format_span_id(context.span_id)
    return replace(event, trace_id=trace_id, span_id=span_id)


def _tell_call(call: trace.Span, attributes: Mapping[str, str | int]) -> None:
    # The call's span says what its events say; the phase and order are the ledger's.
    call.set_attributes({k: v for k, v in attributes.items() if k not in (PHASE, OCCURRENCE)})


# -- the store --------------------------------------------------------------------------


def _store_result(error: BaseException) -> str:
    return error.code if isinstance(error, Refusal) else type(error).__name__


class TracedStore:
    """A span per store call, named after the operation, with the id it names. A write made
    one commit with its audit names the call's trace in its two events, as the traced
    ledger does for events it appends itself."""

    def __init__(self, inner: upstream.StoreClient, tracer: trace.Tracer) -> None:
        self._inner = inner
        self._tracer = tracer

    async def call(self, op: upstream.StoreCall[_T], timeout: float | None = None) -> _T:
        if not trace.get_current_span().is_recording():
            return await self._inner.call(op, timeout)  # a call not sampled: no span either
        if isinstance(op, upstream.AUDITED):
            return cast(_T, await self._with_audit(op, timeout))
        with self._span(op.operation, op.store_id) as span:
            try:
                return await self._inner.call(op, timeout)
            except Exception as error:
                _tell_failure(span, error)
                raise

    async def _with_audit(
        self, op: upstream.OneCommit[_R] | upstream.ThreeCommits[_R], timeout: float | None
    ) -> upstream.Committed[_R]:
        call = trace.get_current_span()
        context = call.get_span_context()
        written = [_in_trace(op.intent, context)]
        _tell_call(call, event_attributes(op.intent))

        def traced(answer: object) -> tuple[AuditEvent, _R]:
            outcome, result = op.settle(answer)
            written.append(_in_trace(outcome, context))
            return written[-1], result

        started = time.time_ns()
        try:
            with self._span(op.write.operation, op.store_id) as span:
                try:
                    committed = await self._inner.call(
                        replace(op, intent=written[0], settle=traced), timeout
                    )
                except Exception as error:
                    _tell_failure(span, error)
                    raise
                if isinstance(committed.answer, Exception):
                    _tell_failure(span, committed.answer)
                return committed
        finally:
            # A span per event, as the traced ledger makes, over the job that made it durable;
            # the call's span says what its events say.
            for made in written[1:]:
                _tell_call(call, event_attributes(made))
            for made in written:
                self._tracer.start_span(
                    "ledger.append", start_time=started, attributes=event_attributes(made)
                ).end()

    def _span(self, operation: str, store_id: str) -> AbstractContextManager[trace.Span]:
        return self._tracer.start_as_current_span(
            f"store.{operation}",
            kind=SpanKind.INTERNAL,
            attributes={STORE_OPERATION: operation, STORE_ID: store_id},
            record_exception=False,
            set_status_on_exception=False,
        )


def _tell_failure(span: trace.Span, error: BaseException) -> None:
    if isinstance(error, Refusal):
        # A refusal is the store's answer, not a fault: its code says which.
        span.set_attribute(STORE_RESULT, error.code)
        return
    span.set_attribute(STORE_RESULT, _store_result(error))
    span.set_status(Status(StatusCode.ERROR, type(error).__name__))
