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

Where the ledger has a file (or a database) of its own, the client may be given it too, and
takes an :class:`~sidecar.upstream.base.InTurn`: the same three commits, in turn, made as one
job of a batch thread of its own for them (sidecar.upstream.in_turn). A batch's intents commit
together on the ledger's connection, then their store calls in one store transaction, then their
outcomes together: three syncs a batch, and one hand-off from the event loop and back a write,
where the core making them itself hands off three times.

A backend that can run a batch of calls in one transaction (the SQLite one, and the
PostgreSQL one) gets them from one batch thread of this client's
(:class:`~sidecar.ops.scheduling.BatchThread`): calls queue while it works, it hands the whole
queue over at once, and it wakes the event loop once per batch with every answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar, cast, runtime_checkable

import structlog

from sidecar import defaults
from sidecar.errors import ActonceError, StoreDeadlineExceeded, StoreUnavailable
from sidecar.ledger.base import AuditEvent, LedgerError
from sidecar.ops.scheduling import BatchThread
from sidecar.refstore import backend as store
from sidecar.store_contract import Refusal
from sidecar.upstream.base import (
    AuditedWrites,
    Committed,
    CreateArtifact,
    CreateThread,
    GetArtifact,
    GetOwner,
    InTurn,
    ListMessages,
    OneCommit,
    PatchArtifact,
    PostMessage,
    ProposeCreate,
    ProposePatch,
    StoreCall,
    StoreWrite,
)
from sidecar.upstream.in_turn import InTurns, SeparateLedger, TurnJob, watch

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
_BACKEND_CALLS: dict[type[StoreCall[Any]], Callable[[store.StoreBackend, Any], Callable[[], Any]]]
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
        op.message_id,
        op.thread_id,
        op.kind,
        op.text,
        request_turn=op.request_turn,
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


def _answered(job: OneCommit[Any] | InTurn[Any], answer: object) -> object:
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
        backend: store.StoreBackend,
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
        self._turns: BatchThread[TurnJob, object] | None = None
        self._executor: ThreadPoolExecutor | None = None
        if isinstance(backend, BatchingBackend):
            self._batches = BatchThread("store-batches", backend.run_batch, most=MAX_BATCH)
            self._batches.start()
            if separate_ledger is not None and self._ledger is None:
                # Given only where the ledger has a file or a database of its own.
                in_turns = InTurns(separate_ledger, backend.run_batch, _answered)
                self._turns = BatchThread("store-turns", in_turns.run, most=MAX_BATCH)
                self._turns.start()
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
        return AuditedWrites.IN_TURN if self._turns is not None else AuditedWrites.APART

    async def call(self, op: StoreCall[_T], timeout: float | None = None) -> _T:
        if isinstance(op, OneCommit):
            return cast(_T, await self._one_commit(op, timeout))
        if isinstance(op, InTurn):
            return cast(_T, await self._in_turn(op, timeout))
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
        # ledger's own appends may: the three commits in turn do not bound that wait by the
        # store's deadline either, and ``before`` checks the lease once it is over.
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

    async def _in_turn(self, op: InTurn[_R], timeout: float | None) -> Committed[_R]:
        turns = self._turns
        if turns is None:
            raise TypeError("this store is not given its ledger")
        call = _BACKEND_CALLS[type(op.write)](self._backend, op.write)
        seconds = self.timeout_seconds if timeout is None else timeout
        job = TurnJob(op, call, contextvars.copy_context(), seconds, self._ledger_wait)
        future = turns.submit(job)
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
        for thread in (self._turns, self._batches):
            if thread is not None:
                await thread.close()
        if self._executor is not None:
            await asyncio.to_thread(self._executor.shutdown, wait=True, cancel_futures=True)
