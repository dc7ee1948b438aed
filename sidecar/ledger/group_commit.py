"""Group commit, shared by every ledger backend.

One writer thread owns the backend's write connection. Appends queue up while
it commits; it then writes every queued event in one transaction and one sync,
and only after that commit does it wake each appender. Concurrent writes share
a sync, and no appender is woken before its own event is durable.

A backend implements :meth:`GroupCommitLedger._write_batch`, which writes a
batch in one transaction and returns, per event, its sequence number or the
error that refused that event alone (a fenced attempt's intent, say).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Protocol

import structlog

from sidecar.ledger.base import AuditEvent, LedgerError, StoredEvent
from sidecar.ops import scheduling

log = structlog.get_logger()

# Most events a single commit carries; bounds a batch's latency under load.
MAX_BATCH = 512

# The hook for metrics: called from the writer thread with (seconds, batch size)
# after each commit. A failed append is counted where it is seen (the ledger's
# wrapper in sidecar.ops.metrics), once per append.
CommitHook = Callable[[float, int], None]


class CommitTracer(Protocol):
    """The hook for traces (sidecar.ops.tracing), set only when the sidecar traces."""

    def link(self) -> object:
        """What the batch's span will link to, taken in the appender's task."""
        ...

    def commit(self, links: Sequence[object]) -> AbstractContextManager[object]:
        """The span of one commit, in the writer thread, given each append's link."""
        ...


@dataclass
class _Pending:
    event: AuditEvent
    future: asyncio.Future[int]
    loop: asyncio.AbstractEventLoop
    link: object = None
    # Set when the append failed closed past its bound: the writer then skips the event.
    # A caller that merely went away (its future cancelled with it) is not one of these.
    timed_out: bool = False


class GroupCommitLedger:
    """The queue and writer thread of a ledger; backends supply the writes."""

    def __init__(self, *, append_timeout_seconds: float | None = None) -> None:
        # How long an append waits for its commit: past it, the write fails closed even
        # when the backend cannot say so itself (a database that stopped answering).
        self._append_timeout = append_timeout_seconds
        self._queue: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()
        self._closed = False
        self.on_commit: CommitHook | None = None
        self.commit_tracer: CommitTracer | None = None
        self._writer = threading.Thread(target=self._run, name="ledger-writer", daemon=True)

    def _start_writer(self) -> None:
        self._writer.start()

    async def append(self, event: AuditEvent) -> int:
        if self._closed:
            raise LedgerError("ledger is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()
        tracer = self.commit_tracer
        pending = _Pending(event, future, loop, tracer.link() if tracer else None)
        self._queue.put(pending)
        # A caller that goes away (its call cancelled) cancels the future with it, and leaves
        # its event to be written all the same, as a write that may have landed needs: the
        # writer skips only what timed out. Awaited as it is, not shielded: a shield's
        # second future costs each append another turn of the event loop.
        if self._append_timeout is None:
            return await future
        try:
            async with asyncio.timeout(self._append_timeout):
                return await future
        except TimeoutError:
            # Past the bound the write fails closed; the writer skips the event if it has
            # not taken it up yet, so that no event outlives the failure it reported.
            pending.timed_out = True
            raise LedgerError(f"audit event not durable within {self._append_timeout:g}s") from None

    async def close(self) -> None:
        """Commit what is queued, then stop the writer and release the backend."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        # Polled rather than joined in a worker thread: a writer stuck on a database that
        # stopped answering must not hold a thread the process waits for at exit.
        while self._writer.is_alive():  # noqa: ASYNC110 - a thread, with no event to await
            await asyncio.sleep(0.01)
        self._close_backend()

    def _close_backend(self) -> None:
        raise NotImplementedError

    async def events_for(self, derived_id: str) -> list[StoredEvent]:
        raise NotImplementedError

    async def first_attempt(self, run_id: str, scope: str) -> AuditEvent | None:
        raise NotImplementedError

    async def ping(self) -> None:
        raise NotImplementedError

    def _write_batch(self, events: list[AuditEvent]) -> list[int | LedgerError]:
        raise NotImplementedError

    def _run(self) -> None:
        while True:
            batch, stop = scheduling.next_batch(self._queue, MAX_BATCH)
            if batch:
                self._commit(batch)
            if stop:
                return

    def _commit(self, batch: list[_Pending]) -> None:
        # An append that timed out has already failed its write closed.
        batch = [pending for pending in batch if not pending.timed_out]
        if not batch:
            return
        tracer = self.commit_tracer
        with tracer.commit([p.link for p in batch]) if tracer else nullcontext():
            started = time.perf_counter()
            try:
                results = self._write_batch([p.event for p in batch])
            except Exception as exc:  # any failure of the batch fails each of its appends closed
                log.warning("audit_append_failed", error=str(exc), batch=len(batch))
                error = LedgerError(f"audit event not persisted: {exc}")
                _wake([(pending, error) for pending in batch])
                return
            if self.on_commit is not None:
                self.on_commit(time.perf_counter() - started, len(batch))
        _wake(list(zip(batch, results, strict=True)))


def _settle(settled: list[tuple[asyncio.Future[int], int | LedgerError]]) -> None:
    for future, result in settled:
        if future.done():
            continue
        if isinstance(result, LedgerError):
            future.set_exception(result)
        else:
            future.set_result(result)


def _wake(batch: list[tuple[_Pending, int | LedgerError]]) -> None:
    # One wake-up per event loop for the whole batch: each call_soon_threadsafe
    # writes to the loop's self-pipe, a system call and a loop iteration apiece.
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[int], int | LedgerError]]]
    by_loop = {}
    for pending, result in batch:
        by_loop.setdefault(pending.loop, []).append((pending.future, result))
    for loop, settled in by_loop.items():
        # The appender's loop may be gone (its call was cancelled and the server
        # stopped); the event is durable all the same, and the writer must live on.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_settle, settled)
