"""The audit ledger: its interface, its event, and the base every backend builds on.

A write's intent is appended before the store is called and its outcome
before the answer is sent; ``append`` returns only once the event is durable
(fsync'd or committed). Each event carries a hash over its content and the
previous event's hash, so that an edited, deleted or reordered event shows.

Group commit (:class:`GroupCommitLedger`), shared by every backend:

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

The writer is a :class:`BatchThread` (below), the one kind of batch thread: the embedded
store's client (sidecar.upstream.inprocess) runs its batch threads on it too.

The ledger's writer and the embedded store's batch thread wake up for every commit, and a
write's answer waits for each of those wake-ups. They run under the kernel's normal policy
on purpose. SCHED_BATCH would let a woken thread wait out a full time slice of whatever
else runs on its core: on idle cores that saves about a fifth of the CPU per write, but
beside an agent whose container keeps both cores busy every hand-off of a write waits a
slice, and an audited write's p50 goes from about 4.5 ms to 40 ms. A policy that delays an
answer has no place on the answer's path, and every background thread here is on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import json
import queue
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field, fields
from typing import Any, Generic, Protocol, TypeVar, cast

import structlog

GENESIS_HASH = "0" * 64


class LedgerError(Exception):
    """The ledger could not make an event durable (or could not be reached)."""


class FencedError(LedgerError):
    """An intent of an attempt that a newer attempt of its run and scope has fenced.

    Checked in the same transaction that would make the intent durable, so a
    fenced attempt's write never reaches the store, on any sidecar that
    shares the ledger.
    """


class RunRuleError(LedgerError):
    """An attempt of a run begun under another rule than the run's: refused, unwritten.

    A run belongs to the rule of its first attempt. The binding is read and made in the
    same transaction that would make the attempt's begin durable, so two sidecars
    beginning one run under two rules at once cannot both win.
    """

    def __init__(self, run_id: str, rule: str, run_rule: str) -> None:
        super().__init__(f"run {run_id} belongs to rule {run_rule!r}, not {rule!r}")
        self.run_id = run_id
        self.rule = rule
        self.run_rule = run_rule


class Phase:
    """What an event records."""

    ATTEMPT_BEGIN = "attempt_begin"
    ATTEMPT_END = "attempt_end"
    INTENT = "intent"  # a write is about to be tried
    OUTCOME = "outcome"  # how a write ended: outcome, or reason and failure class
    READ = "read"  # a read, audited fail-soft
    STEP_BEGIN = "step_begin"
    STEP_END = "step_end"
    STEP_ABORT = "step_abort"  # the agent declares a begun step's effect did not happen
    # A begun step's call failed after it was sent, or its tool answered an error: it may
    # have acted, and it did not end (a later attempt never takes it for done).
    STEP_FAILED = "step_failed"
    # The ledger's leave to send a begun step's call (sidecar.ledger.permits): granted
    # atomically against fencing, the lease by the ledger's clock, and operators' decisions.
    STEP_PERMIT = "step_permit"
    LEASE = "lease"  # an attempt's lease was extended
    DECISION = "decision"  # an operator's decision on what needs a person


# Events whose attempt must still be the newest of its (run, scope) to be written, or, for a
# step's end, written marked (FENCED_END): a fenced attempt's result must not become the one
# later attempts replay (a model's answer recorded by a stale delivery would give a
# redelivery other tool calls than those the newer delivery made), so its step stays as the
# newer attempt leaves it: a later attempt runs it again. But the end is recorded, since the
# tool acted; and a non-idempotent step's end is written plain (see fences()).
FENCED_PHASES = frozenset({Phase.INTENT, Phase.STEP_BEGIN, Phase.STEP_PERMIT, Phase.STEP_END})
NON_IDEMPOTENT = "NON_IDEMPOTENT_WRITE"
# Events of a scoped attempt that names its delivery (an unscoped attempt of its run), whose
# delivery must still be the run's newest unscoped attempt to be written: its begin too.
DELIVERY_FENCED_PHASES = FENCED_PHASES | {Phase.ATTEMPT_BEGIN}
# The detail key that marks a step's end written by a fenced attempt: recorded, since the
# tool acted, but never the result later attempts replay.
FENCED_END = "fenced"
# Where an event of a scoped attempt names its delivery: the detail key.
DELIVERY_KEY = "delivery_attempt_id"


@dataclass(frozen=True)
class AuditEvent:
    """One ledger entry. Digests, never payloads, except a step's result,
    which a later attempt must be able to return."""

    run_id: str
    attempt_id: str
    rpc: str
    phase: str
    rule: str = ""
    checkpoint: str = ""
    write_type: str = ""
    derived_id: str = ""
    request_id: str = ""
    occurrence: int = -1
    digest: str = ""
    outcome: str = ""
    reason: str = ""
    failure_class: str = ""
    detail: dict[str, Any] = field(default_factory=dict)
    # The attempt's scope within its run; empty for an unscoped attempt.
    scope: str = ""
    # The trace (32 hex digits) and span (16) of the call that wrote the event, when the
    # sidecar traces (sidecar.ops.tracing); empty otherwise.
    trace_id: str = ""
    span_id: str = ""


_EVENT_FIELDS = tuple(f.name for f in fields(AuditEvent))
# Fields added after ledgers existed: hashed only when set, so that every
# event written before them keeps its hash and `audit verify` still passes.
# The trace ids are hashed when set, like the rest of an event: an edit that
# pointed an event at another trace would mislead whoever follows the link.
_HASHED_WHEN_SET = frozenset({"scope", "trace_id", "span_id"})


@dataclass(frozen=True)
class RunSummary:
    """One run as the ledger saw it (``actonce audit list``)."""

    run_id: str
    rule: str
    attempts: int
    events: int
    first_ts: str
    last_ts: str


@dataclass(frozen=True)
class StoredEvent:
    """An event as the ledger holds it: numbered, timestamped, chained."""

    seq: int
    ts: str
    event: AuditEvent
    prev_hash: str
    hash: str
    # The chain the event was appended to (sidecar.ledger.sql.chain_of): prev_hash links to the
    # event before it in that chain.
    chain: int = 0


@dataclass(frozen=True)
class Checkpoint:
    """What one prune recorded: the last event it removed (number and hash), and how many
    it removed, which ran from the event after the checkpoint before it."""

    seq: int
    hash: str
    events: int
    chain: int = 0
    # The checkpoint (of the same chain) this prune went on from, where the prune recorded
    # it: a chain's numbers have gaps in a ledger of many chains.
    follows: int | None = None

    @property
    def after(self) -> int:
        """The last event of the chain before what this prune removed."""
        return self.seq - self.events if self.follows is None else self.follows


def event_hash(seq: int, ts: str, event: AuditEvent, prev_hash: str, chain: int = 0) -> str:
    """The chain hash of an event: over its number, time, content, chain and predecessor.

    Chain 0 is hashed without naming it, as every event was before a ledger had chains:
    a ledger's history from then is chain 0's, its hashes unchanged."""
    # The fields as asdict() gives them, without its deep copy: the JSON is the same.
    content = {
        name: getattr(event, name)
        for name in _EVENT_FIELDS
        if name not in _HASHED_WHEN_SET or getattr(event, name)
    }
    if chain:
        content["chain"] = chain
    body = json.dumps(
        {"seq": seq, "ts": ts, **content},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=True,
    )
    return hashlib.sha256((prev_hash + body).encode("ascii")).hexdigest()


# A fencing key: the run, and the attempt's scope ("" for unscoped attempts, a run's deliveries).
RunScope = tuple[str, str]


def delivery_of(event: AuditEvent) -> str:
    """The delivery an event's scoped attempt belongs to, or "" when it names none."""
    return str(event.detail.get(DELIVERY_KEY, "")) if event.scope else ""


def fences(event: AuditEvent, phases: frozenset[str] = FENCED_PHASES) -> bool:
    """Whether ``event`` is written only while its attempt is the newest. A non-idempotent
    step's end is written whoever ends it: its tool acted, once, and a later attempt must
    get that result rather than find the step in doubt."""
    if event.phase not in phases:
        return False
    return not (event.phase == Phase.STEP_END and event.detail.get("effect") == NON_IDEMPOTENT)


def fencing_keys(event: AuditEvent) -> list[RunScope]:
    """The (run, scope) pairs whose newest attempt decides whether ``event`` is written."""
    keys: list[RunScope] = []
    if fences(event):
        keys.append((event.run_id, event.scope))
    if delivery_of(event) and fences(event, DELIVERY_FENCED_PHASES):
        keys.append((event.run_id, ""))
    return keys


def fenced(event: AuditEvent, newest: Callable[[RunScope], str | None]) -> FencedError | None:
    """The refusal of ``event`` if its attempt is no longer the newest of its (run,
    scope), or if it names a delivery that is no longer its run's newest unscoped attempt
    (``newest`` gives the newest attempt of a pair, None when none began); attempts of
    other scopes never fence it."""
    if fences(event):
        newest_attempt = newest((event.run_id, event.scope))
        if newest_attempt not in (None, event.attempt_id):
            scope = f" scope {event.scope!r}" if event.scope else ""
            return FencedError(
                f"attempt {event.attempt_id} of run {event.run_id}{scope} was fenced by a "
                f"newer attempt {newest_attempt}"
            )
    delivery = delivery_of(event)
    if delivery and fences(event, DELIVERY_FENCED_PHASES):
        newest_delivery = newest((event.run_id, ""))
        if newest_delivery != delivery:
            found = f"newer delivery {newest_delivery}" if newest_delivery else "no delivery"
            return FencedError(
                f"attempt {event.attempt_id} of run {event.run_id} belongs to delivery "
                f"{delivery}, which is not the run's newest: the ledger has {found}"
            )
    return None


def other_rule(event: AuditEvent, run_rules: dict[str, str]) -> RunRuleError | None:
    """The refusal of a begin ``event`` whose run belongs to another rule; else None, and
    a run the ledger has not bound yet is bound to the event's rule in ``run_rules``."""
    bound = run_rules.setdefault(event.run_id, event.rule)
    return None if bound == event.rule else RunRuleError(event.run_id, event.rule, bound)


class Beats(Protocol):
    """A connection a heartbeat may borrow from its ledger rather than open its own."""

    def execute(self, statement: str, params: tuple[object, ...]) -> Any: ...

    def close(self) -> None: ...


class AuditLedger(Protocol):
    """What the sidecar needs of a ledger backend."""

    async def append(self, event: AuditEvent) -> int:
        """Make ``event`` durable and return its sequence number; LedgerError if
        not, FencedError if a newer attempt of its run began (intents only),
        RunRuleError if its run belongs to another rule (begins only)."""
        ...

    async def events_for(self, derived_id: str) -> list[StoredEvent]:
        """Every event that names ``derived_id``, oldest first; LedgerError if unreadable."""
        ...

    async def first_attempt(self, run_id: str, scope: str) -> AuditEvent | None:
        """The begin event of the earliest attempt of (run, scope), or None when
        the ledger holds none; LedgerError if unreadable."""
        ...

    async def ping(self) -> None:
        """Raise LedgerError unless the ledger answers."""
        ...

    async def close(self) -> None:
        """Flush what is pending and release the backend."""
        ...


class LedgerReader(Protocol):
    """Read access for operators (``actonce audit``): never writes."""

    def runs(self) -> list[RunSummary]:
        """Every run in the ledger, most recent first."""
        ...

    def events(
        self, *, run_id: str | None = None, after: int = 0, chain: int | None = None
    ) -> Iterator[StoredEvent]:
        """Events in sequence order, all, one run's or one chain's, from after ``after``."""
        ...

    def count(self) -> int:
        """How many events the ledger holds."""
        ...

    def heads(self) -> dict[int, tuple[int, str]]:
        """Each chain's head as the ledger recorded it: last sequence number and hash."""
        ...

    def head(self) -> tuple[int, str]:
        """The newest of the chains' heads: the ledger's newest event's number and hash."""
        ...

    def checkpoint(self, chain: int = 0) -> tuple[int, str]:
        """Where ``chain`` as the ledger holds it begins: the sequence number and hash of
        the last event of it the newest prune removed, or (0, GENESIS_HASH) if none was."""
        ...

    def checkpoints(self) -> list[Checkpoint]:
        """Every prune's checkpoint, oldest first."""
        ...

    def first_seq(self, chain: int | None = None) -> int | None:
        """The number of the oldest event the ledger (or ``chain``) still holds; None when
        it holds none."""
        ...

    def snapshot(self) -> AbstractContextManager[None]:
        """Within it, every read sees the ledger as it was at one moment, whatever is
        appended meanwhile: the chain and its recorded head then agree on a live ledger."""
        ...

    def close(self) -> None: ...


# -- group commit ------------------------------------------------------------------------

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


# -- the batch thread --------------------------------------------------------------------

T = TypeVar("T")
J = TypeVar("J")
A = TypeVar("A")


def next_batch(jobs: queue.SimpleQueue[T | None], most: int) -> tuple[list[T], bool]:
    """Block for one job, then take what else is queued, up to ``most``.

    Returns the batch and whether the stop mark (``None``) was taken; a batch
    is empty only when the stop mark came first.
    """
    first = jobs.get()
    if first is None:
        return [], True
    batch = [first]
    while len(batch) < most:
        try:
            more = jobs.get_nowait()
        except queue.Empty:
            break
        if more is None:
            return batch, True
        batch.append(more)
    return batch, False


class BatchThread(Generic[J, A]):
    """One thread that takes every queued job at once and hands the batch to ``work``, which
    answers each job (its answer, or the exception that refused it alone); then it wakes
    each job's event loop once for the whole batch.

    The ledger's writer (sidecar.ledger.base) and the embedded store's batch thread
    (sidecar.upstream.inprocess) are two of these. Threads that each wait for their own
    commit contend for the interpreter with the event loop on every answer; this way there
    is one such wake-up per commit, not per call. In a data folder of one file the two run
    into the same transactions of the file's one writer (sidecar.refstore.sqlite).
    """

    def __init__(
        self, name: str, work: Callable[[list[J]], Sequence[A | BaseException]], *, most: int
    ) -> None:
        self._work = work
        self._most = most
        self._queue: queue.SimpleQueue[_Queued[J, A] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, job: J) -> asyncio.Future[A]:
        """Queue ``job``; its future is answered from the running loop once it is done. A
        caller that stops waiting leaves the job to be done all the same."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[A] = loop.create_future()
        self._queue.put(_Queued(job, future, loop))
        return future

    async def close(self) -> None:
        """Answer what is queued, then stop. Polled rather than joined in a worker thread:
        a thread stuck on a database that stopped answering must not hold another thread
        that the process waits for at exit."""
        self._queue.put(None)
        if not self._thread.is_alive():
            return
        while self._thread.is_alive():  # noqa: ASYNC110 - a thread, with no event to await
            await asyncio.sleep(0.01)

    def _run(self) -> None:
        while True:
            batch, stop = next_batch(self._queue, self._most)
            if batch:
                self._answer(batch)
            if stop:
                return

    def _answer(self, batch: list[_Queued[J, A]]) -> None:
        answers: Sequence[A | BaseException]
        try:
            answers = self._work([queued.job for queued in batch])
        except Exception as exc:  # the batch as a whole failed: so did each of its jobs
            answers = [exc] * len(batch)
        # One wake-up per event loop for the whole batch: each call_soon_threadsafe writes to
        # the loop's self-pipe, a system call and a loop iteration apiece.
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[A], object]]] = {}
        for queued, answer in zip(batch, answers, strict=True):
            by_loop.setdefault(queued.loop, []).append((queued.future, answer))
        for loop, settled in by_loop.items():
            # A loop already closed (its call cancelled, its server stopped) has no one left
            # waiting for these answers; the jobs are done all the same, and the thread lives on.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, settled)


@dataclass(slots=True)
class _Queued(Generic[J, A]):
    job: J
    future: asyncio.Future[A]
    loop: asyncio.AbstractEventLoop


def _settle(settled: list[tuple[asyncio.Future[A], object]]) -> None:
    for future, answer in settled:
        if future.done():  # its caller stopped waiting (a deadline, a cancelled call)
            continue
        if isinstance(answer, BaseException):
            future.set_exception(answer)
        else:
            future.set_result(cast(A, answer))
