"""Real sidecars and stores for tests: real gRPC on loopback, real SQLite files.

A server runs on its own event loop in a background thread, so that tests
call it through ordinary blocking stubs exactly as an agent would.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import random
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import grpc
from actonce_api.store.v1 import artifact_store_pb2 as spb
from actonce_api.store.v1 import artifact_store_pb2_grpc as spb_grpc
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2
from grpc_status import rpc_status

from sidecar.assembly.server import create_server
from sidecar.assembly.sidecar import Sidecar
from sidecar.config import Config
from sidecar.ledger.audit_command import open_reader
from sidecar.refstore.server import create_store_server
from sidecar.refstore.sqlite import SqliteStoreBackend
from tests.helpers.env import scrubbed_env
from tests.helpers.health import HealthStub, NeverAnswered, wait_serving

T = TypeVar("T")


def begin(stub: Any, run_id: str = "run-1", rule: str = "triage", checkpoint: str = "cp-0") -> str:
    """Begin an attempt of ``run_id`` through a RunActionsService stub; its id."""
    answer = stub.BeginAttempt(
        pb.BeginAttemptRequest(run_id=run_id, rule=rule, checkpoint=checkpoint)
    )
    return str(answer.attempt_id)


class Loop:
    """An event loop in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@dataclass
class RunningStore:
    """A standalone reference store in this process."""

    data_dir: Path
    port: int
    server: grpc.aio.Server
    backend: SqliteStoreBackend
    loop: Loop
    channel: grpc.Channel = field(init=False)
    stub: Any = field(init=False)

    def __post_init__(self) -> None:
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        self.stub = spb_grpc.ArtifactStoreServiceStub(self.channel)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.channel.close()
        self.loop.run(self.server.stop(0))
        self.backend.close()
        self.loop.close()


def start_store(
    data_dir: Path,
    *,
    port: int = 0,
    token: str | None = None,
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
) -> RunningStore:
    loop = Loop()
    backend = SqliteStoreBackend(data_dir / "store.db")

    async def build() -> tuple[grpc.aio.Server, int]:
        server, bound = await create_store_server(
            backend, f"127.0.0.1:{port}", token=token, interceptors=interceptors
        )
        await server.start()
        return server, bound

    server, bound = loop.run(build())
    return RunningStore(data_dir, bound, server, backend, loop)


@dataclass
class RunningSidecar:
    """A sidecar in this process, with blocking stubs to it and its store."""

    config: Config
    sidecar: Sidecar
    port: int
    loop: Loop
    channel: grpc.Channel = field(init=False)
    stub: Any = field(init=False)
    store: Any = field(init=False)
    _store_channel: grpc.Channel = field(init=False)

    def __post_init__(self) -> None:
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        self.stub = pb_grpc.RunActionsServiceStub(self.channel)
        self._store_channel = grpc.insecure_channel(self.sidecar.store_target)
        self.store = spb_grpc.ArtifactStoreServiceStub(self._store_channel)

    def begin(self, run_id: str = "run-1", rule: str = "triage", checkpoint: str = "cp-0") -> str:
        return begin(self.stub, run_id, rule, checkpoint)

    def health(self) -> int:
        stub = HealthStub(self.channel)
        return int(stub.Check(health_pb2.HealthCheckRequest(service="")).status)

    def audit(self, run_id: str | None = None) -> list[Any]:
        reader = open_reader(
            {"audit_dsn": self.config.audit_dsn, "audit_db": self.config.audit_path}
        )
        try:
            return list(reader.events(run_id=run_id))
        finally:
            reader.close()

    def artifacts(self, kind: str) -> list[spb.StoredArtifact]:
        return list(self.store.ListArtifacts(spb.ListArtifactsRequest(kind=kind)).artifacts)

    def messages(self, thread_id: str) -> list[spb.StoredMessage]:
        return list(self.store.ListMessages(spb.ListMessagesRequest(thread_id=thread_id)).messages)

    def stop(self) -> None:
        self.channel.close()
        self._store_channel.close()
        self.loop.run(self.sidecar.stop(0))
        self.loop.close()


def start_sidecar(config: Config) -> RunningSidecar:
    loop = Loop()

    async def build() -> tuple[Sidecar, int]:
        sidecar, port = await create_server(config)
        await sidecar.start()
        return sidecar, port

    sidecar, port = loop.run(build())
    return RunningSidecar(config, sidecar, port, loop)


def sidecar_config(data_dir: Path, **overrides: Any) -> Config:
    return replace(
        Config(listen="127.0.0.1:0", data_dir=data_dir, health_interval_seconds=0.2), **overrides
    )


@dataclass(frozen=True)
class Refusal:
    """A refusal as an agent sees it."""

    code: grpc.StatusCode
    reason: str
    domain: str
    failure_class: str
    metadata: dict[str, str]
    fields: list[str]
    message: str


def refusal(error: grpc.RpcError) -> Refusal:
    """Decode the ErrorInfo and BadRequest of a failed call."""
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None, f"no google.rpc.Status details on {error!r}"
    info = error_details_pb2.ErrorInfo()
    fields: list[str] = []
    found = False
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            detail.Unpack(info)
            found = True
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            fields.extend(v.field for v in bad.field_violations)
    assert found, "no ErrorInfo in the status details"
    return Refusal(
        code=error.code(),
        reason=info.reason,
        domain=info.domain,
        failure_class=info.metadata.get("failure_class", ""),
        metadata=dict(info.metadata),
        fields=fields,
        message=status.message,
    )


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


# A port for a server a test starts by its address, found free now and bound a moment
# later. Not one the kernel hands out for port 0: those come from the ephemeral range,
# which every in-process server on port 0 and every outgoing connection draws from too, so
# one could take it in between (and a store there answers the health check a sidecar was
# awaited with). Below that range, each of pytest-xdist's workers walks its own slice from
# a random point, so two workers never pick one port.
_FIRST_PORT = 10000
_WORKERS = 12
_SLICE = max(100, (_ephemeral_low() - _FIRST_PORT) // _WORKERS)
_walk = itertools.count(random.randrange(_SLICE))


def free_port() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    first = _FIRST_PORT + (int(worker or 0) % _WORKERS) * _SLICE
    for _ in range(_SLICE):
        port = first + next(_walk) % _SLICE
        if _bindable(port):
            return port
    raise RuntimeError(f"no free port in {first}-{first + _SLICE - 1}")


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@dataclass
class ServerProcess:
    """``actonce serve`` or ``actonce store`` in a child process, as an operator runs it."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    # Started in a process group of its own (under a prefix such as faketime, which forks the
    # server as its child): stopping it kills the whole group, the server with its wrapper.
    grouped: bool = False

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.grouped:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
        elif self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)

    def drain(self, timeout: float = 30) -> int:
        """Stop it as an orchestrator does (SIGTERM), and wait for it to exit."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)


def spawn_sidecar(
    config: Config, log_path: Path, *extra: str, prefix: Sequence[str] = ()
) -> ServerProcess:
    """Start a sidecar process with ``config``'s settings and wait until it is SERVING;
    ``prefix`` runs it under another command (faketime, say)."""
    port = free_port()
    args = [*prefix, sys.executable, "-m", "sidecar.cli", "serve", "--listen", f"127.0.0.1:{port}",
            "--data-dir", str(config.data_dir), "--log-format", "json", *extra]  # fmt: skip
    if config.audit_dsn:
        args += ["--audit-dsn", config.audit_dsn]
    if config.store_dsn:
        args += ["--store-dsn", config.store_dsn]
    if config.store_target:
        args += ["--store-target", config.store_target]
    grouped = bool(prefix)
    with log_path.open("ab") as log:
        process = subprocess.Popen(args, stdout=log, stderr=log, env=scrubbed_env(),
                                   start_new_session=grouped)  # fmt: skip
    running = ServerProcess(process, port, log_path, grouped)
    try:
        wait_serving(running.target, process)
    except NeverAnswered as never:
        running.stop()
        raise RuntimeError(f"sidecar: {never}: {log_path.read_text()[-2000:]}") from None
    return running
