"""A StoreClient that calls the embedded reference store's backend directly.

The embedded store runs in the sidecar's own process; reaching it over a loopback
gRPC hop cost each write a client call and a server call in the same event loop,
plus encoding and decoding both ways: most of the sidecar's CPU per write. This
client makes the same backend calls in worker threads instead (the backends block
on disk or on PostgreSQL; the event loop must not), and keeps the gRPC client's
contract exactly:

- the backend's refusal is the contract's Refusal, the one the gRPC path decodes from the
  store's ErrorInfo (same code, message and states), and passes as it is;
- ``StoreUnavailableError`` and any other failure of the store become
  StoreUnavailable (the gRPC store answers those UNAVAILABLE or INTERNAL), in
  :func:`_map_errors`, the one place that maps;
- a call that outlasts the deadline becomes StoreDeadlineExceeded; as over gRPC, the
  write may still land, and a retry with the same derived id is safe;
- answers are the contract's records, passed through as they are.

An external store (``--store-target``) and ``actonce store`` keep the gRPC path.

Where the ledger shares the store's file (a data folder of one file), the client is given the
ledger, and takes a :class:`~sidecar.upstream.base.OneCommit`: a write that is one store call
is made as one job of the batch thread, its intent, the store's rows and its outcome in one
transaction, one sync, and one hand-off from the event loop and back.

Where the ledger has a file (or a database) of its own, the client may be given it too, and takes a
:class:`~sidecar.upstream.base.ThreeCommits`: the same three commits, one after another, made as one
job of a batch thread of its own for them (:class:`ThreeCommitBatches`, below). A batch's intents
commit together on the ledger's connection, then their store calls in one store transaction, then
their outcomes together: three syncs a batch, and one hand-off from the event loop and back a write,
where the core making them itself hands off three times.

A backend that can run a batch of calls in one transaction (the SQLite one, and the
PostgreSQL one) gets them from one batch thread of this client's
(:class:`~sidecar.ledger.base.BatchThread`): calls queue while it works, it hands the whole
queue over at once, and it wakes the event loop once per batch with every answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import enum
import functools
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, cast, runtime_checkable

import structlog

from sidecar import defaults
from sidecar.errors import ActonceError, StoreDeadlineExceeded, StoreUnavailable
from sidecar.ledger.base import AuditEvent, BatchThread, LedgerError
from sidecar.refstore import backend as store
from sidecar.refstore.backend import StoreBackend
from sidecar.store_contract import Refusal
from sidecar.upstream.base import (
    AuditedWrites,
    Committed,
    CreateArtifact,
    CreateThread,
    GetArtifact,
    GetOwner,
    ListMessages,
    OneCommit,
    PatchArtifact,
    PostMessage,
    ProposeCreate,
    ProposePatch,
    StoreCall,
    StoreWrite,
    ThreeCommits,
)

log = structlog.get_logger()

_T = TypeVar("_T")
_R = TypeVar("_R")

# As many calls in flight as the PostgreSQL backend has pooled connections; the
# SQLite backend serializes on its one connection whatever the number.
DEFAULT_WORKERS = 8
# Most calls handed over at once; bounds how long the first of them waits.
MAX_BATCH = 64


@runtime_checkable
class BatchingBackend(Protocol):
    """A backend that makes many calls in one transaction and answers after its commit."""

    def run_batch(self, calls: Sequence[Callable[[], Any]]) -> list[Any]: ...


@runtime_checkable
class OneTransactionBackend(Protocol):
    """A backend that runs a job of several parts in one transaction on its connection."""

    def in_one_transaction(self, job: Callable[[Any], _T]) -> _T: ...


class SharedLedger(Protocol):
    """The ledger whose file the store shares: it appends inside the store's transaction."""

    def append_in(self, db: Any, events: Sequence[AuditEvent]) -> list[int | LedgerError]: ...


# Each call of the contract as the backend's method, bound to the call's arguments.
_BACKEND_CALLS: dict[type[StoreCall[Any]], Callable[[StoreBackend, Any], Callable[[], Any]]]
_BACKEND_CALLS = {
    CreateArtifact: lambda b, op: functools.partial(
        b.create_artifact, op.artifact_id, op.kind, op.data_json, principal=op.principal
    ),
    GetArtifact: lambda b, op: functools.partial(
        b.get_artifact, op.artifact_id, principal=op.principal
    ),
    PatchArtifact: lambda b, op: functools.partial(
        b.patch_artifact,
        op.artifact_id,
        op.expected_version,
        op.patch_json,
        principal=op.principal,
    ),
    ProposeCreate: lambda b, op: functools.partial(
        b.create_proposal,
        op.proposal_id,
        kind=op.kind,
        data_json=op.data_json,
        principal=op.principal,
    ),
    ProposePatch: lambda b, op: functools.partial(
        b.create_proposal,
        op.proposal_id,
        artifact_id=op.artifact_id,
        patch_json=op.patch_json,
        base_version=op.base_version,
        principal=op.principal,
    ),
    CreateThread: lambda b, op: functools.partial(
        b.create_thread, op.thread_id, op.title, principal=op.principal
    ),
    PostMessage: lambda b, op: functools.partial(
        b.post_message,
        store.NewMessage(op.message_id, op.thread_id, op.kind, op.text, op.request_turn),
        principal=op.principal,
    ),
    ListMessages: lambda b, op: functools.partial(
        b.list_messages, op.thread_id, principal=op.principal
    ),
    GetOwner: lambda b, op: (
        functools.partial(b.get_owner, thread_id=op.target_id)
        if op.thread
        else functools.partial(b.get_owner, artifact_id=op.target_id)
    ),
}
# What the contract answers with nothing where the backend answers a record.
_ANSWER_NOTHING = frozenset({ProposeCreate, ProposePatch, CreateThread})


@contextlib.contextmanager
def _map_errors(operation: str) -> Iterator[None]:
    try:
        yield
    except (Refusal, StoreDeadlineExceeded, StoreUnavailable):
        raise
    except store.StoreUnavailableError as error:
        raise StoreUnavailable(f"store unavailable for {operation}: {error}") from error
    except Exception as error:
        # A fault of the store itself: the gRPC store answers INTERNAL, which the
        # sidecar reads as unavailable. Its text is for the operator's log only.
        log.exception("store.failed", operation=operation)
        raise StoreUnavailable(f"store unavailable for {operation}: INTERNAL") from error


def _made(call: Callable[[], object]) -> object:
    """What ``call`` returned, or the exception it raised."""
    try:
        return call()
    except Exception as failed:
        return failed


def _answered(job: OneCommit[Any] | ThreeCommits[Any], answer: object) -> object:
    """A backend's answer to a job's write as the contract says it: its record (nothing for
    the calls that answer nothing), or its refusal or failure, mapped."""
    write = job.write
    if not isinstance(answer, Exception):
        return None if type(write) in _ANSWER_NOTHING else answer
    try:
        with _map_errors(write.rpc):
            raise answer
    except (Refusal, ActonceError) as failed:
        return failed


class InProcessStoreClient:
    """A StoreClient over a ``StoreBackend`` in this process (the embedded store)."""

    def __init__(
        self,
        backend: StoreBackend,
        *,
        timeout_seconds: float = defaults.STORE_TIMEOUT_SECONDS,
        workers: int = DEFAULT_WORKERS,
        ledger: SharedLedger | None = None,
        separate_ledger: SeparateLedger | None = None,
        ledger_wait_seconds: float = defaults.AUDIT_BUSY_TIMEOUT_MS / 1000,
    ) -> None:
        self._backend = backend
        self.timeout_seconds = timeout_seconds
        # Given only where the ledger shares the backend's file (sidecar.assembly).
        self._one_transaction = (
            backend if ledger is not None and isinstance(backend, OneTransactionBackend) else None
        )
        self._ledger = ledger if self._one_transaction is not None else None
        self._ledger_wait = ledger_wait_seconds
        self._batches: BatchThread[Callable[[], object], object] | None = None
        self._three_commit_thread: BatchThread[ThreeCommitJob, object] | None = None
        self._executor: ThreadPoolExecutor | None = None
        if isinstance(backend, BatchingBackend):
            self._batches = BatchThread("store-batches", backend.run_batch, most=MAX_BATCH)
            self._batches.start()
            if separate_ledger is not None and self._ledger is None:
                # Given only where the ledger has a file or a database of its own.
                batches = ThreeCommitBatches(separate_ledger, backend.run_batch, _answered)
                self._three_commit_thread = BatchThread(
                    "store-3-commits", batches.run, most=MAX_BATCH
                )
                self._three_commit_thread.start()
        else:
            # A pool of its own: store calls never wait behind the ledger's reads in the
            # loop's default executor, nor those behind them.
            self._executor = ThreadPoolExecutor(
                max_workers=workers,
                thread_name_prefix="store",
            )

    @property
    def audited_writes(self) -> AuditedWrites:
        """How this client makes a write of one store call with its audit: what the
        assembly tells the core to send it."""
        if self._ledger is not None and self._batches is not None:
            return AuditedWrites.AS_ONE
        if self._three_commit_thread is not None:
            return AuditedWrites.THREE_COMMITS
        return AuditedWrites.APART

    async def call(self, op: StoreCall[_T], timeout: float | None = None) -> _T:
        if isinstance(op, OneCommit):
            return cast(_T, await self._one_commit(op, timeout))
        if isinstance(op, ThreeCommits):
            return cast(_T, await self._three_commits(op, timeout))
        bound = _BACKEND_CALLS[type(op)](self._backend, op)
        with _map_errors(op.rpc):
            try:
                async with asyncio.timeout(self.timeout_seconds if timeout is None else timeout):
                    answer = await self._hand_over(bound)
            except TimeoutError:
                raise StoreDeadlineExceeded(
                    f"store did not answer {op.rpc} in time; the write may have landed, "
                    "and a retry with the same derived id is safe"
                ) from None
        return cast(_T, None if type(op) in _ANSWER_NOTHING else answer)

    async def _hand_over(self, job: Callable[[], object]) -> object:
        if self._batches is not None:
            return await self._batches.submit(job)
        return await asyncio.get_running_loop().run_in_executor(self._executor, job)

    async def _one_commit(self, op: OneCommit[_R], timeout: float | None) -> Committed[_R]:
        ledger, batches, backend = self._ledger, self._batches, self._one_transaction
        if ledger is None or batches is None or backend is None:
            raise TypeError("this store does not share the ledger's file")
        write: StoreWrite = op.write
        made = _BACKEND_CALLS[type(write)](self._backend, write)

        def one_commit(db: Any) -> Committed[_R]:
            op.before()
            [intended] = ledger.append_in(db, [op.intent])
            if isinstance(intended, LedgerError):  # fenced: nothing of the job is kept
                raise intended
            answer = _answered(op, _made(made))
            outcome, result = op.settle(answer)
            [ended] = ledger.append_in(db, [outcome])
            if isinstance(ended, LedgerError):
                raise ended
            return Committed(answer, result)

        # The store's deadline, and the time the intent may wait for the file as the
        # ledger's own appends may: the three commits made one after another do not bound that
        # wait by the store's deadline either, and ``before`` checks the lease once it is over.
        bound = (self.timeout_seconds if timeout is None else timeout) + self._ledger_wait
        try:
            async with asyncio.timeout(bound):
                job = functools.partial(backend.in_one_transaction, one_commit)
                return cast(Committed[_R], await batches.submit(job))
        except TimeoutError:
            raise StoreDeadlineExceeded(
                f"{write.rpc} and its audit did not commit in time; the write may have "
                "landed, and a retry with the same derived id is safe"
            ) from None
        except (LedgerError, ActonceError):
            raise
        except Exception as error:
            # The transaction did not commit, or SQLite ended it: none of the job is durable.
            raise LedgerError(f"the write and its audit did not commit: {error}") from error

    async def _three_commits(self, op: ThreeCommits[_R], timeout: float | None) -> Committed[_R]:
        thread = self._three_commit_thread
        if thread is None:
            raise TypeError("this store is not given its ledger")
        call = _BACKEND_CALLS[type(op.write)](self._backend, op.write)
        seconds = self.timeout_seconds if timeout is None else timeout
        job = ThreeCommitJob(op, call, contextvars.copy_context(), seconds, self._ledger_wait)
        future = thread.submit(job)
        watch(job, future)
        try:
            return cast(Committed[_R], await future)
        except (LedgerError, ActonceError, Refusal):
            raise
        except Exception as error:  # the thread's work failed as a whole: it may have landed
            raise StoreUnavailable(f"store unavailable for {op.write.rpc}: {error}") from error

    async def close(self) -> None:
        """Let the calls still running finish (the assembly closes the backend after this,
        once the embedded server stops)."""
        for thread in (self._three_commit_thread, self._batches):
            if thread is not None:
                await thread.close()
        if self._executor is not None:
            await asyncio.to_thread(self._executor.shutdown, wait=True, cancel_futures=True)


# -- writes in three commits -------------------------------------------------------
#
# A write's three commits, one after another, as one job of the embedded store's thread for them.
#
# Where the ledger has a file or a database of its own, the in-process store client takes a
# :class:`~sidecar.upstream.base.ThreeCommits`, and a batch thread of its own for these makes each
# batch of them in three steps (:meth:`ThreeCommitBatches.run`): the intents commit together on the
# ledger's connection (through the ledger's ``append_now``); their store calls then run in one store
# transaction; their outcomes commit together last. Three syncs a batch, and one hand-off from the
# event loop and back a write, where the core making the three itself hands off three times. The
# store's other calls (reads, an edit's patch) keep a thread of their own: a ledger that stopped
# answering holds these jobs, not them.
#
# Each part keeps the bound it has when the core makes it apart, counted from when that part begins
# (:meth:`ThreeCommitJob.overdue`, watched from the event loop by :func:`watch`): waiting for the
# thread counts against the store's deadline (it is the store's thread), the intent against the
# ledger's wait, the store call against the store's deadline, the outcome against the ledger's wait
# again. The thread tells the loop nothing as it goes (that would be the hand-offs saved): it stamps
# each part's start on the job, and the loop reads the stamps when a bound comes. A part whose bound
# passed is not followed by the next: a job past its bound before its intent began writes nothing,
# one past it in its intent never calls the store, and one whose store call outlived its deadline
# leaves its outcome to the core, which records the deadline as the phases apart do.

# What the loop's bound on a ledger's part adds to the ledger's own wait: the ledger's own
# timeout (SQLite's busy handler, PostgreSQL's lock timeout) has the first word.
LEDGER_GRACE_SECONDS = 0.1


class SeparateLedger(Protocol):
    """The ledger of a store that does not share its file: it commits in the calling thread
    (sidecar.ledger.base)."""

    def append_now(
        self, events: Sequence[AuditEvent], contexts: Sequence[contextvars.Context | None]
    ) -> list[int | LedgerError]: ...


class Stage(enum.Enum):
    QUEUED = "queued"  # waiting for the thread
    INTENT = "intent"  # its intent committing
    CALLED = "called"  # the store called: the write may land
    SETTLING = "settling"  # its outcome committing
    PAST = "past"  # the loop answered it past a bound: the thread goes no further with it


@dataclass(slots=True)
class ThreeCommitJob:
    """A ThreeCommits under way: its store call, bound; the context it was made in (for the
    ledger's commit hooks); its bounds; how far it got, and what it answers."""

    op: ThreeCommits[Any]
    call: Callable[[], object]
    context: contextvars.Context
    store_seconds: float
    ledger_seconds: float
    answer: object = None
    stage: Stage = Stage.QUEUED
    # When its stage began (time.monotonic, the event loop's clock).
    since: float = field(default_factory=time.monotonic)
    # Its store's answer and what settle made of it, once its outcome's commit began.
    settled: Committed[Any] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def enter(self, stage: Stage) -> bool:
        """In the thread: whether the job goes on to ``stage`` (not once the loop answered)."""
        with self.lock:
            if self.stage is Stage.PAST:
                return False
            self.stage, self.since = stage, time.monotonic()
            return True

    def settling(self, answer: object, result: object) -> bool:
        """In the thread: whether its outcome is to commit now (not past the store's bound)."""
        with self.lock:
            if self.stage is Stage.PAST:
                return False
            self.stage, self.since = Stage.SETTLING, time.monotonic()
            self.settled = Committed(answer, result)
            return True

    def overdue(self, now: float) -> tuple[BaseException | Committed[Any] | None, float]:
        """From the event loop: what the job answers now that its part is past its bound
        (None while it is within it), and when to look again. A part the thread begins after
        this look has a bound no earlier than the shortest one from now: the next look comes
        no later than that."""
        with self.lock:
            stage = self.stage
            end = self.since + self._bound(stage)
            if stage is Stage.PAST:
                return None, now
            if now < end:
                return None, min(end, now + min(self.store_seconds, self.ledger_seconds))
            self.stage = Stage.PAST
            return self._past(stage), now

    def _bound(self, stage: Stage) -> float:
        if stage in (Stage.INTENT, Stage.SETTLING):
            return self.ledger_seconds + LEDGER_GRACE_SECONDS
        return self.store_seconds

    def _past(self, stage: Stage) -> BaseException | Committed[Any]:
        waited = f"{self._bound(stage):g}s"
        if stage is Stage.SETTLING and self.settled is not None:
            lost = LedgerError(f"audit event not durable within {waited}")
            return Committed(self.settled.answer, self.settled.result, lost)
        if stage is Stage.INTENT:
            return LedgerError(f"audit intent not durable within {waited}")
        if stage is Stage.QUEUED:
            return StoreDeadlineExceeded(
                f"{self.op.write.rpc} waited {waited} for the store's thread and was not "
                "sent; nothing of it was written",
                nothing_sent=True,
            )
        return StoreDeadlineExceeded(
            f"store did not answer {self.op.write.rpc} in time; the write may have landed, "
            "and a retry with the same derived id is safe"
        )


def watch(job: ThreeCommitJob, future: asyncio.Future[Any]) -> None:
    """Answer ``future`` from the event loop when the part ``job`` is in passes its bound;
    the job stops in its thread at its next part, and its own answer then finds the future
    done."""
    loop = asyncio.get_running_loop()
    timer: list[asyncio.TimerHandle] = []

    def look() -> None:
        if future.done():
            return
        answer, again = job.overdue(loop.time())  # the loop's clock is time.monotonic
        if isinstance(answer, BaseException):
            future.set_exception(answer)
        elif answer is not None:
            future.set_result(answer)
        else:
            timer[0] = loop.call_at(again, look)

    first = job.since + min(job.ledger_seconds, job.store_seconds)
    timer.append(loop.call_at(first, look))
    future.add_done_callback(lambda _: timer[0].cancel())


@dataclass(frozen=True)
class ThreeCommitBatches:
    """The work of the thread that makes ThreeCommitBatches: ``ledger`` commits their events,
    ``run_batch`` makes their store calls in one transaction (each answer its result or
    exception), and ``answered`` says a call's answer as the contract does."""

    ledger: SeparateLedger
    run_batch: Callable[[Sequence[Callable[[], object]]], Sequence[object]]
    answered: Callable[[ThreeCommits[Any], object], object]

    def run(self, jobs: Sequence[ThreeCommitJob]) -> list[object]:
        """Each job's answer, once its intent, its store call and its outcome have committed
        one after another, or what stopped it."""
        calling, refused = _checked_again(self._commit_intents(jobs))
        made = self._call(calling)
        answered = [
            (job, self.answered(job.op, answer)) for job, answer in zip(calling, made, strict=True)
        ]
        self._commit_outcomes([*answered, *refused])
        return [job.answer for job in jobs]

    def _commit_intents(self, jobs: Sequence[ThreeCommitJob]) -> list[ThreeCommitJob]:
        """Check each job, then commit their intents together: the jobs whose intent is
        durable. The others answer what refused them."""
        checked: list[ThreeCommitJob] = []
        for job in jobs:
            try:
                job.op.before()
            except Exception as refused:  # the lease ran out while it waited: nothing written
                job.answer = refused
                continue
            if job.enter(Stage.INTENT):  # not one the loop answered while it waited
                checked.append(job)
        intended = self.ledger.append_now(
            [job.op.intent for job in checked], [job.context for job in checked]
        )
        durable: list[ThreeCommitJob] = []
        for job, seq in zip(checked, intended, strict=True):
            if isinstance(seq, LedgerError):
                job.answer = seq
            else:
                durable.append(job)
        return durable

    def _call(self, calling: list[ThreeCommitJob]) -> list[object]:
        """The store's answer to each job's call: its record, or what it failed with."""
        if not calling:
            return []
        try:
            return list(self.run_batch([job.call for job in calling]))
        except Exception as failed:  # the batch as a whole failed: each call may have landed
            return [failed] * len(calling)

    def _commit_outcomes(self, answered: list[tuple[ThreeCommitJob, object]]) -> None:
        """Settle each job's answer, then commit their outcomes together; a job the loop
        answered past the store's deadline has its outcome recorded by the core."""
        settled: list[tuple[ThreeCommitJob, object, AuditEvent, object]] = []
        for job, answer in answered:
            try:
                outcome, result = job.op.settle(answer)
            except Exception as failed:  # the write's own fault: it may have landed
                job.answer = failed
                continue
            if job.settling(answer, result):
                settled.append((job, answer, outcome, result))
        ended = self.ledger.append_now(
            [outcome for _, _, outcome, _ in settled], [job.context for job, *_ in settled]
        )
        for (job, answer, _, result), seq in zip(settled, ended, strict=True):
            lost = seq if isinstance(seq, LedgerError) else None
            job.answer = Committed(answer, result, lost)


def _checked_again(
    durable: list[ThreeCommitJob],
) -> tuple[list[ThreeCommitJob], list[tuple[ThreeCommitJob, object]]]:
    """The jobs whose intent is durable that call the store now, and those refused by their
    check, made again once the intent waited for the ledger (a lease that ran out meanwhile),
    each with what refused it: the answer their outcome records. A job the loop answered past
    its intent's bound is neither: it never calls the store."""
    calling: list[ThreeCommitJob] = []
    refused: list[tuple[ThreeCommitJob, object]] = []
    for job in durable:
        try:
            job.op.before()
        except Exception as error:
            refused.append((job, error))
            continue
        if job.enter(Stage.CALLED):
            calling.append(job)
    return calling, refused
