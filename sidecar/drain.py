"""Graceful drain: once told to stop, the sidecar lets calls in flight finish and refuses new ones.

grpc's own ``server.stop(grace)`` closes the listening socket at once, so an
agent that calls during the grace period gets a bare connection error, and
calls that were already running are cancelled when the grace runs out without
anyone knowing which. The gate makes the drain explicit instead:

- new RunActionsService calls get UNAVAILABLE with ErrorInfo reason
  ``SHUTTING_DOWN`` (class RETRYABLE): the queue retries the run elsewhere, and
  derived ids make that safe;
- health and reflection calls pass, so probes see NOT_SERVING rather than an error;
- :meth:`CallGate.wait_idle` returns when the last call in flight has answered.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
from grpc_status import rpc_status

from sidecar.errors import ShuttingDown, to_status
from sidecar.interceptors import Behavior, RunActionsInterceptor


class CallGate(RunActionsInterceptor):
    """Counts RunActionsService calls in flight, and refuses new ones once closed."""

    def __init__(self) -> None:
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self.closed = False

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def close(self) -> None:
        """Refuse every call that arrives from now on."""
        self.closed = True

    async def wait_idle(self, timeout: float | None) -> bool:
        """Wait until no call is in flight; False if ``timeout`` ran out first."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def wrap(self, rpc: str, handler: grpc.RpcMethodHandler) -> Behavior:
        inner = handler.unary_unary

        async def gated(request: Any, context: grpc.aio.ServicerContext) -> Any:
            # Checked when the call runs, not when its handler was looked up: a call
            # that arrived just before the gate closed is refused all the same.
            if self.closed:
                error = ShuttingDown(
                    "the sidecar is shutting down and takes no new calls; retry the run"
                )
                await context.abort_with_status(rpc_status.to_status(to_status(error)))
            self._in_flight += 1
            self._idle.clear()
            try:
                return await inner(request, context)
            finally:
                self._in_flight -= 1
                if self._in_flight == 0:
                    self._idle.set()

        return gated
