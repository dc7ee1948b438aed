"""A write's three commits in turn, as one job of the embedded store's thread for them.

Where the ledger has a file or a database of its own, the in-process store client takes an
:class:`~sidecar.upstream.base.InTurn`, and a batch thread of its own for these makes each batch
of them in three steps (:meth:`InTurns.run`): the intents commit together on the ledger's
connection (through the ledger's ``append_now``); their store calls then run in one store
transaction; their outcomes commit together last. Three syncs a batch, and one hand-off from
the event loop and back a write, where the core making the three itself hands off three times.
The store's other calls (reads, an edit's patch) keep a thread of their own: a ledger that
stopped answering holds these jobs, not them.

Each part keeps the bound it has when the core makes it apart, counted from when that part
begins (:meth:`TurnJob.overdue`, watched from the event loop by :func:`watch`): waiting for the
thread counts against the store's deadline (it is the store's thread), the intent against the
ledger's wait, the store call against the store's deadline, the outcome against the ledger's
wait again. The thread tells the loop nothing as it goes (that would be the hand-offs saved):
it stamps each part's start on the job, and the loop reads the stamps when a bound comes. A
part whose bound passed is not followed by the next: a job past its bound before its intent
began writes nothing, one past it in its intent never calls the store, and one whose store call
outlived its deadline leaves its outcome to the core, which records the deadline as the
phases apart do.
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

# What the loop's bound on a ledger's part adds to the ledger's own wait: the ledger's own
# timeout (SQLite's busy handler, PostgreSQL's lock timeout) has the first word.
LEDGER_GRACE_SECONDS = 0.1


class SeparateLedger(Protocol):
    """The ledger of a store that does not share its file: it commits in the calling thread
    (sidecar.ledger.group_commit)."""

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
class TurnJob:
    """An InTurn under way: its store call, bound; the context it was made in (for the
    ledger's commit hooks); its bounds; how far it got, and what it answers."""

    op: InTurn[Any]
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


def watch(job: TurnJob, future: asyncio.Future[Any]) -> None:
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
class InTurns:
    """The work of the thread that makes InTurns: ``ledger`` commits their events,
    ``run_batch`` makes their store calls in one transaction (each answer its result or
    exception), and ``answered`` says a call's answer as the contract does."""

    ledger: SeparateLedger
    run_batch: Callable[[Sequence[Callable[[], object]]], Sequence[object]]
    answered: Callable[[InTurn[Any], object], object]

    def run(self, jobs: Sequence[TurnJob]) -> list[object]:
        """Each job's answer, once its intent, its store call and its outcome have committed
        in turn, or what stopped it."""
        calling, refused = _checked_again(self._commit_intents(jobs))
        made = self._call(calling)
        answered = [
            (job, self.answered(job.op, answer)) for job, answer in zip(calling, made, strict=True)
        ]
        self._commit_outcomes([*answered, *refused])
        return [job.answer for job in jobs]

    def _commit_intents(self, jobs: Sequence[TurnJob]) -> list[TurnJob]:
        """Check each job, then commit their intents together: the jobs whose intent is
        durable. The others answer what refused them."""
        checked: list[TurnJob] = []
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
        durable: list[TurnJob] = []
        for job, seq in zip(checked, intended, strict=True):
            if isinstance(seq, LedgerError):
                job.answer = seq
            else:
                durable.append(job)
        return durable

    def _call(self, calling: list[TurnJob]) -> list[object]:
        """The store's answer to each job's call: its record, or what it failed with."""
        if not calling:
            return []
        try:
            return list(self.run_batch([job.call for job in calling]))
        except Exception as failed:  # the batch as a whole failed: each call may have landed
            return [failed] * len(calling)

    def _commit_outcomes(self, answered: list[tuple[TurnJob, object]]) -> None:
        """Settle each job's answer, then commit their outcomes together; a job the loop
        answered past the store's deadline has its outcome recorded by the core."""
        settled: list[tuple[TurnJob, object, AuditEvent, object]] = []
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
    durable: list[TurnJob],
) -> tuple[list[TurnJob], list[tuple[TurnJob, object]]]:
    """The jobs whose intent is durable that call the store now, and those refused by their
    check, made again once the intent waited for the ledger (a lease that ran out meanwhile),
    each with what refused it: the answer their outcome records. A job the loop answered past
    its intent's bound is neither: it never calls the store."""
    calling: list[TurnJob] = []
    refused: list[tuple[TurnJob, object]] = []
    for job in durable:
        try:
            job.op.before()
        except Exception as error:
            refused.append((job, error))
            continue
        if job.enter(Stage.CALLED):
            calling.append(job)
    return calling, refused
