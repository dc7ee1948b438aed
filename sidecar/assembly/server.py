"""Building and running the sidecar: ``create_server(config) -> (server, port)``.

Kept apart from ``main()`` so that tests start real servers on port 0. The
embedded default runs the reference store in the same process and the
ledger on a SQLite file; ``store_target`` points at an external store.

Longer than most modules, on purpose: it is where every part is chosen and
wired (ledger, store client, the core, interceptors, health, reflection, metrics,
traces, the MCP front) and where they are closed again in order, in one reading.
The metrics and the traces are put around each seam in one way: the ledger's append
hooks (``GroupCommitLedger.watch``), the store client's middleware (a StoreClient around
another), and the gRPC server's interceptors.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import secrets
import signal
import tempfile
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import structlog
from actonce_api.v1 import run_actions_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from sidecar.assembly.instruments import TimedAppends, TimedStore
from sidecar.assembly.pending_metrics import PendingCollector
from sidecar.config import Config
from sidecar.core.actions import RunActions
from sidecar.core.attempts import PRESSURE, Attempt, AttemptRegistry
from sidecar.core.types import Settings
from sidecar.fronts.grpc import servicer
from sidecar.fronts.grpc.drain import LINGER_SECONDS, CallGate
from sidecar.fronts.grpc.interceptors import LogContextInterceptor, RequestDecodingInterceptor
from sidecar.fronts.grpc.metrics import MetricsInterceptor
from sidecar.fronts.grpc.status import to_grpc_status
from sidecar.ledger.base import AuditLedger
from sidecar.ledger.group_commit import GroupCommitLedger
from sidecar.ledger.liveness import Heartbeat, open_heartbeat
from sidecar.ledger.operator import OperatorLedger, open_operator_ledger
from sidecar.ledger.sqlite import SqliteLedger
from sidecar.ops import auth, files, limits, reflection, security, tracing_settings
from sidecar.ops.listening import SERVER_OPTIONS, bind
from sidecar.ops.metrics import Metrics, MetricsEndpoint
from sidecar.ops.probes import LIVENESS_SERVICE, create_health_server
from sidecar.refstore.backend import StoreBackend
from sidecar.refstore.server import create_store_server
from sidecar.refstore.sqlite import SqliteStoreBackend
from sidecar.upstream.base import StoreClient, ping
from sidecar.upstream.grpc import GrpcStoreClient, connect_store
from sidecar.upstream.inprocess import InProcessStoreClient

log = structlog.get_logger()

SERVICE_NAME = run_actions_pb2.DESCRIPTOR.services_by_name["RunActionsService"].full_name


@dataclass
class Sidecar:
    """A built sidecar: its gRPC server and what it must close on stop."""

    server: grpc.aio.Server
    actions: RunActions
    ledger: AuditLedger
    # The store client the core calls (its middleware around the transport), and the
    # transport itself, which the assembly made and closes.
    store: StoreClient
    upstream: GrpcStoreClient | InProcessStoreClient
    health: health.aio.HealthServicer
    store_target: str = ""
    embedded_store: grpc.aio.Server | None = None
    embedded_backend: StoreBackend | None = None
    interval_seconds: float = 1.0
    gate: CallGate = field(default_factory=CallGate)
    metrics: Metrics = field(default_factory=Metrics)
    # The probe-only health port (--health-listen) and the metrics endpoint.
    health_server: grpc.aio.Server | None = None
    health_port: int = 0
    metrics_listen: str | None = None
    metrics_endpoint: MetricsEndpoint | None = None
    # The MCP front (--mcp-listen), and the port it is bound to.
    mcp: McpListener | None = None
    mcp_port: int = 0
    # Traces, when the OTEL_* variables ask for them (sidecar.ops.tracing); else None.
    tracing: Tracing | None = None
    # Says in the ledger that this sidecar is alive (sidecar.ledger.liveness).
    heartbeat: Heartbeat | None = None
    _health_task: asyncio.Task[None] | None = None
    _stopped: bool = field(default=False)

    async def start(self) -> None:
        # First what can fail on a taken port, before anything else is serving.
        if self.metrics_listen is not None:
            self.metrics_endpoint = MetricsEndpoint(self.metrics_listen, self.metrics)
        if self.embedded_store is not None:
            await self.embedded_store.start()
        await self.server.start()
        if self.mcp is not None:
            await self.mcp.start()
        if self.health_server is not None:
            await self.health_server.start()
        await self.health.set(LIVENESS_SERVICE, health_pb2.HealthCheckResponse.SERVING)
        await self.check_health()
        self._health_task = asyncio.create_task(self._watch_health())
        if self.heartbeat is not None:
            self.heartbeat.start()

    async def check_health(self) -> bool:
        """SERVING only when both the ledger and the store answer."""
        try:
            # Bounded here as well as in each backend: a ledger or store that stopped
            # answering turns readiness NOT_SERVING within one probe period.
            async with asyncio.timeout(HEALTH_CHECK_SECONDS):
                await self.ledger.ping()
                await ping(self.upstream)
            serving = True
        except Exception as exc:  # any failure to answer, of either, is NOT_SERVING
            log.warning("health_check_failed", error=str(exc))
            serving = False
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ("", SERVICE_NAME):
            await self.health.set(name, status)
        return serving

    async def _watch_health(self) -> None:
        while True:
            await asyncio.sleep(self.interval_seconds)
            await self.check_health()

    async def stop(self, grace: float | None = None) -> None:
        """Drain, then close, all within ``grace`` seconds: no new calls, calls in flight
        get the grace less what closing keeps (CLOSE_RESERVE_SECONDS at most) and less
        the linger after a cut (LINGER_SECONDS at most), and the ledger is flushed and
        closed, then the store it may share a file with. ``None`` or 0 cuts calls in flight
        at once.

        Every call the sidecar receives is answered, never cancelled (sidecar.fronts.grpc.drain):
        calls still running when their time runs out, and calls that arrive while the
        agents stop calling, are refused SHUTTING_DOWN. The server stops only once its
        callers are quiet, or when closing must begin; after a cut too, since the callers
        whose calls were cut, and agents that only start now, still call. Each step of
        closing is bounded by what is left of the grace (and at least
        CLOSE_STEP_FLOOR_SECONDS), so that a ledger or a store that stopped answering
        cannot hold the exit.
        """
        if self._stopped:
            return
        self._stopped = True
        loop = asyncio.get_running_loop()
        began = loop.time()
        final = began + (grace or 0.0)
        # The grace, in three: calls in flight, the linger after a cut, closing.
        closing_at = final - min(CLOSE_RESERVE_SECONDS, (grace or 0.0) / 2)
        calls_deadline = closing_at - min(LINGER_SECONDS, (closing_at - began) / 2)
        self.gate.close()
        self.metrics.draining.set(1)
        if self._health_task is not None:
            self._health_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._health_task
        # Readiness turns NOT_SERVING; liveness stays SERVING until the end, so that
        # the kubelet does not restart the sidecar in the middle of its drain.
        for name in ("", SERVICE_NAME):
            await self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        if self.mcp is not None:
            # No new MCP calls; those under way finish (uvicorn's own graceful shutdown).
            await self.mcp.stop()
        if self.gate.in_flight:
            log.info("draining_calls", in_flight=self.gate.in_flight)
            try:
                async with asyncio.timeout_at(calls_deadline):
                    await self.gate.wait_idle()
            except TimeoutError:
                log.warning("drain_grace_ran_out", cut=await self.gate.cut())
        # Agents that are still calling get SHUTTING_DOWN and stop; once they are quiet,
        # grpc's server has no call left in its queue to cancel when it stops.
        await self.health.enter_graceful_shutdown()
        if not await self.gate.wait_quiet(closing_at):
            log.warning("drain_callers_still_calling", refused=self.gate.refused)

        # The process itself still has to exit after closing: its share comes off the end.
        closed_by = final - min(EXIT_RESERVE_SECONDS, (grace or 0.0) / 10)

        def left() -> float:
            return max(CLOSE_STEP_FLOOR_SECONDS, closed_by - loop.time())

        await self.server.stop(left())
        log.info("stopped_serving", seconds=round(loop.time() - began, 3))
        if self.health_server is not None:
            await self.health_server.stop(None)
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.close()
        # A write whose caller gave up (or was cut) runs to its end before its store
        # and ledger go.
        await _bounded("writes", self.actions.settle(), left())
        if self.heartbeat is not None:
            await _bounded("heartbeat", self.heartbeat.stop(), left())
        await _bounded("store_client", self.upstream.close(), left())
        if self.embedded_store is not None:
            await self.embedded_store.stop(0)
        # The ledger before the embedded store's backend: in a data folder of one file the
        # ledger's last events are written through the backend's connection.
        await _bounded("ledger", self.ledger.close(), left())
        if self.embedded_backend is not None:
            closing = asyncio.to_thread(self.embedded_backend.close)
            await _bounded("store_backend", closing, left())
        if self.tracing is not None:
            # The spans of the last calls leave before the process does.
            await _bounded("tracing", asyncio.to_thread(self.tracing.shutdown), left())
        log.info("closed", seconds=round(loop.time() - began, 3))


# A health check answers within this, or readiness turns NOT_SERVING: well within the
# manifest's readiness period (5 s), and longer than the ledger's own bound on a ping.
HEALTH_CHECK_SECONDS = 3.0
# Of the grace period, up to this much (and at most half) is kept for closing: the
# writes whose callers were cut, then the store and the ledger.
CLOSE_RESERVE_SECONDS = 2.0
# Of the grace, this much (and at most a tenth) is kept for the interpreter to exit once
# everything is closed (its threads joined, its modules torn down), so that the process is
# gone within the grace even when the writes cut by the drain wait on a store to the end.
EXIT_RESERVE_SECONDS = 0.5
# Each step of closing gets what is left of the grace, and at least this: a ledger or a
# store that stopped answering (a frozen host, a cut network) holds the exit no longer.
CLOSE_STEP_FLOOR_SECONDS = 0.5


async def _bounded(step: str, closing: Awaitable[None], seconds: float) -> None:
    began = time.monotonic()
    try:
        await asyncio.wait_for(closing, seconds)
        log.debug("closed", step=step, seconds=round(time.monotonic() - began, 3))
    except TimeoutError:
        log.warning("close_timed_out", step=step, seconds=round(seconds, 3))
    except Exception as exc:  # closing is best effort: the process is leaving
        log.warning("close_failed", step=step, error=str(exc))


def embedded_store_socket(data_dir: Path) -> str:
    """Where the embedded store listens: a Unix socket in the data folder.

    A socket path is limited to about 100 bytes; a deeper data folder gets a
    private temporary folder instead.
    """
    files.private_folder(data_dir)
    path = data_dir.resolve() / "store.sock"
    if len(str(path)) > 100:
        path = Path(tempfile.mkdtemp(prefix="actonce-")) / "store.sock"
    path.unlink(missing_ok=True)  # left by a process that was killed
    return f"unix:{path}"


def open_ledger(config: Config) -> GroupCommitLedger:
    """The ledger the configuration names: PostgreSQL when given a DSN, else SQLite."""
    if config.audit_dsn:
        from sidecar.ledger.postgres import PostgresLedger

        return PostgresLedger(config.audit_dsn, lock_timeout_ms=config.audit_busy_timeout_ms)
    if config.audit_db is None:
        files.private_folder(config.data_dir)
    return SqliteLedger(config.audit_path, busy_timeout_ms=config.audit_busy_timeout_ms)


def attempt_registry(config: Config, metrics: Metrics) -> AttemptRegistry:
    """Live attempts within the configured bounds; each one forgotten early is counted,
    and logged when memory pressure forced it (its run will see UNKNOWN_ATTEMPT)."""

    def forgotten(attempt: Attempt, why: str) -> None:
        metrics.attempts_forgotten.labels(why).inc()
        if why == PRESSURE:
            log.warning(
                "attempt_forgotten_under_pressure",
                run_id=attempt.run_id,
                forgotten_attempt_id=attempt.attempt_id,
            )

    registry = AttemptRegistry(
        idle_ttl_seconds=config.attempt_idle_ttl_seconds,
        max_attempts=config.attempt_max_count,
        max_bytes=config.attempt_max_mib << 20,
        on_forget=forgotten,
    )
    metrics.live_attempts.set_function(lambda: len(registry))
    return registry


def open_store_backend(config: Config) -> StoreBackend:
    """The embedded store's backend: PostgreSQL when given a DSN, else SQLite."""
    if config.store_dsn:
        from sidecar.refstore.postgres import PostgresStoreBackend

        # Past the store timeout the caller has given up: its connection is cut then,
        # so that a database that stopped answering holds no thread for long.
        return PostgresStoreBackend(config.store_dsn, call_timeout=config.store_timeout_seconds)
    if config.audit_db is None:
        files.private_folder(config.data_dir)
    return SqliteStoreBackend(config.store_path)


def _operator_ledger(config: Config) -> OperatorLedger:
    return open_operator_ledger(config.audit_path, config.audit_dsn, read_only=True)


async def create_server(
    config: Config, *, ledger: AuditLedger | None = None
) -> tuple[Sidecar, int]:
    """Build the sidecar (not yet started) and return it with its bound port.

    ``ledger`` replaces the configured one, as it is (no hook watches it); only benchmarks
    pass it (to measure the sidecar without audit), and no flag or setting reaches it.
    Traces are on when the ``OTEL_*`` variables ask for them (sidecar.ops.tracing).
    """
    traces = _tracing()
    metrics = Metrics()
    api_token = auth.load(config.api_token_file)
    if config.metrics_listen is not None and ledger is None:
        metrics.registry.register(PendingCollector(partial(_operator_ledger, config)))
    gate = CallGate()
    heartbeat = None
    if ledger is None:
        heartbeat = open_heartbeat(
            f"sc_{secrets.token_hex(8)}", config.audit_path, config.audit_dsn
        )
    backend: StoreBackend | None = None
    shared: SqliteLedger | None = None
    if ledger is None and config.one_file:
        # One file: the store's connection is its one writer, and the ledger writes through
        # it; a write of one store call then commits with its audit as one transaction.
        # The file's lock is the ledger's: its busy timeout is the ledger's too.
        files.private_folder(config.data_dir)
        sqlite_backend = SqliteStoreBackend(
            config.store_path, busy_timeout_ms=config.audit_busy_timeout_ms
        )
        backend = sqlite_backend
        shared = SqliteLedger(
            config.audit_path, through=sqlite_backend, busy_timeout_ms=config.audit_busy_timeout_ms
        )
    if ledger is None:
        ledger = _watched(shared if shared is not None else open_ledger(config), metrics, traces)
    if traces is not None:
        metrics.exemplar = traces.exemplar
    embedded: grpc.aio.Server | None = None
    upstream: GrpcStoreClient | InProcessStoreClient
    if config.store_target:
        target = config.store_target
        # TLS and the token apply to an external store only.
        upstream = connect_store(
            target,
            tls=security.store_tls(
                config.store_tls_ca, config.store_tls_cert, config.store_tls_key
            ),
            token_file=config.store_token_file,
            timeout_seconds=config.store_timeout_seconds,
            interceptors=traces.store_client_interceptors(target) if traces is not None else (),
        )
    else:
        backend = backend if backend is not None else open_store_backend(config)
        # The embedded store still serves its contract, for operators and tests that
        # look into it; the sidecar's own calls skip that hop and reach the backend
        # directly, with the same refusals (see sidecar.upstream.inprocess). It serves
        # on a Unix socket only its owner may open, never on a port: a write made
        # there would bypass the audit ledger.
        target = embedded_store_socket(config.data_dir)
        embedded, _ = await create_store_server(backend, target)
        upstream = InProcessStoreClient(
            backend,
            timeout_seconds=config.store_timeout_seconds,
            ledger=shared,
            ledger_wait_seconds=config.audit_busy_timeout_ms / 1000,
        )
    store = _store_middleware(upstream, metrics, traces)
    actions = RunActions(
        ledger=ledger,
        store=store,
        attempts=attempt_registry(config, metrics),
        settings=Settings(
            send_allowlist=config.send_allowlist,
            rules=config.rules,
            store_timeout_seconds=config.store_timeout_seconds,
            id_scheme=config.id_scheme,
            sidecar_id=heartbeat.sidecar_id if heartbeat is not None else "",
        ),
        on_reread=metrics.version_conflict_rereads.inc,
        commits_writes=shared is not None,
    )
    # Outermost first: metrics see every call, the gate's refusals included.
    server = grpc.aio.server(
        interceptors=[
            # The call's span first, so that everything below runs within it.
            *(_call_spans(traces) if traces is not None else ()),
            # Before every interceptor that keeps the handlers it wraps (sidecar.ops.auth).
            *auth.interceptors(
                api_token,
                config.api_token_exempt,
                refusal=to_grpc_status,
                refusals=metrics.refusals,
            ),
            MetricsInterceptor(metrics),
            gate,
            # Parses requests itself, for the log context below and the handlers.
            RequestDecodingInterceptor(),
            LogContextInterceptor(),
        ],
        # Message sizes, streams and pings one caller may take (sidecar.ops.limits).
        options=[*limits.grpc_server_options(), *SERVER_OPTIONS],
    )
    servicer.add_to_server(actions, server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for name in ("", SERVICE_NAME):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    # Method names resolve too, so that ghz and grpcurl call RPCs with no proto file.
    reflection.enable(server, [SERVICE_NAME, health.SERVICE_NAME])
    port = bind(server, config.listen)
    mcp = _mcp_listener(config, actions, metrics, traces, api_token) if config.mcp_listen else None
    health_server, health_port = (
        await create_health_server(health_servicer, config.health_listen)
        if config.health_listen
        else (None, 0)
    )
    sidecar = Sidecar(
        server=server,
        actions=actions,
        ledger=ledger,
        store=store,
        upstream=upstream,
        health=health_servicer,
        store_target=target,
        embedded_store=embedded,
        embedded_backend=backend,
        interval_seconds=config.health_interval_seconds,
        gate=gate,
        metrics=metrics,
        health_server=health_server,
        health_port=health_port,
        metrics_listen=config.metrics_listen,
        mcp=mcp,
        mcp_port=mcp.port if mcp is not None else 0,
        tracing=traces,
        heartbeat=heartbeat,
    )
    return sidecar, port


if TYPE_CHECKING:
    from sidecar.fronts.mcp.app import McpListener
    from sidecar.ops.tracing import Tracing


def _watched(
    ledger: GroupCommitLedger, metrics: Metrics, traces: Tracing | None
) -> GroupCommitLedger:
    """``ledger`` with its appends timed (and spanned, when the sidecar traces): the spans
    outermost, so that an event names the call's trace before anything else sees it."""
    ledger.watch(TimedAppends(metrics))
    if traces is not None:
        from sidecar.assembly.traces import TracedAppends

        ledger.watch(TracedAppends(traces.tracer))
    return ledger


def _store_middleware(
    upstream: StoreClient, metrics: Metrics, traces: Tracing | None
) -> StoreClient:
    """The store client the core calls: the transport, every call timed (and spanned)."""
    store: StoreClient = TimedStore(upstream, metrics)
    if traces is not None:
        from sidecar.assembly.traces import TracedStore

        store = TracedStore(store, traces.tracer)
    return store


def _call_spans(traces: Tracing) -> list[grpc.aio.ServerInterceptor]:
    from sidecar.fronts.grpc.spans import server_interceptors

    return server_interceptors(traces)


def _tracing() -> Tracing | None:
    """The traces the OTEL_* variables ask for; None, and OpenTelemetry never loaded, when
    they ask for none."""
    if not tracing_settings.requested():
        return None
    from sidecar.ops.tracing import Tracing

    return Tracing.from_environment()


def _mcp_listener(
    config: Config,
    actions: RunActions,
    metrics: Metrics,
    traces: Tracing | None,
    api_token: auth.TokenFile | None,
) -> McpListener:
    """The MCP front, and the gateway when upstreams are named (imported only then)."""
    from sidecar.fronts.mcp.app import McpFront, McpListener
    from sidecar.fronts.mcp.gateway import Gateway
    from sidecar.fronts.mcp.settings import Upstream, load_effects, read_headers
    from sidecar.ops.http_guard import RequestPolicy

    assert config.mcp_listen is not None
    gateway = None
    if config.mcp_upstreams:
        upstreams = [
            Upstream(
                name,
                url,
                read_headers(config.mcp_upstream_headers[name])
                if name in config.mcp_upstream_headers
                else {},
            )
            for name, url in config.mcp_upstreams.items()
        ]
        effects = load_effects(config.tool_effects) if config.tool_effects else {}
        gateway = Gateway(
            actions, upstreams, effects, timeout_seconds=config.mcp_upstream_timeout_seconds
        )
    front = McpFront(
        actions,
        gateway=gateway,
        record=metrics.front_call("mcp"),
        policy=RequestPolicy(hosts=config.mcp_allowed_hosts, origins=config.mcp_allowed_origins),
        tracing=traces,
        api_token=api_token,
    )
    return McpListener(front, config.mcp_listen)


async def serve(config: Config, *, grace_seconds: float = 10.0) -> None:
    """Run the sidecar until SIGINT or SIGTERM, then drain and exit."""
    sidecar, port = await create_server(config)
    if sidecar.tracing is not None:
        # The process's own provider too, for the libraries that trace through the global
        # one (the MCP SDK's client sessions of the gateway, say).
        from opentelemetry import trace

        trace.set_tracer_provider(sidecar.tracing.provider)
    await sidecar.start()
    # Everything built so far lives as long as the process: out of the collector's
    # reach, a full collection no longer walks it, a pause of tens of milliseconds
    # that showed in every tail latency.
    gc.freeze()
    log.info(
        "serving",
        listen=config.listen,
        port=port,
        store=config.store_target or "embedded",
        ledger=config.ledger,
        health_listen=config.health_listen,
        metrics_listen=config.metrics_listen,
        mcp_listen=config.mcp_listen,
        mcp_port=sidecar.mcp_port or None,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    log.info("draining", grace_seconds=grace_seconds)
    await sidecar.stop(grace_seconds)
    log.info("stopped")
