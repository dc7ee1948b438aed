"""A real OTLP receiver for tests: an OTLP/gRPC TraceService built from ``opentelemetry-proto``.

The OpenTelemetry Collector is a Go program too large to build for a test; what the
sidecar, the reference store and the clients speak to it is OTLP over gRPC, and this
receiver speaks the same protocol from the protocol's own generated stubs. It keeps
every export request, its bytes as they came off the wire, and offers the spans by
trace.

Use the ``otlp_receiver`` fixture (registered in tests/conftest.py), and point a
process at it with :meth:`OtlpReceiver.environment`::

    def test_x(otlp_receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch) -> None:
        for name, value in otlp_receiver.environment().items():
            monkeypatch.setenv(name, value)
        ...  # start a sidecar, make a call
        spans = otlp_receiver.wait_for_trace(trace_id, count=5)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass
from typing import Any, cast

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2


@dataclass(frozen=True)
class ReceivedSpan:
    """One exported span, with the service that exported it."""

    service: str
    scope: str
    span: trace_pb2.Span

    @property
    def name(self) -> str:
        return self.span.name

    @property
    def trace_id(self) -> str:
        return self.span.trace_id.hex()

    @property
    def span_id(self) -> str:
        return self.span.span_id.hex()

    @property
    def parent_span_id(self) -> str:
        return self.span.parent_span_id.hex()

    @property
    def kind(self) -> int:
        return int(self.span.kind)

    @property
    def attributes(self) -> dict[str, Any]:
        return {a.key: _value(a.value) for a in self.span.attributes}

    @property
    def links(self) -> list[tuple[str, str]]:
        """(trace id, span id) of each link."""
        return [(link.trace_id.hex(), link.span_id.hex()) for link in self.span.links]


def _value(value: common_pb2.AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind is not None else None


# The generated registration, as it is used here (the generated module has no type hints).
_add_trace_service = cast(
    Callable[[Any, grpc.Server], None], trace_service_pb2_grpc.add_TraceServiceServicer_to_server
)


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, receiver: OtlpReceiver) -> None:
        self._receiver = receiver

    def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: Any
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        self._receiver._received(request)
        return trace_service_pb2.ExportTraceServiceResponse()


class OtlpReceiver:
    """An OTLP/gRPC trace receiver on loopback, in threads of its own."""

    def __init__(self, *, credentials: grpc.ServerCredentials | None = None) -> None:
        """With ``credentials``, the receiver speaks TLS only, as a collector's secured
        receiver does."""
        self._lock = threading.Condition()
        self._requests: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        _add_trace_service(_TraceService(self), self._server)
        self.tls = credentials is not None
        self.port = (
            self._server.add_secure_port("127.0.0.1:0", credentials)
            if credentials is not None
            else self._server.add_insecure_port("127.0.0.1:0")
        )
        self._server.start()

    @property
    def endpoint(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def environment(self, **more: str) -> dict[str, str]:
        """The OTEL_* variables that send a process's traces here, exported within a
        few milliseconds of each span's end."""
        return {
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint,
            "OTEL_EXPORTER_OTLP_INSECURE": "true",
            "OTEL_BSP_SCHEDULE_DELAY": "20",
            **more,
        }

    def _received(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        with self._lock:
            self._requests.append(request)
            self._lock.notify_all()

    def exported_bytes(self) -> bytes:
        """Every export request received, as protobuf bytes, concatenated."""
        with self._lock:
            return b"".join(request.SerializeToString() for request in self._requests)

    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            requests = list(self._requests)
        found = []
        for request in requests:
            for resource_spans in request.resource_spans:
                service = next(
                    (
                        a.value.string_value
                        for a in resource_spans.resource.attributes
                        if a.key == "service.name"
                    ),
                    "",
                )
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        found.append(ReceivedSpan(service, scope_spans.scope.name, span))
        return found

    def wait_for(
        self, enough: Callable[[list[ReceivedSpan]], bool], timeout: float = 15.0
    ) -> list[ReceivedSpan]:
        """The spans once ``enough`` holds of them; AssertionError with what came if it
        does not within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                spans = self.spans()
                if enough(spans):
                    return spans
                left = deadline - time.monotonic()
                if left <= 0:
                    names = sorted((s.service, s.name) for s in spans)
                    raise AssertionError(f"the receiver did not get the spans awaited: {names}")
                self._lock.wait(left)

    def wait_for_trace(
        self, trace_id: str, *, count: int, timeout: float = 15.0
    ) -> list[ReceivedSpan]:
        """The spans of one trace, once at least ``count`` of them have come."""
        spans = self.wait_for(
            lambda spans: sum(s.trace_id == trace_id for s in spans) >= count, timeout
        )
        return [s for s in spans if s.trace_id == trace_id]

    def clear(self) -> None:
        with self._lock:
            self._requests.clear()

    def stop(self) -> None:
        self._server.stop(None)


@pytest.fixture
def otlp_receiver() -> Iterator[OtlpReceiver]:
    """A fresh OTLP receiver, stopped after the test."""
    receiver = OtlpReceiver()
    try:
        yield receiver
    finally:
        receiver.stop()
