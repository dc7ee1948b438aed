"""The Python agent of the tracing test: with OpenTelemetry's SDK exporting over OTLP as the
standard OTEL_* variables say, and the client's gRPC calls instrumented as the client's README
shows, it begins an attempt of run RUN, makes one create inside a span of its own, ends the
attempt, and prints that span's trace and span id and the write's id as one JSON line.

    python trace_agent.py TARGET RUN
"""

from __future__ import annotations

import json
import sys

from actonce_client import Client
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.grpc import GrpcInstrumentorClient
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor


def main(target: str, run_id: str) -> None:
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    GrpcInstrumentorClient().instrument()  # type: ignore[no-untyped-call]

    with Client(target) as client:
        attempt = client.begin(run_id, "traced", checkpoint="c")
        with trace.get_tracer("trace-agent").start_as_current_span("file ticket") as span:
            written = attempt.create("ticket", {"title": "Disk full", "agent": "python"})
        attempt.end()
    provider.shutdown()
    context = span.get_span_context()
    line = {"trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}",
            "id": written.id}  # fmt: skip
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:3])
