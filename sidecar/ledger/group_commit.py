"""Group commit, shared by every ledger backend, and the hooks that watch its appends.

One writer thread owns the backend's write connection. Appends queue up while
it commits; it then writes every queued event in one transaction and one sync,
and only after that commit does it wake each appender. Concurrent writes share
a sync, and no appender is woken before its own event is durable.

A backend implements :meth:`GroupCommitLedger._write_batch`, which writes a
batch in one transaction and returns, per event, its sequence number or the
error that refused that event alone (a fenced attempt's intent, say).

Another thread may commit on the writer's connection too (:meth:`GroupCommitLedger.append_now`):
the embedded store's batch thread, which makes a write's intent, its store call and its outcome
one after another as one job, without a hand-off to the writer and back for each event. The two
commit on the connection one at a time.

What watches the appends (the metrics' timing, the traces' spans) is an :class:`AppendHook`,
given to the ledger with :meth:`GroupCommitLedger.watch`: one kind of hook, called at the
same two points, around each append in the task that makes it and around each commit in the
writer's thread. A ledger that is given none runs no hook code at all.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from typing import Protocol

import structlog

from sidecar.ledger.base import AuditEvent, LedgerError, StoredEvent
from sidecar.ledger.liveness import Beats
from sidecar.ops.scheduling import BatchThread

log = structlog.get_logger()

# Most events a single commit carries; bounds a batch's latency under load.
MAX_BATCH = 512
# How long closing waits for a commit another thread has under way on the connection.
CLOSE_WAIT_SECONDS = 5.0


# The rest of an append, from a hook on: the hooks inside it, then the queue and the commit.
Append = Callable[[AuditEvent], Awaitable[int]]


class AppendHook(Protocol):
    """What watches a ledger's appends."""

    async def append(self, event: AuditEvent, append: Append) -> int:
        """Around one append, in the task that makes it: ``append`` it (a hook may add to the
        event: the call's trace), and answer what that answers once the event is durable, or
        raise what it raised."""
        ...

    def commit(self, appends: Sequence[contextvars.Context]) -> AbstractContextManager[None]:
        """Around one commit, in the writer's thread: ``appends`` holds the context each append
        it carries was queued in (within every hook's ``append``). A commit that fails leaves
        it with the error, and each of those appends is then refused."""
        ...


@dataclass
class _Pending:
    event: AuditEvent
    # The context the append was queued in, for the commit's hooks; None when none watches.
    context: contextvars.Context | None = None
    # Set when the append failed closed past its bound: the writer then skips the event.
    # A caller that merely went away (its future cancelled with it) is not one of these.
    timed_out: bool = False


class GroupCommitLedger:
    """The queue and writer thread of a ledger, and the hooks that watch it; backends supply
    the writes."""

    def __init__(self, *, append_timeout_seconds: float | None = None) -> None:
        # How long an append waits for its commit: past it, the write fails closed even
        # when the backend cannot say so itself (a database that stopped answering).
        self._append_timeout = append_timeout_seconds
        self._closed = False
        self._hooks: tuple[AppendHook, ...] = ()
        self._hooked: Append = self._queue
        # Held for each commit: the writer's, and those of append_now's callers.
        self._committing = threading.Lock()
        self._writer = BatchThread("ledger-writer", self._commit_queued, most=MAX_BATCH)

    def watch(self, hook: AppendHook) -> None:
        """Call ``hook`` around every append and every commit from now on, outside the hooks
        given before it."""
        self._hooks = (*self._hooks, hook)
        inner = self._hooked

        def hooked(event: AuditEvent) -> Awaitable[int]:
            return hook.append(event, inner)

        self._hooked = hooked

    def _start_writer(self) -> None:
        self._writer.start()

    async def append(self, event: AuditEvent) -> int:
        if self._closed:
            raise LedgerError("ledger is closed")
        return await self._hooked(event)

    async def _queue(self, event: AuditEvent) -> int:
        # Within every hook's append: the context the commit's hooks are given.
        pending = _Pending(event, contextvars.copy_context() if self._hooks else None)
        future = self._writer.submit(pending)
        # A caller that goes away (its call cancelled) cancels the future with it, and leaves
        # its event to be written all the same, as a write that may have landed needs: the
        # writer skips only what timed out. Awaited as it is, not shielded: a shield's
        # second future costs each append another iteration of the event loop.
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

    def append_now(
        self, events: Sequence[AuditEvent], contexts: Sequence[contextvars.Context | None]
    ) -> list[int | LedgerError]:
        """Append ``events`` in one commit, in the calling thread, and answer once they are
        durable: per event, its number or the error that refused it. ``contexts`` holds each
        event's call context, for the commit's hooks. The hooks' ``append`` is not called:
        the caller (the store's client, whose middleware sees its job) times and traces the
        job as a whole."""
        if self._closed:
            return [LedgerError("ledger is closed")] * len(events)
        watched = bool(self._hooks)
        batch = [
            _Pending(event, context if watched else None)
            for event, context in zip(events, contexts, strict=True)
        ]
        with self._committing:
            return self._commit(batch)

    async def close(self) -> None:
        """Commit what is queued, then stop the writer and release the backend."""
        if self._closed:
            return
        self._closed = True
        await self._writer.close()
        # A commit of append_now's still under way (a store's thread on a database that stopped
        # answering) keeps the connection for a while more: it is closed once that is over.
        taken = await asyncio.to_thread(self._committing.acquire, True, CLOSE_WAIT_SECONDS)
        try:
            self._close_backend()
        finally:
            if taken:
                self._committing.release()

    def _close_backend(self) -> None:
        raise NotImplementedError

    async def events_for(self, derived_id: str) -> list[StoredEvent]:
        raise NotImplementedError

    async def first_attempt(self, run_id: str, scope: str) -> AuditEvent | None:
        raise NotImplementedError

    async def ping(self) -> None:
        raise NotImplementedError

    def beats(self) -> Beats | None:
        """The connections the sidecar's heartbeat may borrow, where the ledger lends them
        (a pool of its own); None: the heartbeat opens its own."""
        return None

    def _write_batch(self, events: list[AuditEvent]) -> list[int | LedgerError]:
        raise NotImplementedError

    def _commit_queued(self, batch: list[_Pending]) -> list[int | LedgerError]:
        with self._committing:
            return self._commit(batch)

    def _commit(self, batch: list[_Pending]) -> list[int | LedgerError]:
        """Write the batch in one commit (in the writer's thread): per append, its number or
        the error that refused it."""
        # An append that timed out has already failed its write closed: nobody waits for it.
        kept = [pending for pending in batch if not pending.timed_out]
        skipped = LedgerError("the append timed out before it was written")
        if not kept:
            return [skipped] * len(batch)
        try:
            written = dict(zip(map(id, kept), self._write_kept(kept), strict=True))
        except Exception as exc:  # any failure of the batch fails each of its appends closed
            log.warning("audit_append_failed", error=str(exc), batch=len(kept))
            return [LedgerError(f"audit event not persisted: {exc}")] * len(batch)
        return [written.get(id(pending), skipped) for pending in batch]

    def _write_kept(self, kept: list[_Pending]) -> list[int | LedgerError]:
        events = [pending.event for pending in kept]
        hooks = self._hooks
        if not hooks:
            return self._write_batch(events)
        contexts = [p.context for p in kept if p.context is not None]
        with ExitStack() as watched:
            for hook in hooks:
                watched.enter_context(hook.commit(contexts))
            return self._write_batch(events)
