"""The core's audit: each event, how it is appended, and how a write lands with its audit.

The core's one way to append an audit event: required, or best effort. A required event
fails its call closed when it cannot be made durable (AUDIT_PERSISTENCE_FAILED); a
best-effort one is logged when it is lost, and the call goes on. Either way, an event
refused because a newer attempt of the run fenced this one stops the attempt
(ATTEMPT_FENCED), and a begin refused because its run belongs to another rule is
FORBIDDEN. Every event names the front its call came through.

How a write lands with its audit is one seam, :meth:`Lands.land` (below). The write path
(:mod:`sidecar.core.writes`) builds one :class:`Job` for every write (its intent, its calls
of the store, how an answer settles, the lease's check) and hands it to the assembly's
:class:`Lands`, which answers a :class:`Landed`: the result or the error, and whether the
store may have been called. The write path settles the write's claim from that value, in
one place. Whichever lands it, the intent is durable before the store is called and the
outcome before the write answers; each one differs only in how many commits and hand-offs
that takes:

- :class:`InOrder`: the intent, the store's calls and the outcome, one after another on the
  event loop. Beside an external store, and for a write of more than one store call (an
  Edit's re-reads) everywhere;
- :class:`InOneCommit`: beside an embedded store that shares the ledger's file, the three
  in one transaction of the store's batch thread, one durable commit, all or none (a
  :class:`~sidecar.upstream.base.OneCommit`);
- :class:`InTheStoresThread`: beside an embedded store whose ledger has a file or a database
  of its own, the three committed one after another by a thread of the store client's, one
  hand-off from the event loop and back (a :class:`~sidecar.upstream.base.ThreeCommits`).
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import structlog

from sidecar.core.attempts import Attempt
from sidecar.core.types import WriteResult
from sidecar.errors import (
    ActonceError,
    AttemptFenced,
    AuditPersistenceFailed,
    LeaseExpired,
    RunOfAnotherRule,
    StepDecided,
    StoreDeadlineExceeded,
)
from sidecar.ledger.base import (
    DELIVERY_KEY,
    AuditEvent,
    AuditLedger,
    FencedError,
    LedgerError,
    RunRuleError,
)
from sidecar.ledger.permits import PermitRefused
from sidecar.upstream.base import (
    Committed,
    OneCommit,
    Settle,
    StoreClient,
    StoreWrite,
    ThreeCommits,
)

log = structlog.get_logger()

# The front a call came through (grpc, mcp): each of its audit events says so in its
# detail. Set by the front, before it calls; the core only reads it.
FRONT: contextvars.ContextVar[str] = contextvars.ContextVar("actonce_front", default="grpc")


@dataclass(frozen=True)
class Subject:
    """What an event is about: a write's type, its derived id, the request_id it was
    made under, its occurrence and the digest of its content."""

    write_type: str = ""
    derived_id: str = ""
    request_id: str = ""
    occurrence: int = -1
    digest: str = ""


def event(
    attempt: Attempt,
    rpc: str,
    phase: str,
    subject: Subject = Subject(),
    *,
    outcome: str = "",
    refused: ActonceError | None = None,
    detail: Mapping[str, object] | None = None,
) -> AuditEvent:
    """An event of ``attempt``'s call ``rpc``; ``refused`` names the error it failed with.
    Every event of a delivery's scoped attempt names the delivery: the ledger fences it
    by the delivery too (sidecar.ledger.base.fenced)."""
    delivery = {DELIVERY_KEY: attempt.delivery_attempt_id} if attempt.delivery_attempt_id else {}
    return AuditEvent(
        run_id=attempt.run_id,
        attempt_id=attempt.attempt_id,
        rpc=rpc,
        phase=phase,
        rule=attempt.rule,
        checkpoint=attempt.checkpoint,
        scope=attempt.scope,
        write_type=subject.write_type,
        derived_id=subject.derived_id,
        request_id=subject.request_id,
        occurrence=subject.occurrence,
        digest=subject.digest,
        outcome=outcome,
        reason=refused.reason if refused else "",
        failure_class=refused.failure_class.value if refused else "",
        detail={**(detail or {}), **delivery, "front": FRONT.get()},
    )


class Audit:
    """Appends the core's audit events to the ledger."""

    def __init__(self, ledger: AuditLedger) -> None:
        self.ledger = ledger

    async def required(self, event: AuditEvent, *, because: str = "") -> None:
        """Append ``event`` durably, or fail with AUDIT_PERSISTENCE_FAILED, ``because`` first."""
        try:
            await self.ledger.append(event)
        except LedgerError as exc:
            raise not_durable(event, exc, because=because) from exc

    async def best_effort(self, event: AuditEvent, *, lost: str) -> None:
        """Append ``event``; if it is lost, log ``lost`` and go on."""
        try:
            await self.ledger.append(event)
        except LedgerError as exc:
            lost_best_effort(event, exc, lost=lost)


def lost_best_effort(event: AuditEvent, exc: LedgerError, *, lost: str) -> None:
    """What a best-effort ``event`` that was not made durable does: the attempt stops if a
    newer one fenced it (ATTEMPT_FENCED); else ``lost`` is logged, and the call goes on."""
    if isinstance(exc, FencedError):
        raise _fenced(event, exc) from exc
    log.warning(lost, error=str(exc))


def not_durable(event: AuditEvent, exc: LedgerError, *, because: str = "") -> ActonceError:
    """The error a call fails closed with when ``event`` could not be made durable:
    ATTEMPT_FENCED when a newer attempt fenced it, FORBIDDEN when its run belongs to
    another rule, else AUDIT_PERSISTENCE_FAILED."""
    if isinstance(exc, FencedError):
        return _fenced(event, exc)
    if isinstance(exc, RunRuleError):
        return _other_rule(exc)
    if isinstance(exc, PermitRefused):
        return _not_permitted(event, exc)
    return AuditPersistenceFailed(f"{because}: {exc}" if because else str(exc))


def _not_permitted(event: AuditEvent, exc: PermitRefused) -> ActonceError:
    # Nothing was sent: the call never had the ledger's leave.
    metadata = {"step_id": event.derived_id}
    if exc.why == "decided":
        return StepDecided(f"{exc}: begin a new attempt", metadata=metadata, nothing_sent=True)
    return LeaseExpired(f"{exc}: the queue retries the run", metadata=metadata, nothing_sent=True)


def _other_rule(exc: RunRuleError) -> RunOfAnotherRule:
    return RunOfAnotherRule(
        f"{exc}: an attempt of it under another rule is refused",
        metadata={"run_id": exc.run_id, "rule": exc.rule, "run_rule": exc.run_rule},
    )


def _fenced(event: AuditEvent, exc: FencedError) -> AttemptFenced:
    return AttemptFenced(
        f"{exc}; this attempt stops and the newer one goes on",
        metadata={"run_id": event.run_id},
    )


# -- a write's landing -------------------------------------------------------------

NOT_DURABLE = "audit intent not persisted, the store was not called"
OUTCOME_LOST = "the write landed but its audit outcome was not persisted"
FAILURE_LOST = "audit_failure_record_lost"


@dataclass(frozen=True)
class Job:
    """One write, for a :class:`Lands` to land.

    ``perform`` makes the write's calls of the store and classifies their answers; a write
    of one store call also gives it as ``call``, with ``classify`` (an answer, a Refusal or
    the error the call failed with, made a result or raised as an ActonceError), so that it
    can be made inside its audit's commit. ``timeout`` is the store's deadline for it, and
    raises once the attempt's lease has passed; ``check_lease`` is the same check, made
    where a job runs after any wait. ``outcome`` and ``failure`` make the outcome's event of
    a write that succeeded and of one that failed once the store was called; ``rolled_back``
    that of a write whose rows rolled back with its failed call."""

    intent: AuditEvent
    perform: Callable[[], Awaitable[WriteResult]]
    call: StoreWrite | None
    classify: Callable[[object], WriteResult]
    timeout: Callable[[], float]
    check_lease: Callable[[], None]
    outcome: Callable[[WriteResult], AuditEvent]
    failure: Callable[[ActonceError], AuditEvent]
    rolled_back: Callable[[ActonceError], AuditEvent]
    # The caller's context, in which a job's events are made wherever it runs (the front
    # the call came through names them).
    context: contextvars.Context

    def settle(
        self, failure: Callable[[ActonceError], AuditEvent]
    ) -> Settle[WriteResult | ActonceError]:
        """What a job makes of the store's answer where it runs: the outcome's event
        (``failure``'s, when the write fails) and what the write answers."""

        def settle(answer: object) -> tuple[AuditEvent, WriteResult | ActonceError]:
            try:
                if isinstance(answer, ActonceError):
                    raise answer
                result = self.classify(answer)
            except ActonceError as error:
                return failure(error), error
            return self.outcome(result), result

        return lambda answer: self.context.run(settle, answer)


@dataclass(frozen=True)
class Landed:
    """What landing a write did: its ``result``, or the ``error`` it failed with (a
    cancellation too), and whether the store may have been called (``reached_store``): a
    failed write that reached it may have landed."""

    result: WriteResult | None = None
    error: BaseException | None = None
    reached_store: bool = False


class Lands(Protocol):
    """Lands a write's job with its audit; never raises: what happened is the answer."""

    async def land(self, job: Job) -> Landed: ...


LandsFor = Callable[[Audit, StoreClient], Lands]


def _caused(error: ActonceError, cause: BaseException) -> ActonceError:
    error.__cause__ = cause
    return error


@dataclass(frozen=True)
class InOrder:
    """The intent, the store's calls and the outcome, each awaited on the event loop."""

    audit: Audit
    store: StoreClient

    async def land(self, job: Job) -> Landed:
        reached = False
        try:
            await self.audit.required(job.intent, because=NOT_DURABLE)
            reached = True  # from here on the write may land
            try:
                result = await job.perform()
            except ActonceError as error:  # its intent is durable: its failure, best effort
                await self.audit.best_effort(job.failure(error), lost=FAILURE_LOST)
                raise
            await self.audit.required(job.outcome(result), because=OUTCOME_LOST)
        except BaseException as error:  # a cancelled write, too, says how far it got
            return Landed(error=error, reached_store=reached)
        return Landed(result=result, reached_store=True)


@dataclass(frozen=True)
class _OneJob:
    """A write of one store call sent to the store client as one job with its audit (what
    ``send`` makes of it); any other write in order."""

    audit: Audit
    store: StoreClient

    async def land(self, job: Job) -> Landed:
        if job.call is None:
            return await InOrder(self.audit, self.store).land(job)
        try:
            timeout = job.timeout()  # the lease is checked before anything is written
        except BaseException as error:
            return Landed(error=error)
        return await self.send(job, job.call, timeout)

    async def send(self, job: Job, call: StoreWrite, seconds: float) -> Landed:
        raise NotImplementedError


class InOneCommit(_OneJob):
    """A write of one store call as one transaction with its intent and its outcome."""

    async def send(self, job: Job, call: StoreWrite, seconds: float) -> Landed:
        one_commit = OneCommit(job.intent, call, job.settle(job.rolled_back), job.check_lease)
        try:
            settled = (await self.store.call(one_commit, seconds)).result
        except FencedError as fenced:  # refused with the intent: the store was not called
            return Landed(error=_caused(not_durable(job.intent, fenced), fenced))
        except LeaseExpired as expired:  # refused before anything was written
            return Landed(error=expired)
        except LedgerError as lost:  # none of it committed, as far as SQLite says
            failed = not_durable(job.intent, lost, because="the write and its audit did not commit")
            return Landed(error=_caused(failed, lost), reached_store=True)
        except BaseException as error:  # past its deadline, or cancelled: it may still land
            return Landed(error=error, reached_store=True)
        if isinstance(settled, ActonceError):
            return Landed(error=settled, reached_store=True)
        return Landed(result=settled, reached_store=True)


class InTheStoresThread(_OneJob):
    """A write of one store call committed with its audit, one commit after another, by the
    store client's thread: the intent durable before the store is called, the outcome after it
    answers."""

    async def send(self, job: Job, call: StoreWrite, seconds: float) -> Landed:
        three_commits = ThreeCommits(job.intent, call, job.settle(job.failure), job.check_lease)
        try:
            done = await self.store.call(three_commits, seconds)
        except LeaseExpired as expired:  # refused before anything was written
            return Landed(error=expired)
        except LedgerError as refused:  # the intent is not durable: the store was not called
            failed = not_durable(job.intent, refused, because=NOT_DURABLE)
            return Landed(error=_caused(failed, refused))
        except StoreDeadlineExceeded as late:
            return await self._late(job, late)
        except BaseException as error:  # past its deadline, or cancelled: it may still land
            return Landed(error=error, reached_store=True)
        return _kept(job, done)

    async def _late(self, job: Job, late: StoreDeadlineExceeded) -> Landed:
        if late.nothing_sent:  # it waited for the store's thread: nothing was written
            return Landed(error=late)
        # Past the store's deadline its outcome is the core's to record, as in order.
        try:
            await self.audit.best_effort(job.failure(late), lost=FAILURE_LOST)
        except BaseException as error:
            return Landed(error=error, reached_store=True)
        return Landed(error=late, reached_store=True)


def _kept(job: Job, done: Committed[WriteResult | ActonceError]) -> Landed:
    """What a job of three commits answers: its result once its outcome is durable. A
    failure's outcome is best effort, as in order; a success whose outcome was lost fails
    closed, though it landed."""
    result, lost = done.result, done.outcome_lost
    if isinstance(result, ActonceError):
        if lost is not None:
            try:
                lost_best_effort(job.failure(result), lost, lost=FAILURE_LOST)
            except ActonceError as fenced:  # a newer attempt fenced this one
                return Landed(error=fenced, reached_store=True)
        return Landed(error=result, reached_store=True)
    if lost is not None:
        error = not_durable(job.outcome(result), lost, because=OUTCOME_LOST)
        return Landed(error=_caused(error, lost), reached_store=True)
    return Landed(result=result, reached_store=True)
