"""Prometheus metrics of the sidecar: every metric, declared in one place.

Nothing here is called from a handler or a rule. Every number comes from one of
the places that sit around the domain code, or from the core's own word:

- the gRPC front's interceptor, the ledger's append hook and the store client's middleware
  (:mod:`sidecar.assembly.instruments`): writes by RPC and outcome, refusals by reason and
  failure class, calls in flight, call latency; append latency and failures, commit latency
  and batch size, store call latency by operation and result; the MCP front through
  :meth:`Metrics.front_call`;
- the core, which tells of each re-read an edit makes after a VERSION_CONFLICT
  (``RunActions(on_reread=...)``, fed to ``version_conflict_rereads``).

Each sidecar has its own registry, so that several in one process (tests) do not
share counters; :class:`MetricsEndpoint` serves it as Prometheus text over HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus

import structlog
from actonce_api.v1 import run_actions_pb2
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.exposition import choose_encoder

from sidecar import defaults
from sidecar.errors import ActonceError, FailureClass

log = structlog.get_logger()

NAMESPACE = "actonce"

# A `_created` gauge beside every counter and histogram doubles the series a scrape stores,
# and nothing here reads it: rate() and increase() already handle a restart. (The function
# has no annotations in prometheus_client.)
disable_created_metrics()  # type: ignore[no-untyped-call]

# A write is any RPC whose answer carries an Outcome; read from the descriptor so
# that a write RPC added to the proto is counted without a change here.
_RUN_ACTIONS = run_actions_pb2.DESCRIPTOR.services_by_name["RunActionsService"]
WRITE_RPCS: frozenset[str] = frozenset(
    method.name for method in _RUN_ACTIONS.methods if "outcome" in method.output_type.fields_by_name
)

# Local disk and a LAN database: most appends take well under 100 ms, and a slow
# one (a saturated disk, a locked ledger) is what the upper buckets are for.
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


# Sizes of one group commit, in audit events, each bucket twice the last.
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class Metrics:
    """The sidecar's metrics, in a registry of their own."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        # process_* (CPU, resident memory, open files, start time) of this process, as every
        # Prometheus client exports them, so the usual dashboards and alerts apply.
        ProcessCollector(registry=self.registry)
        self._declare_call_metrics()
        self._declare_ledger_metrics()
        self._declare_store_metrics()
        self._declare_attempt_metrics()
        self._declare_front_metrics()
        # Set only when the sidecar traces (sidecar.ops.tracing): the latency histograms
        # then carry the current trace as an exemplar, seen when scraped as OpenMetrics.
        self.exemplar: Callable[[], dict[str, str] | None] | None = None

    def _declare_call_metrics(self) -> None:
        self.writes = self._counter(
            "writes",
            "Writes answered, by RPC and outcome (applied, already_applied, "
            "skipped; failed when refused, cancelled when the call was cut off).",
            ["rpc", "outcome"],
        )
        self.refusals = self._counter(
            "refusals",
            "Calls refused, by RPC, ErrorInfo reason and failure class.",
            ["rpc", "reason", "failure_class"],
        )
        self.in_flight = self._gauge(
            "in_flight_requests", "RunActionsService calls being handled now, by RPC.", ["rpc"]
        )
        self.request_seconds = self._histogram(
            "request_seconds",
            "Time to answer a RunActionsService call, by RPC and status code.",
            ["rpc", "code"],
        )

    def _declare_ledger_metrics(self) -> None:
        self.audit_append_seconds = self._histogram(
            "audit_append_seconds",
            "Time until an audit event was durable (or failed), "
            "as the write waiting for it saw it.",
        )
        self.audit_append_failures = self._counter(
            "audit_append_failures", "Audit events the ledger could not make durable."
        )
        self.audit_commit_seconds = self._histogram(
            "audit_commit_seconds", "Time of one group commit of the ledger."
        )
        self.audit_commit_events = self._histogram(
            "audit_commit_events",
            "Audit events written by one group commit.",
            buckets=_BATCH_BUCKETS,
        )

    def _declare_store_metrics(self) -> None:
        self.store_call_seconds = self._histogram(
            "store_call_seconds",
            "Time of a call to the artifact store, by operation (the "
            "store client's method) and result (ok, the store's refusal code, unavailable, "
            "deadline_exceeded).",
            ["operation", "result"],
        )
        self.version_conflict_rereads = self._counter(
            "version_conflict_rereads",
            "Re-reads of an artifact after the store refused an edit with VERSION_CONFLICT.",
        )

    def _declare_attempt_metrics(self) -> None:
        self.attempts_forgotten = self._counter(
            "attempts_forgotten",
            "Attempts forgotten before they ended, by why: idle past "
            "--attempt-idle-ttl, or pressure (past --attempt-max-count or --attempt-max-mib). "
            "Their later calls get UNKNOWN_ATTEMPT.",
            ["reason"],
        )
        self.live_attempts = self._gauge("live_attempts", "Attempts this sidecar holds in memory.")

    def _declare_front_metrics(self) -> None:
        self.front_calls = self._counter(
            "front_calls",
            "Calls answered, by the front they came through (grpc, mcp), "
            "RPC (or gateway tool) and outcome (applied, already_applied, skipped; ok for a "
            "read; failed when refused).",
            ["front", "rpc", "outcome"],
        )
        self.draining = self._gauge(
            "draining", "1 once SIGTERM was received and the sidecar takes no new calls."
        )
        self.gateway_effects_findings = self._gauge(
            "gateway_effects_findings",
            "Entries of the MCP gateway's effects file that their upstream's last listing "
            "contradicts, by upstream and problem (key_argument_not_in_schema, "
            "key_meta_not_declared, tool_not_listed): each such tool is called unkeyed.",
            ["upstream", "problem"],
        )

    def effects_findings(self, upstream: str, counts: Mapping[str, int]) -> None:
        """The gateway's findings in ``upstream``'s last listing, each problem counted."""
        for problem, count in counts.items():
            self.gateway_effects_findings.labels(upstream=upstream, problem=problem).set(count)

    def _counter(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Counter:
        return Counter(name, documentation, labels, namespace=NAMESPACE, registry=self.registry)

    def _gauge(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Gauge:
        return Gauge(name, documentation, labels, namespace=NAMESPACE, registry=self.registry)

    def _histogram(
        self,
        name: str,
        documentation: str,
        labels: Sequence[str] = (),
        buckets: Sequence[float] = _LATENCY_BUCKETS,
    ) -> Histogram:
        return Histogram(
            name,
            documentation,
            labels,
            namespace=NAMESPACE,
            registry=self.registry,
            buckets=buckets,
        )

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


# -- the HTTP endpoint -------------------------------------------------------------


@dataclass(frozen=True)
class EndpointLimits:
    """The other HTTP fronts' limits (sidecar.ops.http_server), for the metrics port: the
    head of a request within ``header_seconds`` of the connection, ``max_header_bytes`` of
    it, ``max_connections`` open at once, and an answer taken within ``read_seconds``."""

    header_seconds: float = defaults.HTTP_HEADER_TIMEOUT_SECONDS
    read_seconds: float = defaults.HTTP_READ_TIMEOUT_SECONDS
    max_connections: int = defaults.HTTP_MAX_CONNECTIONS
    max_header_bytes: int = defaults.HTTP_MAX_HEADER_BYTES


class MetricsEndpoint:
    """Prometheus text over HTTP on ``listen`` (HOST:PORT), at any path, on the event loop.

    prometheus_client's own server gave each connection a thread and no deadline: a client
    that sent half a request held its thread for ever (1,500 of them, 1,513 threads). Here
    each connection is a task on the sidecar's loop, under the limits every HTTP front of
    the sidecar has (:class:`EndpointLimits`); only a scrape's rendering runs in a thread of
    the loop's bounded pool, since a collector (the pending gauge) reads the ledger. One
    request a connection: the answer says ``Connection: close``.
    """

    def __init__(self, server: asyncio.Server, metrics: Metrics, limits: EndpointLimits) -> None:
        self._server = server
        self._metrics = metrics
        self._limits = limits
        self._writers: set[asyncio.StreamWriter] = set()
        self.port: int = server.sockets[0].getsockname()[1]

    @classmethod
    async def open(
        cls, listen: str, metrics: Metrics, limits: EndpointLimits | None = None
    ) -> MetricsEndpoint:
        limits = limits or EndpointLimits()
        host, _, port = listen.rpartition(":")
        endpoint: MetricsEndpoint | None = None

        async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            assert endpoint is not None
            await endpoint._connection(reader, writer)

        try:
            # "[::]:9464" names an IPv6 address; the socket wants it bare.
            server = await asyncio.start_server(
                connected, host.strip("[]"), int(port), limit=limits.max_header_bytes
            )
        except OSError as exc:
            raise OSError(f"could not serve metrics on {listen}: {exc.strerror}") from None
        endpoint = cls(server, metrics, limits)
        return endpoint

    async def close(self) -> None:
        self._server.close()
        # A connection still open is cut: a scrape in hand has no reason to outlive it.
        for writer in list(self._writers):
            writer.close()
        await self._server.wait_closed()

    @property
    def connections(self) -> int:
        """Connections open now."""
        return len(self._writers)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._writers) >= self._limits.max_connections:
            message = f"{self._limits.max_connections} connections are open; try again later"
            writer.write(_refusal(503, "TOO_MANY_CONNECTIONS", message))
            writer.close()
            return
        self._writers.add(writer)
        try:
            answer = await self._answer(reader)
            if answer is not None:
                await self._send(writer, answer)
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _answer(self, reader: asyncio.StreamReader) -> bytes | None:
        """The answer to the connection's one request; None when the client went away."""
        limits = self._limits
        try:
            async with asyncio.timeout(limits.header_seconds):
                head = await reader.readuntil(b"\r\n\r\n")
        except TimeoutError:
            log.info("http_request_timeout", front="metrics")
            message = f"the request's head did not arrive within {limits.header_seconds:g} s"
            return _refusal(408, "REQUEST_TIMEOUT", message)
        except asyncio.LimitOverrunError:
            message = f"the request's head is over {limits.max_header_bytes} bytes"
            return _refusal(431, "HEADERS_TOO_LARGE", message)
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        lines = head.decode("latin-1").split("\r\n")
        method = lines[0].split(" ", 1)[0]
        if method not in ("GET", "HEAD"):
            message = "the metrics answer GET and HEAD"
            return _refusal(405, "METHOD_NOT_ALLOWED", message, FailureClass.PERMANENT)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, text = line.partition(":")
            headers.setdefault(name.strip().lower(), text.strip())
        encode, content_type = choose_encoder(headers.get("accept", ""))
        body = await asyncio.to_thread(encode, self._metrics.registry)
        extra = b""
        if "gzip" in headers.get("accept-encoding", ""):
            body, extra = gzip.compress(body), b"content-encoding: gzip\r\n"
        answer = _head(200, content_type, len(body)) + extra + b"\r\n"
        return answer if method == "HEAD" else answer + body

    async def _send(self, writer: asyncio.StreamWriter, answer: bytes) -> None:
        # A client that does not read its answer holds it no longer than a request may take.
        writer.write(answer)
        with contextlib.suppress(TimeoutError, ConnectionError):
            async with asyncio.timeout(self._limits.read_seconds):
                await writer.drain()


def _head(status: int, content_type: str, length: int) -> bytes:
    return (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
        f"content-type: {content_type}\r\n"
        f"content-length: {length}\r\n"
        "connection: close\r\n"
        "x-content-type-options: nosniff\r\n"
        "cache-control: no-store\r\n"
    ).encode()


def _refusal(
    status: int,
    reason: str,
    message: str,
    failure_class: FailureClass = FailureClass.RETRYABLE,
) -> bytes:
    # The JSON of every HTTP refusal of the sidecar (sidecar.ops.http_guard's shape).
    body = json.dumps(
        {"reason": reason, "failure_class": failure_class.value, "message": message}
    ).encode()
    return _head(status, "application/json", len(body)) + b"\r\n" + body
