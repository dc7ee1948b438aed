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

Each audit event records the trace and span ids of the call that wrote it, and the latency
histograms carry the trace id as an exemplar (:meth:`Tracing.exemplar`).

This module holds the provider and what it gives each part that knows none of the sidecar's
seams: the gRPC instrumentation's interceptors, the MCP front's spans. The spans on the seams
are beside the seams' other middleware: the call's span on the gRPC front
(:mod:`sidecar.fronts.grpc.spans`), the ledger's and the store client's in
:mod:`sidecar.assembly.traces`. All of them are imported only when traces are asked for, so
that a sidecar without traces loads none of OpenTelemetry.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

import grpc
from actonce_api.store.v1 import artifact_store_pb2
from actonce_api.v1 import run_actions_pb2
from opentelemetry import propagate, trace
from opentelemetry.instrumentation.grpc import aio_client_interceptors, aio_server_interceptor
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
)
from opentelemetry.trace import SpanKind
from opentelemetry.trace.span import format_span_id, format_trace_id

from sidecar.ops import tracing_settings

# The instrumentation's factories, as they are used here (the package has no type hints).
_server_interceptor = cast(Callable[..., grpc.aio.ServerInterceptor], aio_server_interceptor)
_client_interceptors = cast(
    Callable[..., list[grpc.aio.ClientInterceptor]], aio_client_interceptors
)

# The services whose calls are traced, by their full names.
RUN_ACTIONS_SERVICE = run_actions_pb2.DESCRIPTOR.services_by_name["RunActionsService"].full_name
STORE_SERVICE_NAME = artifact_store_pb2.DESCRIPTOR.services_by_name[
    "ArtifactStoreService"
].full_name

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

    def run_actions_interceptor(self) -> grpc.aio.ServerInterceptor:
        """The SERVER span of each RunActionsService call (health and reflection are not
        traced); the gRPC front names it and gives it its status
        (sidecar.fronts.grpc.spans)."""
        only_run_actions = _service_filter(RUN_ACTIONS_SERVICE)
        provider = CurrentNames(self.provider)
        return _server_interceptor(tracer_provider=provider, filter_=only_run_actions)

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
