"""Graceful drain: once told to stop, the sidecar answers every call it receives, and never
cancels one.

grpc's own ``server.stop(grace)`` closes the listening socket at once, so an
agent that calls during the grace period gets a bare connection error; and it
drops the calls it had accepted but not yet handed to a handler (they wait in
grpc's queue while the event loop is busy): their callers see a bare
``CANCELLED``, which no client can classify. Calls still running when the grace
runs out are cancelled the same way. The gate makes the drain explicit instead:

- once closed, every RunActionsService call gets UNAVAILABLE with ErrorInfo
  reason ``SHUTTING_DOWN`` (class RETRYABLE): the queue retries the run
  elsewhere, and derived ids make that safe. The refusal carries
  ``grpc-retry-pushback-ms: -1``, so that no client's transport retries it
  against a sidecar that is going away;
- health and reflection calls pass, so probes see NOT_SERVING rather than an error;
- :meth:`CallGate.wait_idle` returns when the last call in flight has answered;
- :meth:`CallGate.cut` answers the calls still running when their time runs out
  with the same refusal, rather than letting grpc cancel them;
- :meth:`CallGate.wait_quiet` keeps the server answering until callers have
  stopped calling (each stops at its first SHUTTING_DOWN). Only then is grpc's
  server stopped: its queue is empty, so it has nothing left to cancel.

The quiet is waited for after a cut as well, and the grace keeps time for it
(LINGER_SECONDS): the callers whose calls were cut, and agents that make their
first call only then, still call. grpc's ``stop`` cancels every call it has
accepted and not yet handed to a handler, and from then on the port refuses
connections: without the linger, a call that arrives in the instant the server
stops gets a bare ``CANCELLED``.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import grpc

from sidecar.errors import ShuttingDown
from sidecar.fronts.grpc.interceptors import (
    Behavior,
    Context,
    Handler,
    RunActionsInterceptor,
    behavior_of,
)
from sidecar.fronts.grpc.status import to_grpc_status

# A caller that got SHUTTING_DOWN stops; this long without any call means they all have
# (an agent busy between two calls for longer finds no listener: UNAVAILABLE, RETRYABLE).
QUIET_SECONDS = 1.0
# How long a call gRPC has accepted may take to reach the gate, on a busy event loop.
SETTLE_SECONDS = 0.1
# How long the calls cut at the end of their time get to send their refusal.
CUT_SECONDS = 1.0
# Of the grace, this much (at most half of what is left after closing) is kept after the
# calls' time, so that the server goes on answering SHUTTING_DOWN after a cut until
# its callers are quiet: a quiet period and its settling, with room for late callers.
LINGER_SECONDS = 1.5

# gRFC A6: a negative pushback tells the client's retry policy not to retry this call.
_NO_TRANSPORT_RETRY = (("grpc-retry-pushback-ms", "-1"),)


class _Refusal(grpc.Status):
    def __init__(self, code: grpc.StatusCode, details: str, trailing: tuple[Any, ...]) -> None:
        self.code = code
        self.details = details
        self.trailing_metadata = trailing


def _shutting_down() -> grpc.Status:
    status = to_grpc_status(
        ShuttingDown("the sidecar is shutting down and takes no new calls; retry the run")
    )
    return _Refusal(status.code, status.details, (*status.trailing_metadata, *_NO_TRANSPORT_RETRY))


class CallGate(RunActionsInterceptor):
    """Counts RunActionsService calls in flight, and refuses new ones once closed."""

    def __init__(self) -> None:
        self._running: set[asyncio.Task[Any]] = set()
        self._cut: set[asyncio.Task[Any]] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._last_arrival = 0.0
        self.closed = False
        # Calls refused SHUTTING_DOWN since the gate closed.
        self.refused = 0

    @property
    def in_flight(self) -> int:
        return len(self._running)

    def close(self) -> None:
        """Refuse every call that arrives from now on."""
        self.closed = True

    async def wait_idle(self) -> None:
        """Wait until no call is in flight (bound it with ``asyncio.timeout``)."""
        await self._idle.wait()

    async def cut(self) -> int:
        """Answer every call still running SHUTTING_DOWN now; how many there were.

        Such a call may have reached the store: a write's id is derived, so the run's
        retry finds it done, exactly as after a store deadline.
        """
        cut = list(self._running)
        self._cut.update(cut)
        for task in cut:
            task.cancel()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CUT_SECONDS):
                await self.wait_idle()
        return len(cut)

    async def wait_quiet(self, deadline: float, quiet: float = QUIET_SECONDS) -> bool:
        """Keep answering until no call has arrived for ``quiet`` seconds: True then, False
        if ``deadline`` (the event loop's clock) passed first."""
        loop = asyncio.get_running_loop()
        while True:
            now = loop.time()
            silent = now - self._last_arrival
            if silent >= quiet and not self._running:
                # A call gRPC accepted a moment ago reaches the gate a few turns of the
                # event loop later: give it those turns, and go on waiting if one came.
                seen = self._last_arrival
                await asyncio.sleep(SETTLE_SECONDS)
                if self._last_arrival == seen and not self._running:
                    return True
                continue
            if now >= deadline:
                return False
            await asyncio.sleep(min(max(quiet - silent, 0.01), deadline - now))

    def wrap(self, rpc: str, handler: Handler) -> Behavior:
        inner = behavior_of(handler)

        async def gated(request: Any, context: Context) -> Any:
            self._last_arrival = asyncio.get_running_loop().time()
            # Checked when the call runs, not when its handler was looked up: a call
            # that arrived just before the gate closed is refused all the same.
            if self.closed:
                self.refused += 1
                await context.abort_with_status(_shutting_down())
            task = asyncio.current_task()
            assert task is not None
            self._running.add(task)
            self._idle.clear()
            try:
                return await inner(request, context)
            except asyncio.CancelledError:
                if task not in self._cut:
                    raise  # the caller went away: nobody is left to answer
                self._cut.discard(task)
                task.uncancel()
            finally:
                self._running.discard(task)
                if not self._running:
                    self._idle.set()
            await context.abort_with_status(_shutting_down())

        return gated
