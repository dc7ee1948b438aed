"""With OpenTelemetry's gRPC instrumentation, as the README shows, each call is a
client span under the agent's own span, and the sidecar receives its W3C trace
context; without it the client sends none.

The server here records the headers each call arrives with. It stands in for the
transport, not for the sidecar, whose own spans the cross-language tracing test
checks.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest
from opentelemetry import trace
from opentelemetry.instrumentation.grpc import GrpcInstrumentorClient
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc
from actonce_client import Client


class Headers(pb_grpc.RunActionsServiceServicer):
    def __init__(self) -> None:
        self.traceparents: list[str] = []

    def BeginAttempt(
        self, request: pb.BeginAttemptRequest, context: grpc.ServicerContext
    ) -> pb.BeginAttemptResponse:
        headers = dict(context.invocation_metadata())
        self.traceparents.append(str(headers.get("traceparent", "")))
        return pb.BeginAttemptResponse(attempt_id="att_1")


@pytest.fixture(scope="module")
def recorder() -> InMemorySpanExporter:
    """The process's global TracerProvider, as an agent sets it up, recording in memory.

    The instrumentation reads the global provider, and OpenTelemetry lets a process set it
    once: an SDK provider already there gets this exporter added instead.
    """
    exporter = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


@pytest.fixture
def spans(recorder: InMemorySpanExporter) -> InMemorySpanExporter:
    recorder.clear()
    return recorder


@pytest.fixture
def headers() -> Iterator[tuple[str, Headers]]:
    servicer = Headers()  # type: ignore[abstract]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_RunActionsServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}", servicer
    server.stop(None)


def test_the_agents_span_is_the_parent_of_the_call_and_the_sidecar_receives_it(
    headers: tuple[str, Headers], spans: InMemorySpanExporter
) -> None:
    target, servicer = headers
    instrumentor = GrpcInstrumentorClient()  # type: ignore[no-untyped-call]
    instrumentor.instrument()
    try:
        with (
            Client(target) as client,
            trace.get_tracer("agent").start_as_current_span("triage") as agent,
        ):
            client.begin("run-1", "rule")
    finally:
        instrumentor.uninstrument()

    [call] = [s for s in spans.get_finished_spans() if s.name.endswith("/BeginAttempt")]
    assert call.kind is SpanKind.CLIENT
    assert call.parent is not None
    assert call.parent.span_id == agent.get_span_context().span_id
    assert call.context.trace_id == agent.get_span_context().trace_id
    [traceparent] = servicer.traceparents
    version, trace_id, parent_id, flags = traceparent.split("-")
    assert (version, trace_id, parent_id) == (
        "00", f"{call.context.trace_id:032x}", f"{call.context.span_id:016x}")  # fmt: skip
    assert int(flags, 16) & 1, "sampled"  # W3C's random-trace-id flag may be set beside it


def test_without_the_instrumentation_no_trace_context_is_sent(
    headers: tuple[str, Headers], spans: InMemorySpanExporter
) -> None:
    target, servicer = headers
    with (
        Client(target) as client,
        trace.get_tracer("agent").start_as_current_span("triage"),
    ):
        client.begin("run-1", "rule")
    assert servicer.traceparents == [""]
    assert [s.name for s in spans.get_finished_spans() if s.kind is SpanKind.CLIENT] == []
