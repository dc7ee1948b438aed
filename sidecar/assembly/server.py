"""Building and running the sidecar: ``create_server(config) -> (server, port)``.

Kept apart from ``main()`` so that tests start real servers on port 0. The
embedded default runs the reference store in the same process and the
ledger on a SQLite file; ``store_target`` points at an external store.

It is where every part is chosen and wired (ledger, store client, the core,
interceptors, health, reflection, metrics, traces, the MCP front); the built
sidecar runs, drains and closes them in order (:mod:`sidecar.assembly.sidecar`).
The metrics and the traces are put around each seam in one way: the ledger's append
hooks (``GroupCommitLedger.watch``), the store client's middleware (a StoreClient around
another), and the gRPC server's interceptors.
"""

from __future__ import annotations

import asyncio
import gc
import secrets
import signal
import tempfile
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from sidecar.assembly.instruments import MetricsInterceptor, TimedAppends, TimedStore
from sidecar.assembly.pending_metrics import PendingCollector
from sidecar.assembly.sidecar import SERVICE_NAME, Sidecar
from sidecar.config import Config
from sidecar.core.actions import RunActions
from sidecar.core.attempts import PRESSURE, Attempt, AttemptRegistry
from sidecar.core.audit import InOneCommit, InOrder, InTheStoresThread, LandsFor
from sidecar.core.types import Settings
from sidecar.fronts.grpc import servicer
from sidecar.fronts.grpc.interceptors import (
    CallGate,
    LogContextInterceptor,
    RequestDecodingInterceptor,
)
from sidecar.fronts.grpc.status import to_grpc_status
from sidecar.ledger.base import AuditLedger, GroupCommitLedger
from sidecar.ledger.liveness import Heartbeat, open_heartbeat
from sidecar.ledger.operator import OperatorLedger, open_operator_ledger
from sidecar.ledger.sqlite import SqliteLedger
from sidecar.ops import auth, files, limits, reflection, security, tracing_settings
from sidecar.ops.listening import SERVER_OPTIONS, bind
from sidecar.ops.metrics import Metrics
from sidecar.ops.probes import create_health_server
from sidecar.refstore.backend import StoreBackend
from sidecar.refstore.server import create_store_server
from sidecar.refstore.sqlite import SqliteStoreBackend
from sidecar.upstream.base import AuditedWrites, StoreClient
from sidecar.upstream.grpc import GrpcStoreClient, connect_store
from sidecar.upstream.inprocess import InProcessStoreClient

log = structlog.get_logger()


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

        return PostgresLedger(
            config.audit_dsn,
            lock_timeout_ms=config.audit_busy_timeout_ms,
            pool_size=config.audit_pool_size,
        )
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
        return PostgresStoreBackend(
            config.store_dsn,
            pool_size=config.store_pool_size,
            call_timeout=config.store_timeout_seconds,
        )
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
    if traces is not None:
        metrics.exemplar = traces.exemplar
    api_token = auth.load(config.api_token_file)
    capabilities = (
        auth.Capabilities(api_token)
        if config.agent_capabilities and api_token is not None
        else None
    )
    audit = _open_audit(config, metrics, traces, ledger)
    store = await _open_store(config, audit, traces)
    client = _store_middleware(store.upstream, metrics, traces)
    actions = RunActions(
        ledger=audit.ledger,
        store=client,
        attempts=attempt_registry(config, metrics),
        settings=_settings(config, audit.heartbeat),
        on_reread=metrics.version_conflict_rereads.inc,
        lands=_lands(store),
        grants=config.grants,
        capability_of=capabilities.issue if capabilities is not None else None,
    )
    gate = CallGate()
    server = _grpc_server(config, actions, gate, metrics, traces, api_token, capabilities)
    health_servicer = await _health(server)
    port = bind(server, config.listen, _listen_credentials(config))
    mcp = (
        _mcp_listener(config, actions, metrics, traces, api_token, capabilities)
        if config.mcp_listen
        else None
    )
    health_server, health_port = (
        await create_health_server(health_servicer, config.health_listen)
        if config.health_listen
        else (None, 0)
    )
    sidecar = Sidecar(
        server=server,
        actions=actions,
        ledger=audit.ledger,
        store=client,
        upstream=store.upstream,
        health=health_servicer,
        store_target=store.target,
        embedded_store=store.embedded,
        embedded_backend=store.backend,
        interval_seconds=config.health_interval_seconds,
        gate=gate,
        metrics=metrics,
        health_server=health_server,
        health_port=health_port,
        metrics_listen=config.metrics_listen,
        mcp=mcp,
        mcp_port=mcp.port if mcp is not None else 0,
        tracing=traces,
        heartbeat=audit.heartbeat,
    )
    return sidecar, port


@dataclass
class _Audit:
    """The ledger the core appends to; in a data folder of one file, the SQLite ledger that
    writes through the embedded store's connection (``shared``) and that store's backend."""

    ledger: AuditLedger
    heartbeat: Heartbeat | None = None
    shared: SqliteLedger | None = None
    backend: SqliteStoreBackend | None = None
    # The ledger with a file or a database of its own, which an embedded store's client
    # commits on in its own thread.
    separate: GroupCommitLedger | None = None


def _open_audit(
    config: Config, metrics: Metrics, traces: Tracing | None, given: AuditLedger | None
) -> _Audit:
    if given is not None:
        return _Audit(given)
    if config.metrics_listen is not None:
        metrics.registry.register(PendingCollector(partial(_operator_ledger, config)))
    sidecar_id = f"sc_{secrets.token_hex(8)}"
    if not config.one_file:
        opened = open_ledger(config)
        # A PostgreSQL ledger lends its readers' connections: the heartbeat opens none.
        beats = opened.beats()
        heartbeat = open_heartbeat(sidecar_id, config.audit_path, config.audit_dsn, beats)
        ledger = _watched(opened, metrics, traces)
        return _Audit(ledger, heartbeat, separate=ledger)
    heartbeat = open_heartbeat(sidecar_id, config.audit_path, config.audit_dsn)
    # One file: the store's connection is its one writer, and the ledger writes through
    # it; a write of one store call then commits with its audit as one transaction.
    # The file's lock is the ledger's: its busy timeout is the ledger's too.
    files.private_folder(config.data_dir)
    busy = config.audit_busy_timeout_ms
    backend = SqliteStoreBackend(config.store_path, busy_timeout_ms=busy)
    shared = SqliteLedger(config.audit_path, through=backend, busy_timeout_ms=busy)
    return _Audit(_watched(shared, metrics, traces), heartbeat, shared, backend)


@dataclass
class _Store:
    """The transport the core's store client wraps, and the embedded store, if any."""

    upstream: GrpcStoreClient | InProcessStoreClient
    target: str
    embedded: grpc.aio.Server | None = None
    backend: StoreBackend | None = None


async def _open_store(config: Config, audit: _Audit, traces: Tracing | None) -> _Store:
    if config.store_target:
        return _Store(_external_store(config, traces), config.store_target)
    backend = audit.backend if audit.backend is not None else open_store_backend(config)
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
        ledger=audit.shared,
        separate_ledger=audit.separate,
        ledger_wait_seconds=config.audit_busy_timeout_ms / 1000,
    )
    return _Store(upstream, target, embedded, backend)


def _lands(store: _Store) -> LandsFor:
    """How a write lands with its audit, as the embedded store's client takes it: in one
    commit in the ledger's file, or in the store's thread beside a ledger of its own; in
    order over the wire."""
    if isinstance(store.upstream, InProcessStoreClient):
        return _LANDS[store.upstream.audited_writes]
    return InOrder


_LANDS: dict[AuditedWrites, LandsFor] = {
    AuditedWrites.AS_ONE: InOneCommit,
    AuditedWrites.THREE_COMMITS: InTheStoresThread,
    AuditedWrites.APART: InOrder,
}


def _external_store(config: Config, traces: Tracing | None) -> GrpcStoreClient:
    """The store at ``--store-target``: TLS and the token apply to it alone."""
    assert config.store_target is not None
    return connect_store(
        config.store_target,
        tls=security.store_tls(config.store_tls_ca, config.store_tls_cert, config.store_tls_key),
        token_file=config.store_token_file,
        timeout_seconds=config.store_timeout_seconds,
        interceptors=(
            traces.store_client_interceptors(config.store_target) if traces is not None else ()
        ),
    )


def _settings(config: Config, heartbeat: Heartbeat | None) -> Settings:
    return Settings(
        send_allowlist=config.send_allowlist,
        rules=config.rules,
        store_timeout_seconds=config.store_timeout_seconds,
        id_scheme=config.id_scheme,
        sidecar_id=heartbeat.sidecar_id if heartbeat is not None else "",
    )


def _grpc_server(
    config: Config,
    actions: RunActions,
    gate: CallGate,
    metrics: Metrics,
    traces: Tracing | None,
    api_token: auth.TokenFile | None,
    capabilities: auth.Capabilities | None,
) -> grpc.aio.Server:
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
                capabilities=capabilities,
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
    return server


def _listen_credentials(config: Config) -> grpc.ServerCredentials | None:
    """TLS for the agent API when given a pair; mutual TLS when also given a client CA."""
    if config.tls_cert is None or config.tls_key is None:
        return None
    return security.server_credentials(config.tls_cert, config.tls_key, config.tls_client_ca)


async def _health(server: grpc.aio.Server) -> health.aio.HealthServicer:
    """Health on the server, NOT_SERVING until the first check; reflection beside it."""
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for name in ("", SERVICE_NAME):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    # Method names resolve too, so that ghz and grpcurl call RPCs with no proto file.
    reflection.enable(server, [SERVICE_NAME, health.SERVICE_NAME])
    return health_servicer


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
    capabilities: auth.Capabilities | None,
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
            actions,
            upstreams,
            effects,
            timeout_seconds=config.mcp_upstream_timeout_seconds,
            report=metrics.effects_findings,
        )
    front = McpFront(
        actions,
        gateway=gateway,
        record=metrics.front_call("mcp"),
        policy=RequestPolicy(hosts=config.mcp_allowed_hosts, origins=config.mcp_allowed_origins),
        tracing=traces,
        api_token=api_token,
        capabilities=capabilities,
    )
    return McpListener(front, config.mcp_listen)


async def serve(config: Config) -> None:
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
    log.info("draining", grace_seconds=config.grace_seconds)
    await sidecar.stop(config.grace_seconds)
    log.info("stopped")
