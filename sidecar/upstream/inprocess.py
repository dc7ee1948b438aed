"""A StoreClient that calls the embedded reference store's backend directly.

The embedded store runs in the sidecar's own process; reaching it over a loopback
gRPC hop cost each write a client call and a server call in the same event loop,
plus encoding and decoding both ways: most of the sidecar's CPU per write. This
client makes the same backend calls in worker threads instead (the backends block
on disk or on PostgreSQL; the event loop must not), and keeps the gRPC client's
contract exactly:

- a ``StoreRefusal`` becomes the :class:`Refusal` the gRPC path would decode from
  the store's ErrorInfo (same code, message and states), in :func:`_map_errors`, the
  one place that maps;
- ``StoreUnavailableError`` and any other failure of the store become
  StoreUnavailable (the gRPC store answers those UNAVAILABLE or INTERNAL);
- a call that outlasts the deadline becomes StoreDeadlineExceeded; as over gRPC, the
  write may still land, and a retry with the same derived id is safe;
- answers are the reference store's own records, passed through as they are.

An external store (``--store-target``) and ``actonce store`` keep the gRPC path.

Where the ledger shares the store's file (a data folder of one file), the client is given the
ledger, and a write that is one store call is made as one job of the batch thread
(:meth:`InProcessStoreClient.commit_write`): its intent, the store's rows and its outcome in
one transaction, one sync, and one hand-off from the event loop and back.

A backend that can run a batch of calls in one transaction (the SQLite one) gets them
from one thread of this client's: calls queue while it works, it hands the whole queue
over at once, and it wakes the event loop once per batch with every answer. Threads
that each wait for their own commit contend for the interpreter with the event loop on
every answer; this way there is one such wake-up per commit, not per call.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ParamSpec, Protocol, TypeVar, runtime_checkable

import structlog

from sidecar import defaults
from sidecar.errors import ActonceError, StoreDeadlineExceeded, StoreUnavailable
from sidecar.ledger.base import AuditEvent, LedgerError
from sidecar.ops import scheduling
from sidecar.refstore import backend as store
from sidecar.refstore.backend import StoredArtifact, StoredMessage
from sidecar.refstore.refusals import StoreRefusal
from sidecar.upstream.base import Refusal, Settle, StoreWrite, nothing

log = structlog.get_logger()

_P = ParamSpec("_P")
_T = TypeVar("_T")
_R = TypeVar("_R")

# As many calls in flight as the PostgreSQL backend has pooled connections; the
# SQLite backend serializes on its one connection whatever the number.
DEFAULT_WORKERS = 8
_PROBE_ID = "actonce-health-probe"
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


@dataclass
class _Job:
    call: Callable[[], Any]
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop


class _BatchRunner:
    """One thread that hands every queued call to ``run_batch`` at once."""

    def __init__(self, run_batch: Callable[[Sequence[Callable[[], Any]]], list[Any]]) -> None:
        self._run_batch = run_batch
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="store-batches", daemon=True)
        self._thread.start()

    def submit(self, job: _Job) -> None:
        self._queue.put(job)

    def close(self) -> None:
        """Answer what is queued, then stop."""
        self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        while True:
            jobs, stop = scheduling.next_batch(self._queue, MAX_BATCH)
            if not jobs:
                return
            try:
                answers = self._run_batch([job.call for job in jobs])
            except Exception as exc:  # the batch as a whole failed: so did each call
                answers = [exc] * len(jobs)
            by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Any]]] = {}
            for job, answer in zip(jobs, answers, strict=True):
                by_loop.setdefault(job.loop, []).append((job.future, answer))
            for loop, settled in by_loop.items():
                # A loop already closed has no one left waiting for these answers.
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(_settle, settled)
            if stop:
                return


def _settle(settled: list[tuple[asyncio.Future[Any], Any]]) -> None:
    for future, answer in settled:
        if future.done():  # its caller stopped waiting (a deadline)
            continue
        if isinstance(answer, Exception):
            future.set_exception(answer)
        else:
            future.set_result(answer)


@contextlib.contextmanager
def _map_errors(operation: str) -> Iterator[None]:
    try:
        yield
    except StoreRefusal as refusal:
        raise Refusal(str(refusal.code), refusal.message, refusal.states) from refusal
    except store.StoreUnavailableError as error:
        raise StoreUnavailable(f"store unavailable for {operation}: {error}") from error
    except (StoreDeadlineExceeded, StoreUnavailable):
        raise
    except Exception as error:
        # A fault of the store itself: the gRPC store answers INTERNAL, which the
        # sidecar reads as unavailable. Its text is for the operator's log only.
        log.exception("store.failed", operation=operation)
        raise StoreUnavailable(f"store unavailable for {operation}: INTERNAL") from error


class InProcessStoreClient:
    """A StoreClient over a ``StoreBackend`` in this process (the embedded store)."""

    def __init__(
        self,
        backend: store.StoreBackend,
        *,
        timeout_seconds: float = defaults.STORE_TIMEOUT_SECONDS,
        workers: int = DEFAULT_WORKERS,
        ledger: SharedLedger | None = None,
        ledger_wait_seconds: float = defaults.AUDIT_BUSY_TIMEOUT_MS / 1000,
    ) -> None:
        self._backend = backend
        self.timeout_seconds = timeout_seconds
        # Given only where the ledger shares the backend's file (sidecar.fronts.grpc.server).
        # Checked once: a runtime Protocol's isinstance is slow on a write's path.
        self._one_transaction = (
            backend if ledger is not None and isinstance(backend, OneTransactionBackend) else None
        )
        self._ledger = ledger if self._one_transaction is not None else None
        self._ledger_wait = ledger_wait_seconds
        self._batches: _BatchRunner | None = None
        self._executor: ThreadPoolExecutor | None = None
        if isinstance(backend, BatchingBackend):
            self._batches = _BatchRunner(backend.run_batch)
        else:
            # A pool of its own: store calls never wait behind the ledger's reads in the
            # loop's default executor, nor those behind them.
            self._executor = ThreadPoolExecutor(
                max_workers=workers,
                thread_name_prefix="store",
            )

    async def _call(
        self,
        operation: str,
        timeout: float | None,
        call: Callable[_P, _T],
        *args: _P.args,
        **kwargs: _P.kwargs,
    ) -> _T:
        loop = asyncio.get_running_loop()
        bound = functools.partial(call, *args, **kwargs)
        with _map_errors(operation):
            try:
                async with asyncio.timeout(self.timeout_seconds if timeout is None else timeout):
                    if self._batches is not None:
                        future: asyncio.Future[_T] = loop.create_future()
                        self._batches.submit(_Job(bound, future, loop))
                        return await future
                    return await loop.run_in_executor(self._executor, bound)
            except TimeoutError:
                raise StoreDeadlineExceeded(
                    f"store did not answer {operation} in time; the write may have landed, "
                    "and a retry with the same derived id is safe"
                ) from None

    @property
    def commits_writes(self) -> bool:
        return self._ledger is not None and self._batches is not None

    async def commit_write(
        self,
        intent: AuditEvent,
        call: StoreWrite,
        settle: Settle[_R],
        *,
        timeout: float | None,
        before: Callable[[], None] = nothing,
    ) -> _R:
        ledger, batches, backend = self._ledger, self._batches, self._one_transaction
        if ledger is None or batches is None or backend is None:
            raise TypeError("this store does not share the ledger's file")
        operation, made = self._backend_write(call)

        def one_commit(db: Any) -> _R:
            before()
            [intended] = ledger.append_in(db, [intent])
            if isinstance(intended, LedgerError):  # fenced: nothing of the job is kept
                raise intended
            answer: object
            try:
                with _map_errors(operation):
                    answer = made()
            except (Refusal, ActonceError) as failed:
                answer = failed
            outcome, result = settle(answer)
            [ended] = ledger.append_in(db, [outcome])
            if isinstance(ended, LedgerError):
                raise ended
            return result

        loop = asyncio.get_running_loop()
        future: asyncio.Future[_R] = loop.create_future()
        batches.submit(
            _Job(functools.partial(backend.in_one_transaction, one_commit), future, loop)
        )
        # The store's deadline, and the time the intent may wait for the file as the
        # ledger's own appends may: the three commits in turn do not bound that wait by the
        # store's deadline either, and ``before`` checks the lease once it is over.
        bound = (self.timeout_seconds if timeout is None else timeout) + self._ledger_wait
        try:
            async with asyncio.timeout(bound):
                return await future
        except TimeoutError:
            raise StoreDeadlineExceeded(
                f"{operation} and its audit did not commit in time; the write may have "
                "landed, and a retry with the same derived id is safe"
            ) from None
        except (LedgerError, ActonceError):
            raise
        except Exception as error:
            # The transaction did not commit, or SQLite ended it: none of the job is durable.
            raise LedgerError(f"the write and its audit did not commit: {error}") from error

    def _backend_write(self, call: StoreWrite) -> tuple[str, Callable[[], object]]:
        """The backend's call for ``call``, and its operation's name in the store contract."""
        backend, a, kw = self._backend, call.args, call.kwargs
        if call.method == "create_artifact":
            return "CreateArtifact", functools.partial(backend.create_artifact, *a, **kw)
        if call.method == "propose_create":
            proposal_id, kind, data_json = a
            return "CreateProposal", functools.partial(
                backend.create_proposal, proposal_id, kind=kind, data_json=data_json
            )
        if call.method == "create_thread":
            return "CreateThread", functools.partial(backend.create_thread, *a, **kw)
        return "PostMessage", functools.partial(backend.post_message, *a, **kw)

    async def create_artifact(
        self, artifact_id: str, kind: str, data_json: str, *, timeout: float | None = None
    ) -> StoredArtifact:
        return await self._call(
            "CreateArtifact",
            timeout,
            self._backend.create_artifact,
            artifact_id,
            kind,
            data_json,
        )

    async def get_artifact(
        self, artifact_id: str, *, timeout: float | None = None
    ) -> StoredArtifact:
        return await self._call("GetArtifact", timeout, self._backend.get_artifact, artifact_id)

    async def patch_artifact(
        self,
        artifact_id: str,
        expected_version: int,
        patch_json: str,
        *,
        timeout: float | None = None,
    ) -> StoredArtifact:
        return await self._call(
            "PatchArtifact",
            timeout,
            self._backend.patch_artifact,
            artifact_id,
            expected_version,
            patch_json,
        )

    async def propose_create(
        self, proposal_id: str, kind: str, data_json: str, *, timeout: float | None = None
    ) -> None:
        await self._call(
            "CreateProposal",
            timeout,
            self._backend.create_proposal,
            proposal_id,
            kind=kind,
            data_json=data_json,
        )

    async def propose_patch(
        self,
        proposal_id: str,
        artifact_id: str,
        patch_json: str,
        base_version: int,
        *,
        timeout: float | None = None,
    ) -> None:
        await self._call(
            "CreateProposal",
            timeout,
            self._backend.create_proposal,
            proposal_id,
            artifact_id=artifact_id,
            patch_json=patch_json,
            base_version=base_version,
        )

    async def create_thread(
        self, thread_id: str, title: str, *, timeout: float | None = None
    ) -> None:
        await self._call("CreateThread", timeout, self._backend.create_thread, thread_id, title)

    async def post_message(
        self,
        message_id: str,
        thread_id: str,
        kind: str,
        text: str,
        *,
        request_turn: bool,
        timeout: float | None = None,
    ) -> StoredMessage:
        return await self._call(
            "PostMessage",
            timeout,
            self._backend.post_message,
            message_id,
            thread_id,
            kind,
            text,
            request_turn=request_turn,
        )

    async def list_messages(
        self, thread_id: str, *, timeout: float | None = None
    ) -> Sequence[StoredMessage]:
        return await self._call("ListMessages", timeout, self._backend.list_messages, thread_id)

    async def ping(self) -> None:
        # Any answer from the store, a refusal included, proves it is there.
        try:
            await self.get_artifact(_PROBE_ID)
        except Refusal:
            return

    async def close(self) -> None:
        # Calls still running finish first: the sidecar closes the backend after this.
        # The backend itself is the sidecar's to close, after the embedded server stops.
        if self._batches is not None:
            await asyncio.to_thread(self._batches.close)
        if self._executor is not None:
            await asyncio.to_thread(self._executor.shutdown, wait=True, cancel_futures=True)
