"""Prometheus metrics of the sidecar: every metric, declared in one place.

Nothing here is called from a handler or a rule. Every number comes from one of
the places that sit around the domain code, or from the core's own word:

- the gRPC front's interceptor (:mod:`sidecar.fronts.grpc.metrics`), around every
  RunActionsService call: writes by RPC and outcome, refusals by reason and failure class,
  calls in flight, call latency; the MCP front through :meth:`Metrics.front_call`;
- the ledger's append hook and the store client's middleware
  (:mod:`sidecar.assembly.instruments`): append latency and failures, commit latency and
  batch size, store call latency by operation and result;
- the core, which tells of each re-read an edit makes after a VERSION_CONFLICT
  (``RunActions(on_reread=...)``, fed to ``version_conflict_rereads``).

Each sidecar has its own registry, so that several in one process (tests) do not
share counters; :class:`MetricsEndpoint` serves it as Prometheus text over HTTP.
"""

from __future__ import annotations

from collections.abc import Callable

from actonce_api.v1 import run_actions_pb2
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.exposition import start_http_server

from sidecar.errors import ActonceError

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


class Metrics:
    """The sidecar's metrics, in a registry of their own."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        # process_* (CPU, resident memory, open files, start time) of this process, as every
        # Prometheus client exports them, so the usual dashboards and alerts apply.
        ProcessCollector(registry=r)
        self.writes = Counter(
            "writes", "Writes answered, by RPC and outcome (applied, already_applied, "
            "skipped; failed when refused, cancelled when the call was cut off).",
            ["rpc", "outcome"], namespace=NAMESPACE, registry=r,
        )  # fmt: skip
        self.refusals = Counter(
            "refusals", "Calls refused, by RPC, ErrorInfo reason and failure class.",
            ["rpc", "reason", "failure_class"], namespace=NAMESPACE, registry=r,
        )  # fmt: skip
        self.in_flight = Gauge(
            "in_flight_requests", "RunActionsService calls being handled now, by RPC.",
            ["rpc"], namespace=NAMESPACE, registry=r,
        )  # fmt: skip
        self.request_seconds = Histogram(
            "request_seconds", "Time to answer a RunActionsService call, by RPC and status code.",
            ["rpc", "code"], namespace=NAMESPACE, registry=r, buckets=_LATENCY_BUCKETS,
        )  # fmt: skip
        self.audit_append_seconds = Histogram(
            "audit_append_seconds", "Time until an audit event was durable (or failed), "
            "as the write waiting for it saw it.",
            namespace=NAMESPACE, registry=r, buckets=_LATENCY_BUCKETS,
        )  # fmt: skip
        self.audit_append_failures = Counter(
            "audit_append_failures", "Audit events the ledger could not make durable.",
            namespace=NAMESPACE, registry=r,
        )  # fmt: skip
        self.audit_commit_seconds = Histogram(
            "audit_commit_seconds", "Time of one group commit of the ledger.",
            namespace=NAMESPACE, registry=r, buckets=_LATENCY_BUCKETS,
        )  # fmt: skip
        self.audit_commit_events = Histogram(
            "audit_commit_events", "Audit events written by one group commit.",
            namespace=NAMESPACE, registry=r, buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
        )  # fmt: skip
        self.store_call_seconds = Histogram(
            "store_call_seconds", "Time of a call to the artifact store, by operation (the "
            "store client's method) and result (ok, the store's refusal code, unavailable, "
            "deadline_exceeded).",
            ["operation", "result"], namespace=NAMESPACE, registry=r, buckets=_LATENCY_BUCKETS,
        )  # fmt: skip
        self.version_conflict_rereads = Counter(
            "version_conflict_rereads", "Re-reads of an artifact after the store refused an "
            "edit with VERSION_CONFLICT.",
            namespace=NAMESPACE, registry=r,
        )  # fmt: skip
        self.attempts_forgotten = Counter(
            "attempts_forgotten", "Attempts forgotten before they ended, by why: idle past "
            "--attempt-idle-ttl, or pressure (past --attempt-max-count or --attempt-max-mib). "
            "Their later calls get UNKNOWN_ATTEMPT.",
            ["reason"], namespace=NAMESPACE, registry=r,
        )  # fmt: skip
        self.live_attempts = Gauge(
            "live_attempts", "Attempts this sidecar holds in memory.",
            namespace=NAMESPACE, registry=r,
        )  # fmt: skip
        self.front_calls = Counter(
            "front_calls", "Calls answered, by the front they came through (grpc, mcp), "
            "RPC (or gateway tool) and outcome (applied, already_applied, skipped; ok for a "
            "read; failed when refused).",
            ["front", "rpc", "outcome"], namespace=NAMESPACE, registry=r,
        )  # fmt: skip
        self.draining = Gauge(
            "draining", "1 once SIGTERM was received and the sidecar takes no new calls.",
            namespace=NAMESPACE, registry=r,
        )  # fmt: skip
        # Set only when the sidecar traces (sidecar.ops.tracing): the latency histograms
        # then carry the current trace as an exemplar, seen when scraped as OpenMetrics.
        self.exemplar: Callable[[], dict[str, str] | None] | None = None

    def observe(self, histogram: Histogram, seconds: float) -> None:
        """``seconds`` into ``histogram`` (a child with its labels), with the trace's
        exemplar when the sidecar traces."""
        exemplar = self.exemplar
        histogram.observe(seconds, exemplar() if exemplar is not None else None)

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


class MetricsEndpoint:
    """Prometheus text over HTTP on ``listen`` (HOST:PORT), from a thread of its own."""

    def __init__(self, listen: str, metrics: Metrics) -> None:
        host, _, port = listen.rpartition(":")
        try:
            # "[::]:9464" names an IPv6 address; the HTTP server wants it bare.
            self._server, self._thread = start_http_server(
                int(port), addr=host.strip("[]"), registry=metrics.registry
            )
        except OSError as exc:
            raise OSError(f"could not serve metrics on {listen}: {exc.strerror}") from None
        self.port: int = self._server.server_port

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
