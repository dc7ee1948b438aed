"""A built sidecar, running: it starts its servers, keeps its readiness to what its ledger
and its store answer, and on stop drains its calls and closes every part in order, all
within the grace it is given."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import grpc
import structlog
from actonce_api.v1 import run_actions_pb2
from grpc_health.v1 import health, health_pb2

from sidecar.core.actions import RunActions
from sidecar.fronts.grpc.interceptors import LINGER_SECONDS, CallGate
from sidecar.ledger.base import AuditLedger
from sidecar.ledger.liveness import Heartbeat
from sidecar.ops.metrics import Metrics, MetricsEndpoint
from sidecar.ops.probes import LIVENESS_SERVICE
from sidecar.refstore.backend import StoreBackend
from sidecar.upstream.base import StoreClient, ping
from sidecar.upstream.grpc import GrpcStoreClient
from sidecar.upstream.inprocess import InProcessStoreClient

if TYPE_CHECKING:
    from sidecar.fronts.mcp.app import McpListener
    from sidecar.ops.tracing import Tracing

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
            self.metrics_endpoint = await MetricsEndpoint.open(self.metrics_listen, self.metrics)
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
            # answering makes readiness NOT_SERVING within one probe period.
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

        Every call the sidecar receives is answered, never cancelled
        (sidecar.fronts.grpc.interceptors.CallGate): calls still running when their time
        runs out, and calls that arrive while the agents stop calling, are refused
        SHUTTING_DOWN. The server stops only once its callers are quiet, or when closing
        must begin; after a cut too, since the callers whose calls were cut, and agents
        that only start now, still call. Each step of closing is bounded by what is left of
        the grace (and at least CLOSE_STEP_FLOOR_SECONDS), so that a ledger or a store that
        stopped answering cannot hold the exit.
        """
        if self._stopped:
            return
        self._stopped = True
        plan = _DrainPlan.of(asyncio.get_running_loop().time(), grace or 0.0)
        await self._stop_taking_calls()
        await self._drain_calls(plan)
        await self._close(plan)

    async def _stop_taking_calls(self) -> None:
        self.gate.close()
        self.metrics.draining.set(1)
        if self._health_task is not None:
            self._health_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._health_task
        # Readiness becomes NOT_SERVING; liveness stays SERVING until the end, so that
        # the kubelet does not restart the sidecar in the middle of its drain.
        for name in ("", SERVICE_NAME):
            await self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        if self.mcp is not None:
            # No new MCP calls; those under way finish (uvicorn's own graceful shutdown).
            await self.mcp.stop()

    async def _drain_calls(self, plan: _DrainPlan) -> None:
        if self.gate.in_flight:
            log.info("draining_calls", in_flight=self.gate.in_flight)
            try:
                async with asyncio.timeout_at(plan.calls_deadline):
                    await self.gate.wait_idle()
            except TimeoutError:
                log.warning("drain_grace_ran_out", cut=await self.gate.cut())
        # Agents that are still calling get SHUTTING_DOWN and stop; once they are quiet,
        # grpc's server has no call left in its queue to cancel when it stops.
        await self.health.enter_graceful_shutdown()
        if not await self.gate.wait_quiet(plan.closing_at):
            log.warning("drain_callers_still_calling", refused=self.gate.refused)

    async def _close(self, plan: _DrainPlan) -> None:
        loop = asyncio.get_running_loop()

        def left() -> float:
            return max(CLOSE_STEP_FLOOR_SECONDS, plan.closed_by - loop.time())

        await self.server.stop(left())
        log.info("stopped_serving", seconds=round(loop.time() - plan.began, 3))
        if self.health_server is not None:
            await self.health_server.stop(None)
        if self.metrics_endpoint is not None:
            await self.metrics_endpoint.close()
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
        log.info("closed", seconds=round(loop.time() - plan.began, 3))


@dataclass(frozen=True)
class _DrainPlan:
    """The grace, in its parts: calls in flight until ``calls_deadline``, the linger after a
    cut until ``closing_at``, closing until ``closed_by``, and the process's exit after."""

    began: float
    calls_deadline: float
    closing_at: float
    closed_by: float

    @classmethod
    def of(cls, began: float, grace: float) -> _DrainPlan:
        final = began + grace
        closing_at = final - min(CLOSE_RESERVE_SECONDS, grace / 2)
        calls_deadline = closing_at - min(LINGER_SECONDS, (closing_at - began) / 2)
        # The process itself still has to exit after closing: its share comes off the end.
        closed_by = final - min(EXIT_RESERVE_SECONDS, grace / 10)
        return cls(began, calls_deadline, closing_at, closed_by)


# A health check answers within this, or readiness becomes NOT_SERVING: well within the
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
