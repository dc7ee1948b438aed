"""How the sidecar's background threads take their work, and how the kernel runs them.

:class:`BatchThread` is the one batch thread: the ledger's writer and the embedded store's
batch threads (its calls', and its writes made in three commits with their audit) are each one
of them.

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
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar, cast

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

    The ledger's writer (sidecar.ledger.group_commit) and the embedded store's batch thread
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
