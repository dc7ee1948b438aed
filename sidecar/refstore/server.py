"""Running the reference store: a server factory for tests and embedding, and the CLI's loop.

`create_store_server` builds a `grpc.aio` server around a backend (the store service, health
and reflection) and binds it, without starting it, so tests bind port 0 and read the port back.
`serve_store` is what `actonce store --listen ... --data-dir ...` runs: a SQLite-backed store
(PostgreSQL-backed when given a DSN) until SIGINT or SIGTERM, then a graceful drain.
`open_store_backend` picks the backend the same way for anyone embedding the store.
"""

from __future__ import annotations

import asyncio
import gc
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import structlog
from actonce_api.store.v1 import artifact_store_pb2 as pb
from actonce_api.store.v1 import artifact_store_pb2_grpc as pb_grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from sidecar.ops import files, reflection, tracing_settings
from sidecar.refstore.backend import StoreBackend
from sidecar.refstore.servicer import ArtifactStoreServicer
from sidecar.refstore.sqlite import SqliteStoreBackend

if TYPE_CHECKING:
    from sidecar.ops.tracing import Tracing

__all__ = [
    "MAX_MESSAGE_BYTES",
    "SERVICE_NAME",
    "create_store_server",
    "open_store_backend",
    "serve_store",
]

log = structlog.get_logger()

SERVICE_NAME: str = pb.DESCRIPTOR.services_by_name["ArtifactStoreService"].full_name

# Artifacts are whole JSON documents; gRPC's 4 MiB default would refuse large ones with a
# transport error instead of an answer.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024

# How long in-flight calls may finish after SIGINT/SIGTERM before they are cancelled.
DEFAULT_GRACE_SECONDS = 10.0


async def create_store_server(
    backend: StoreBackend,
    listen: str = "127.0.0.1:0",
    *,
    token: str | None = None,
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    credentials: grpc.ServerCredentials | None = None,
) -> tuple[grpc.aio.Server, int]:
    """Build a store server on `listen` ("host:port" or "unix:/path"); the caller starts it.

    Returns the server and the bound port (the real one when `listen` asks for port 0; 0 for a
    Unix socket). Raises OSError when the address cannot be bound. The caller owns `backend`
    and closes it after stopping the server. With `credentials`, the port speaks TLS only.
    """
    server = grpc.aio.server(
        interceptors=list(interceptors),
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            # gRPC sets SO_REUSEPORT by default, so a second store on a busy port would bind
            # and silently take half the calls to its own database.
            ("grpc.so_reuseport", 0),
        ],
    )
    pb_grpc.add_ArtifactStoreServiceServicer_to_server(
        ArtifactStoreServicer(backend, token=token), server
    )

    health_servicer = health.aio.HealthServicer()
    for name in ("", SERVICE_NAME):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)

    reflection.enable(server, (SERVICE_NAME, health.SERVICE_NAME))

    try:
        port: int = (
            server.add_secure_port(listen, credentials)
            if credentials is not None
            else server.add_insecure_port(listen)
        )
    except RuntimeError as error:
        # gRPC reports a failed bind as RuntimeError; callers (the CLI) expect an OSError.
        raise OSError(f"cannot listen on {listen}: {error}") from error
    if listen.startswith("unix:"):
        files.tighten(Path(listen.removeprefix("unix:")))
    return server, 0 if listen.startswith("unix:") else port


def open_store_backend(data_dir: Path | None = None, *, dsn: str | None = None) -> StoreBackend:
    """The store's backend: PostgreSQL at `dsn` when given, else SQLite in `data_dir`.

    The DSN wins so that a default data folder need not be unset to use PostgreSQL. Raises
    ValueError when neither is given, and `StoreUnavailableError` when PostgreSQL cannot be
    reached (the caller fails to start rather than serve a store with no database).
    """
    if dsn:
        # Imported here: psycopg takes about half of a SQLite sidecar's start-up otherwise.
        from sidecar.refstore.postgres import PostgresStoreBackend

        return PostgresStoreBackend(dsn)
    if data_dir is None:
        raise ValueError("the store needs a data folder or a PostgreSQL DSN")
    files.private_folder(data_dir)
    return SqliteStoreBackend(data_dir / "store.db")


async def serve_store(
    listen: str,
    data_dir: Path | None,
    token: str | None = None,
    *,
    dsn: str | None = None,
    credentials: grpc.ServerCredentials | None = None,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
) -> None:
    """Serve a store on `listen` until SIGINT or SIGTERM.

    The store is on PostgreSQL at `dsn` when given, else in SQLite at `data_dir / "store.db"`
    (see `open_store_backend`). Must run in the main thread (it installs signal handlers).
    In-flight calls get `grace_seconds` to finish; the database is closed after the last one.
    """
    backend = open_store_backend(data_dir, dsn=dsn)
    traces = _tracing()
    try:
        server, port = await create_store_server(
            backend,
            listen,
            token=token,
            credentials=credentials,
            interceptors=traces.store_server_interceptors() if traces is not None else (),
        )
        await server.start()
        # What start-up built lives as long as the process; a full collection need not
        # walk it (a pause that showed in tail latencies).
        gc.freeze()
        log.info(
            "store.serving",
            listen=listen,
            port=port,
            auth=token is not None,
            tls=credentials is not None,
        )

        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        signals = (signal.SIGINT, signal.SIGTERM)
        for signum in signals:
            loop.add_signal_handler(signum, stopping.set)
        try:
            await stopping.wait()
            log.info("store.draining", grace_seconds=grace_seconds)
        finally:
            for signum in signals:
                loop.remove_signal_handler(signum)
            # Also when cancelled: in-flight calls finish before the database closes.
            await server.stop(grace_seconds)
        log.info("store.stopped")
    finally:
        backend.close()
        if traces is not None:
            traces.shutdown()


def _tracing() -> Tracing | None:
    """The store's traces, when the OTEL_* variables ask for them: it continues the
    traces of the calls that carry one (sidecar.ops.tracing)."""
    if not tracing_settings.requested():
        return None
    # Imported only now: a store that does not trace loads none of OpenTelemetry.
    from sidecar.ops.tracing import STORE_SERVICE, Tracing

    return Tracing.from_environment(STORE_SERVICE)
