"""A write's three commits in turn, as one job of the embedded store's batch thread.

Where the ledger has a file or a database of its own, the in-process store client takes an
:class:`~sidecar.upstream.base.InTurn`, and its batch thread makes each batch of them in
three steps: the intents commit together on the ledger's connection (:meth:`InTurns.run`
through the ledger's ``append_now``); their store calls then join the batch's other calls in
one store transaction; their outcomes commit together last. Three syncs a batch, and one
hand-off from the event loop and back a write, where the core making the three itself hands
off three times.

Each part keeps the bound it has when the core makes it apart, counted from when that part
begins (:class:`TurnJob.overdue`, watched from the event loop by :func:`watch`): the intent
the ledger's wait, the store call the store's deadline, the outcome the ledger's wait again.
The thread tells the loop nothing as it goes (that would be the hand-offs saved): it stamps
each part's start on the job, and the loop reads the stamps when a bound comes.
"""

from __future__ import annotations

import asyncio
import contextvars
import enum
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from sidecar.errors import StoreDeadlineExceeded
from sidecar.ledger.base import AuditEvent, LedgerError
from sidecar.upstream.base import Committed, InTurn


class SeparateLedger(Protocol):
    """The ledger of a store that does not share its file: it commits in the calling thread
    (sidecar.ledger.group_commit)."""

    def append_now(
        self, events: Sequence[AuditEvent], contexts: Sequence[contextvars.Context | None]
    ) -> list[int | LedgerError]: ...


class Stage(enum.Enum):
    QUEUED = "queued"  # the store not called yet
    CALLED = "called"  # the store called: the write may land
    ABANDONED = "abandoned"  # its caller's bound passed first: the store is never called


@dataclass(slots=True)
class TurnJob:
    """An InTurn under way: its store call, bound; the context it was made in (for the
    ledger's commit hooks); its bounds; how far it got, and what it answers."""

    op: InTurn[Any]
    call: Callable[[], object]
    context: contextvars.Context
    store_seconds: float
    ledger_seconds: float
    queued_at: float = field(default_factory=time.monotonic)
    answer: object = None
    stage: Stage = Stage.QUEUED
    called_at: float = 0.0
    # Its store's answer and what settle made of it, once its outcome's commit began.
    settled: Committed[Any] | None = None
    settled_at: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take_call(self) -> bool:
        """In the batch thread, its intent durable: whether it may call the store now."""
        with self.lock:
            if self.stage is Stage.QUEUED:
                self.stage, self.called_at = Stage.CALLED, time.monotonic()
            return self.stage is Stage.CALLED

    def settling(self, answer: object, result: object) -> None:
        """In the batch thread: its outcome's commit begins."""
        with self.lock:
            self.settled, self.settled_at = Committed(answer, result), time.monotonic()

    def overdue(self, now: float) -> tuple[BaseException | Committed[Any] | None, float]:
        """From the event loop: what the job answers now that its part is past its bound
        (None while it is within it), and when to look again. A part the thread may begin
        after this look has a bound no earlier than a whole one from now: the next look
        comes no later than that."""
        with self.lock:
            if self.settled is not None:
                end = self.settled_at + self.ledger_seconds
                if now < end:
                    return None, end
                lost = LedgerError(f"audit event not durable within {self.ledger_seconds:g}s")
                return Committed(self.settled.answer, self.settled.result, lost), now
            if self.stage is Stage.CALLED:
                end = self.called_at + self.store_seconds
                if now < end:
                    return None, min(end, now + self.ledger_seconds)
                return StoreDeadlineExceeded(
                    f"store did not answer {self.op.write.rpc} in time; the write may have "
                    "landed, and a retry with the same derived id is safe"
                ), now
            end = self.queued_at + self.ledger_seconds
            if now < end:
                return None, min(end, now + self.store_seconds)
            self.stage = Stage.ABANDONED
            return LedgerError(f"audit intent not durable within {self.ledger_seconds:g}s"), now


def watch(job: TurnJob, future: asyncio.Future[Any]) -> None:
    """Answer ``future`` from the event loop when the part ``job`` is in passes its bound;
    the job goes on in its thread, and its own answer then finds the future done."""
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

    first = job.queued_at + min(job.ledger_seconds, job.store_seconds)
    timer.append(loop.call_at(first, look))
    future.add_done_callback(lambda _: timer[0].cancel())


@dataclass(frozen=True)
class InTurns:
    """The batch thread's work where InTurns are among its jobs: ``ledger`` commits their
    events, ``run_batch`` makes the store's calls in one transaction (each answer its
    result or exception), and ``answered`` says a call's answer as the contract does."""

    ledger: SeparateLedger
    run_batch: Callable[[Sequence[Callable[[], object]]], Sequence[object]]
    answered: Callable[[InTurn[Any], object], object]

    def run(self, jobs: Sequence[Callable[[], object] | TurnJob]) -> list[object]:
        """Each job's answer: the plain calls' the store's; the InTurns', once their intents,
        their calls (with the plain ones) and their outcomes have committed in turn."""
        calls = [job for job in jobs if not isinstance(job, TurnJob)]
        turns = [job for job in jobs if isinstance(job, TurnJob)]
        calling, refused = _checked_again(self._commit_intents(turns))
        together = [*calls, *(job.call for job in calling)]
        made = self.run_batch(together) if together else []
        answered = [
            (job, self.answered(job.op, answer))
            for job, answer in zip(calling, made[len(calls) :], strict=True)
        ]
        self._commit_outcomes([*answered, *refused])
        answers = iter(made[: len(calls)])
        return [job.answer if isinstance(job, TurnJob) else next(answers) for job in jobs]

    def _commit_intents(self, turns: list[TurnJob]) -> list[TurnJob]:
        """Check each job, then commit their intents together: the jobs whose intent is
        durable. The others answer what refused them."""
        checked: list[TurnJob] = []
        for job in turns:
            try:
                job.op.before()
            except Exception as refused:  # the lease ran out while it waited: nothing written
                job.answer = refused
            else:
                checked.append(job)
        intended = self.ledger.append_now(
            [job.op.intent for job in checked], [job.context for job in checked]
        )
        durable: list[TurnJob] = []
        for job, seq in zip(checked, intended, strict=True):
            if isinstance(seq, LedgerError):
                job.answer = seq
            else:
                durable.append(job)
        return durable

    def _commit_outcomes(self, answered: list[tuple[TurnJob, object]]) -> None:
        """Settle each job's answer, then commit their outcomes together."""
        settled: list[tuple[TurnJob, object, AuditEvent, object]] = []
        for job, answer in answered:
            try:
                outcome, result = job.op.settle(answer)
            except Exception as failed:  # the write's own fault: it may have landed
                job.answer = failed
            else:
                job.settling(answer, result)
                settled.append((job, answer, outcome, result))
        ended = self.ledger.append_now(
            [outcome for _, _, outcome, _ in settled], [job.context for job, *_ in settled]
        )
        for (job, answer, _, result), seq in zip(settled, ended, strict=True):
            lost = seq if isinstance(seq, LedgerError) else None
            job.answer = Committed(answer, result, lost)


def _checked_again(
    durable: list[TurnJob],
) -> tuple[list[TurnJob], list[tuple[TurnJob, object]]]:
    """The jobs whose intent is durable that call the store now, and those refused by their
    check, made again once the intent waited for the ledger (a lease that ran out meanwhile),
    each with what refused it: the answer their outcome records. A job whose caller's bound
    passed is neither: it never calls the store."""
    calling: list[TurnJob] = []
    refused: list[tuple[TurnJob, object]] = []
    for job in durable:
        try:
            job.op.before()
        except Exception as error:
            refused.append((job, error))
            continue
        if job.take_call():
            calling.append(job)
    return calling, refused
