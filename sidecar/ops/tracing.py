"""OpenTelemetry traces of the sidecar and the reference store, when the environment asks.

Off unless asked for: :func:`sidecar.ops.tracing_settings.requested` reads the standard
``OTEL_*`` variables, and only then is this module imported and a :class:`Tracing`
built. Off, nothing here runs on a call: no interceptor is installed, no ledger or
store is wrapped, no span is made.

On, everything is configured by the OpenTelemetry SDK's own reading of the
environment (``OTEL_EXPORTER_OTLP_*``, ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``,
``OTEL_TRACES_SAMPLER`` and its argument, ``OTEL_BSP_*``, ``OTEL_PROPAGATORS``), and spans
leave through a batch processor and the OTLP gRPC exporter. A call becomes:

- a SERVER span per RunActionsService call, from ``opentelemetry-instrumentation-grpc``'s
  aio interceptor, which continues the caller's W3C ``traceparent`` and ``tracestate``
  from the call's metadata (RPC semantic conventions; :class:`CallSpans` names it
  ``actonce.v1.RunActionsService/<RPC>`` and gives it the status a refusal carries);
- a ``ledger.append`` span per audit event, whose attributes say what the event says
  (run, attempt, write type, derived id, outcome, reason, failure class), never a payload;
  the call's span gets the same attributes;
- a ``ledger.commit`` span per group commit in which at least one traced append waits,
  in the trace of the first of them and linked to each of them;
- a ``store.<operation>`` span per store call; to an external store the aio client
  interceptor adds a CLIENT span and sends the context along, and the reference store's
  own SERVER span continues it (the embedded store is called in-process, within the
  ``store.<operation>`` span).

Each audit event records the trace and span ids of the call that wrote it (in
:class:`_TracedLedger`, the one place that does), and the latency histograms carry
the trace id as an exemplar (:meth:`Tracing.exemplar`).

Longer than most modules, on purpose: every span the sidecar makes, and all it uses of
the OpenTelemetry SDK and its instrumentation, is here, in the one module imported only
when traces are asked for, so that a sidecar without traces loads none of it.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, Never, TypeVar, cast

import grpc
from opentelemetry import propagate, trace
from opentelemetry.instrumentation.grpc import aio_client_interceptors, aio_server_interceptor
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
)
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode
from opentelemetry.trace.span import format_span_id, format_trace_id

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
from sidecar.ledger.base import AuditEvent, AuditLedger, WrappedLedger
from sidecar.ops import tracing_settings
from sidecar.ops.metrics import error_info_of
from sidecar.refstore.server import SERVICE_NAME as STORE_SERVICE_NAME
from sidecar.upstream.base import Refusal, Settle, StoreClient, StoreWrite, WrappedStore, nothing

_T = TypeVar("_T")
_R = TypeVar("_R")

# The instrumentation's factories, as they are used here (the package has no type hints).
_server_interceptor = cast(Callable[..., grpc.aio.ServerInterceptor], aio_server_interceptor)
_client_interceptors = cast(
    Callable[..., list[grpc.aio.ClientInterceptor]], aio_client_interceptors
)

SIDECAR_SERVICE = "actonce-sidecar"
STORE_SERVICE = "actonce-store"
# The instrumentation scope of the spans made here.
SCOPE = "actonce"

# Span attributes, in the project's namespace (the RPC ones are the semantic conventions').
RUN_ID = "actonce.run_id"
ATTEMPT_ID = "actonce.attempt_id"
RULE = "actonce.rule"
PHASE = "actonce.phase"
WRITE_TYPE = "actonce.write_type"
DERIVED_ID = "actonce.derived_id"
OCCURRENCE = "actonce.occurrence"
OUTCOME = "actonce.outcome"
REASON = "actonce.reason"
FAILURE_CLASS = "actonce.failure_class"
LEDGER_SEQ = "actonce.ledger.seq"
BATCH_SIZE = "actonce.ledger.batch_size"
STORE_OPERATION = "actonce.store.operation"
STORE_ID = "actonce.store.id"
STORE_RESULT = "actonce.store.result"


def _exporter(environ: Mapping[str, str]) -> SpanExporter:
    if tracing_settings.exporter(environ) == "console":
        return ConsoleSpanExporter()
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    # Endpoint, headers, TLS, timeout and compression: the exporter reads them itself.
    return OTLPSpanExporter()


def _resource(service: str) -> Resource:
    # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win; the default names the part.
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service}))
    return resource


class Tracing:
    """One process part's tracer provider and what it puts around the calls."""

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer(SCOPE)

    @classmethod
    def from_environment(
        cls, service: str = SIDECAR_SERVICE, environ: Mapping[str, str] = os.environ
    ) -> Tracing | None:
        """The tracing the ``OTEL_*`` variables ask for, or None when they ask for none.

        ``environ`` decides whether, and which exporter; the SDK reads everything else
        from the process's environment itself. Raises TracingSettingError for an exporter
        or protocol that is not offered.
        """
        if not tracing_settings.requested(environ):
            return None
        # The sampler (OTEL_TRACES_SAMPLER, ..._ARG) and the span limits are the
        # provider's own reading of the environment; the batch processor's delays too.
        provider = TracerProvider(resource=_resource(service))
        provider.add_span_processor(BatchSpanProcessor(_exporter(environ)))
        return cls(provider)

    # -- the sidecar's gRPC server and its store client ------------------------------

    def server_interceptors(self) -> list[grpc.aio.ServerInterceptor]:
        """The SERVER span of each RunActionsService call (health and reflection are
        not traced), then the span's name and status as the sidecar answers."""
        only_run_actions = _service_filter(RUN_ACTIONS.full_name)
        provider = CurrentNames(self.provider)
        return [
            _server_interceptor(tracer_provider=provider, filter_=only_run_actions),
            CallSpans(),
        ]

    def store_server_interceptors(self) -> list[grpc.aio.ServerInterceptor]:
        """The reference store's SERVER span of each call that continues a trace; it
        starts none of its own (a sidecar's health probe, say, is not traced)."""
        service = _service_filter(STORE_SERVICE_NAME)

        def continues_a_trace(details: Any) -> bool:
            metadata = getattr(details, "invocation_metadata", None) or ()
            return service(details) and any(key == "traceparent" for key, _ in metadata)

        provider = CurrentNames(self.provider)
        return [_server_interceptor(tracer_provider=provider, filter_=continues_a_trace)]

    def store_client_interceptors(self, target: str = "") -> list[grpc.aio.ClientInterceptor]:
        """A CLIENT span and the propagated context of each store call made within a
        trace; the health probe's calls, made within none, pass as they are. ``target``
        (HOST:PORT or unix:PATH) is the store's address, which each span names."""

        def within_a_trace(_details: Any) -> bool:
            return trace.get_current_span().get_span_context().is_valid

        provider = CurrentNames(self.provider, server_attributes(target))
        return _client_interceptors(tracer_provider=provider, filter_=within_a_trace)

    # -- the ledger and the store ------------------------------------------------------

    def ledger(self, ledger: AuditLedger) -> AuditLedger:
        """``ledger`` with a span per append, and the call's trace recorded in each event."""
        return _TracedLedger(ledger, self.tracer)

    def watch_commits(self, ledger: object) -> None:
        """Span the group commits of ``ledger`` (a GroupCommitLedger), if it has them."""
        if hasattr(ledger, "commit_tracer"):
            ledger.commit_tracer = _CommitSpans(self.tracer)

    def store(self, store: StoreClient) -> StoreClient:
        """``store`` with a span per call."""
        return _TracedStore(store, self.tracer)

    @staticmethod
    def exemplar() -> dict[str, str] | None:
        """The exemplar of a latency observed now: the current trace, when it is sampled."""
        context = trace.get_current_span().get_span_context()
        if not context.trace_flags.sampled:
            return None
        return {
            "trace_id": format_trace_id(context.trace_id),
            "span_id": format_span_id(context.span_id),
        }

    def mcp_middleware(self, name_of: Callable[[str], str]) -> McpSpans:
        """The MCP front's span of each tool call (sidecar.fronts.mcp); ``name_of`` gives
        the bounded name a tool's span is called by."""
        return McpSpans(self.tracer, name_of)

    def shutdown(self) -> None:
        """Export what is pending, then stop (bounded by the exporter's own timeout)."""
        self.provider.shutdown()


def _service_filter(service: str) -> Callable[[Any], bool]:
    prefix = f"/{service}/"

    def matches(details: Any) -> bool:
        method = getattr(details, "method", "")
        if isinstance(method, bytes):
            method = method.decode()
        return str(method).startswith(prefix)

    return matches


# -- the gRPC instrumentation's attribute names -------------------------------------------

# opentelemetry-instrumentation-grpc, at its newest (0.66b2), still names the peer with the
# net.peer.* attributes that the semantic conventions replaced in 1.21, and reads no
# OTEL_SEMCONV_STABILITY_OPT_IN for gRPC. Its spans are made through CurrentNames, which
# gives them today's networking names (network.peer.*, server.*) as they start; the RPC
# ones (rpc.system, rpc.service, rpc.method, rpc.grpc.status_code) are as it makes them,
# the RPC conventions' until 1.37, the schema its spans then declare.
SCHEMA_URL = "https://opentelemetry.io/schemas/1.37.0"
_PEER_ADDRESS, _PEER_PORT, _PEER_NAME = "net.peer.ip", "net.peer.port", "net.peer.name"

Attributes = Mapping[str, Any] | None


def current_names(attributes: Attributes, extra: Mapping[str, Any]) -> dict[str, Any]:
    """The instrumentation's attributes under the current names, with ``extra``."""
    named = dict(attributes or {})
    named.pop(_PEER_NAME, None)  # "localhost" for a loopback peer: the address says it
    address = named.pop(_PEER_ADDRESS, None)
    port = named.pop(_PEER_PORT, None)
    if address is not None:
        address = str(address).strip("[]")
        named["network.peer.address"] = address
        named["network.transport"] = "tcp"
        named["network.type"] = "ipv6" if ":" in address else "ipv4"
    if port is not None and str(port).isdigit():
        named["network.peer.port"] = int(port)
    named.update(extra)
    return named


def server_attributes(target: str) -> dict[str, Any]:
    """``server.address`` and ``server.port`` of a gRPC target (HOST:PORT or unix:PATH)."""
    if not target:
        return {}
    if target.startswith("unix:"):
        return {"server.address": target.removeprefix("unix:"), "network.transport": "unix"}
    host, _, port = target.rpartition(":")
    named: dict[str, Any] = {"server.address": host.strip("[]")}
    if port.isdigit():
        named["server.port"] = int(port)
    return named


class CurrentNames(trace.TracerProvider):
    """The provider the gRPC instrumentation is given: its tracers rename as they start."""

    def __init__(self, inner: trace.TracerProvider, extra: Mapping[str, Any] | None = None):
        self._inner = inner
        self._extra = dict(extra or {})

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: Attributes = None,
    ) -> trace.Tracer:
        inner = self._inner.get_tracer(
            instrumenting_module_name, instrumenting_library_version, SCHEMA_URL, attributes
        )
        return _RenamingTracer(inner, self._extra)


class _RenamingTracer(trace.Tracer):
    def __init__(self, inner: trace.Tracer, extra: Mapping[str, Any]) -> None:
        self._inner = inner
        self._extra = extra

    def start_span(
        self,
        name: str,
        context: Any = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Attributes = None,
        links: Any = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace.Span:
        return self._inner.start_span(
            name, context, kind, current_names(attributes, self._extra), links, start_time,
            record_exception, set_status_on_exception,
        )  # fmt: skip

    def start_as_current_span(
        self,
        name: str,
        context: Any = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Attributes = None,
        links: Any = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Any:
        return self._inner.start_as_current_span(
            name, context, kind, current_names(attributes, self._extra), links, start_time,
            record_exception, set_status_on_exception, end_on_exit,
        )  # fmt: skip


# -- the call's span -------------------------------------------------------------------

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


# -- the MCP front -------------------------------------------------------------------------


class McpSpans:
    """A SERVER span per MCP ``tools/call``, continuing the W3C context (``traceparent``,
    ``tracestate``) that the MCP client put in the request's ``_meta``.

    The MCP SDK's own middleware does the same through the process's global provider; the
    front puts this one in its place, so that each sidecar's spans go where its own
    provider sends them. Other MCP requests (initialize, tools/list) are not traced.
    """

    def __init__(self, tracer: trace.Tracer, name_of: Callable[[str], str]) -> None:
        self._tracer = tracer
        self._name_of = name_of

    async def __call__(self, ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        if ctx.method != "tools/call":
            return await call_next(ctx)
        params = ctx.params or {}
        named = params.get("name") if isinstance(params, Mapping) else None
        tool = self._name_of(named) if isinstance(named, str) else None
        meta = ctx.meta
        parent = propagate.extract(meta) if isinstance(meta, Mapping) else None
        if parent is not None and not trace.get_current_span(parent).get_span_context().is_valid:
            parent = None  # no context, or a malformed one: the call starts a trace
        attributes = {"mcp.method.name": ctx.method, "gen_ai.operation.name": "execute_tool"}
        if isinstance(tool, str):
            attributes["gen_ai.tool.name"] = tool
        with self._tracer.start_as_current_span(
            f"tools/call {tool}" if isinstance(tool, str) else "tools/call",
            context=parent,
            kind=SpanKind.SERVER,
            attributes=attributes,
        ) as span:
            result = await call_next(ctx)
            said = _tool_error(result)
            if said is not None:
                # The front's refusals carry their reason and class (sidecar.fronts.mcp.tools).
                span.set_attribute("error.type", "tool_error")
                if isinstance(said, Mapping) and said.get("reason"):
                    span.set_attributes(
                        {
                            REASON: str(said["reason"]),
                            FAILURE_CLASS: str(said.get("failure_class", "")),
                        }
                    )
            return result


def _tool_error(result: object) -> object | None:
    """The structured content of a tool result that is an error, or None when it is none.

    The result reaches the middleware as the handler's model or as the dict it is
    serialized to (camelCase keys), as the MCP SDK's own middleware reads it.
    """
    if isinstance(result, Mapping):
        return result.get("structuredContent") or {} if result.get("isError") is True else None
    if getattr(result, "is_error", False) is True:
        return getattr(result, "structured_content", None) or {}
    return None


# -- the ledger --------------------------------------------------------------------------


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


class _TracedLedger(WrappedLedger):
    """A span per append; each event records the trace and span of the call appending it."""

    def __init__(self, inner: AuditLedger, tracer: trace.Tracer) -> None:
        super().__init__(inner)
        self._tracer = tracer

    async def append(self, event: AuditEvent) -> int:
        call = trace.get_current_span()
        if not call.is_recording():
            # A call whose trace is not sampled (or no call at all): no span, and no trace
            # named in the event, which would point at a trace nobody keeps.
            return await self._inner.append(event)
        context = call.get_span_context()
        event = replace(
            event,
            trace_id=format_trace_id(context.trace_id),
            span_id=format_span_id(context.span_id),
        )
        attributes = event_attributes(event)
        # The call's span says what its events say; the phase and order are the ledger's.
        call.set_attributes({k: v for k, v in attributes.items() if k not in (PHASE, OCCURRENCE)})
        with self._tracer.start_as_current_span("ledger.append", attributes=attributes) as span:
            seq = await self._inner.append(event)
            span.set_attribute(LEDGER_SEQ, seq)
            return seq


class _CommitSpans:
    """The group commit's hook (sidecar.ledger.group_commit.CommitTracer)."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self._tracer = tracer

    def link(self) -> object:
        # Taken in the appender's task, within its ledger.append span.
        return trace.get_current_span().get_span_context()

    @contextlib.contextmanager
    def commit(self, links: Sequence[object]) -> Iterator[None]:
        sampled = [
            link
            for link in links
            if isinstance(link, SpanContext) and link.is_valid and link.trace_flags.sampled
        ]
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
            attributes={BATCH_SIZE: len(links)},
        ):
            yield


# -- the store --------------------------------------------------------------------------


def _store_result(error: BaseException) -> str:
    return error.code if isinstance(error, Refusal) else type(error).__name__


class _TracedStore(WrappedStore):
    """A span per store call, named after the operation, with the id it names. A write made
    one commit with its audit names the call's trace in its two events, as the traced
    ledger does for events it appends itself."""

    def __init__(self, inner: StoreClient, tracer: trace.Tracer) -> None:
        super().__init__(inner)
        self._tracer = tracer

    async def commit_write(
        self,
        intent: AuditEvent,
        call: StoreWrite,
        settle: Settle[_R],
        *,
        timeout: float | None,
        before: Callable[[], None] = nothing,
    ) -> _R:
        current = trace.get_current_span()
        if not current.is_recording():
            return await super().commit_write(intent, call, settle, timeout=timeout, before=before)
        context = current.get_span_context()
        trace_id, span_id = format_trace_id(context.trace_id), format_span_id(context.span_id)
        attributes = event_attributes(intent)
        current.set_attributes(
            {k: v for k, v in attributes.items() if k not in (PHASE, OCCURRENCE)}
        )

        written = [replace(intent, trace_id=trace_id, span_id=span_id)]

        def traced(answer: object) -> tuple[AuditEvent, _R]:
            outcome, result = settle(answer)
            written.append(replace(outcome, trace_id=trace_id, span_id=span_id))
            return written[-1], result

        started = time.time_ns()
        try:
            return await super().commit_write(
                written[0], call, traced, timeout=timeout, before=before
            )
        finally:
            # A span per event, as the traced ledger makes, over the job that made it durable;
            # the call's span says what its events say.
            for made in written[1:]:
                current.set_attributes(
                    {
                        k: v
                        for k, v in event_attributes(made).items()
                        if k not in (PHASE, OCCURRENCE)
                    }
                )
            for made in written:
                self._tracer.start_span(
                    "ledger.append", start_time=started, attributes=event_attributes(made)
                ).end()

    async def _around(self, operation: str, store_id: str, call: Awaitable[_T]) -> _T:
        if not trace.get_current_span().is_recording():
            return await call  # a call not sampled: no span of its store calls either
        with self._tracer.start_as_current_span(
            f"store.{operation}",
            kind=SpanKind.INTERNAL,
            attributes={STORE_OPERATION: operation, STORE_ID: store_id},
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                return await call
            except Refusal as refusal:
                # A refusal is the store's answer, not a fault: its code says which.
                span.set_attribute(STORE_RESULT, refusal.code)
                raise
            except Exception as error:
                span.set_attribute(STORE_RESULT, _store_result(error))
                span.set_status(Status(StatusCode.ERROR, type(error).__name__))
                raise
