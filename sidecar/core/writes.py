"""The write path, in the phases every write goes through.

1. **Claim or replay**: a write named by a key the caller chose is refused KEY_REUSED
   first when its attempt used the key with other data (:mod:`sidecar.core.keys`). A
   call that repeats an earlier one of the attempt (by its request identity, or
   identical to one without an answer yet: the repeat rule of
   :mod:`sidecar.core.requests`) gets that call's answer, or makes its write again;
   any other call claims a new one.
2. **Take the id**: the lease is checked, the write takes its occurrence, and its
   id is derived.
3. **Audit the intent**, fail closed: the store is not called without it.
4. **Perform**: the write's own call to the store, classified.
5. **Audit the outcome**, fail closed even though the write landed.
6. **Answer, or release**: a write that succeeded answers its claim; one that
   failed gives its occurrence and claim back, unless it may have landed: then it
   keeps both, and a repeat makes that same write again.

From the intent on, a write runs in a task of its own that goes on when its
caller gives up (:meth:`WritePath.to_the_end`): cut off between its intent and its
outcome, it would leave the store and the ledger in a state nobody knows. Steps
take phases 2 and 6 from here and audit themselves (:mod:`sidecar.core.steps`).

A write that is one call of the store (:class:`OneCall`) goes through phases 3 to 5 as
one job where the store client can make it so, as the assembly (which knows where the store
and the ledger are) says with :class:`~sidecar.upstream.base.AuditedWrites`:

- its store shares the ledger's file: a :class:`~sidecar.upstream.base.OneCommit` of the
  intent, the store's rows and the outcome, in one transaction and one durable commit, all
  three or none (:meth:`WritePath._in_one_commit`);
- the store client is given the ledger of its own file or database: an
  :class:`~sidecar.upstream.base.InTurn`, the three committed in turn by the client's batch
  thread, one hand-off from the event loop and back (:meth:`WritePath._in_turn`).

Everywhere else, and for every other write, the core makes the three phases itself.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

import structlog

from sidecar.core import keys, leases
from sidecar.core.attempts import Attempt
from sidecar.core.audit import Audit, Subject, event, lost_best_effort, not_durable
from sidecar.core.requests import Claim, nothing_landed
from sidecar.core.types import Settings, WriteResult
from sidecar.errors import (
    ActonceError,
    LeaseExpired,
    StoreDeadlineExceeded,
)
from sidecar.ledger.base import AuditEvent, FencedError, LedgerError, Phase
from sidecar.rules import canonical, ids
from sidecar.store_contract import Refusal
from sidecar.upstream.base import (
    AuditedWrites,
    Committed,
    InTurn,
    OneCommit,
    Settle,
    StoreClient,
    StoreWrite,
)

log = structlog.get_logger()

T = TypeVar("T")
Perform = Callable[[str], Awaitable[WriteResult]]


@dataclass(frozen=True)
class OneCall:
    """A perform that is one call of the store: the call, made for the write's derived id,
    and what its answer (a record, a Refusal, or the error it failed with) makes of the
    write: a WriteResult, or the ActonceError it fails with. Called, it is an ordinary
    perform; the write path can also make it inside its audit's commit."""

    store: StoreClient
    call: Callable[[str], StoreWrite]
    classify: Callable[[str, object], WriteResult]
    timeout: Callable[[], float]

    async def __call__(self, derived: str) -> WriteResult:
        answer: object
        try:
            answer = await self.store.call(self.call(derived), self.timeout())
        except Refusal as refusal:
            answer = refusal
        return self.classify(derived, answer)


@dataclass(frozen=True)
class Write:
    """What a write is: the call, the kind of write and what it is about."""

    rpc: str
    write_type: ids.WriteType
    identity: ids.Identity
    request_id: str
    # What a repeat of the request must match (AIP-155): the call's own content.
    fingerprint: Hashable
    digest: str
    detail: Mapping[str, object] = field(default_factory=dict)
    # A key the caller chose (scheme 3): the id derives from it, not from the digest.
    key: str = ""


@dataclass
class Landing:
    """A write under way: the occurrence it took, its id, and how far it got."""

    attempt: Attempt
    write: Write
    claim: Claim
    occurrence: int
    derived_id: str
    store_called: bool = False

    @property
    def bound(self) -> bool:
        """Whether an earlier call of this one may have landed it: it keeps its occurrence."""
        return self.claim.is_repeat_of_landed

    @property
    def subject(self) -> Subject:
        write = self.write
        return Subject(
            write.write_type.value, self.derived_id, write.request_id, self.occurrence, write.digest
        )


class WritePath:
    """The phases of a write, and the writes under way."""

    def __init__(
        self, audit: Audit, settings: Settings, audited: AuditedWrites = AuditedWrites.APART
    ) -> None:
        self.audit = audit
        self.settings = settings
        # How the store client makes a one-call write with its audit, if it does.
        self._audited = audited
        self._under_way: set[asyncio.Task[object]] = set()

    async def write(self, attempt: Attempt, write: Write, perform: Perform) -> WriteResult:
        """Make ``write`` in ``attempt``, phase by phase; ``perform`` calls the store."""
        canonical.require_request_id(write.request_id)
        bind_key(attempt, write)
        claim = await claim_or_replay(attempt, write.request_id, write.fingerprint)
        if claim.answer is not None:
            return claim.answer
        landing = self.take_id(attempt, write, claim)
        return await self.to_the_end(attempt, self._land(landing, perform))

    async def _land(self, landing: Landing, perform: Perform) -> WriteResult:
        try:
            if isinstance(perform, OneCall) and self._audited is AuditedWrites.AS_ONE:
                result = await self._in_one_commit(landing, perform)
            elif isinstance(perform, OneCall) and self._audited is AuditedWrites.IN_TURN:
                result = await self._in_turn(landing, perform)
            else:
                await self._audit_intent(landing)
                result = await self.perform(landing, perform)
                await self._audit_outcome(landing, result)
        except BaseException as error:  # a cancelled write, too, settles what it held
            release(landing, error)
            raise
        return answered(landing, result)

    async def _in_one_commit(self, landing: Landing, perform: OneCall) -> WriteResult:
        """Phases 3 to 5 as one transaction: the intent, the store's call and the outcome
        are durable together or not at all, and nothing answers before they are."""
        timeout = perform.timeout()  # the lease is checked before anything is written
        one_commit = OneCommit(*self._job_parts(landing, perform, _refused_event))
        intent = one_commit.intent
        try:
            settled = (await perform.store.call(one_commit, timeout)).result
        except FencedError as fenced:  # refused with the intent: the store was not called
            raise not_durable(intent, fenced) from fenced
        except LeaseExpired:  # refused before anything was written
            raise
        except LedgerError as lost:
            landing.store_called = True  # none of it committed, as far as SQLite says
            raise not_durable(
                intent, lost, because="the write and its audit did not commit"
            ) from lost
        except BaseException:
            landing.store_called = True  # past its deadline, or cancelled: it may still land
            raise
        landing.store_called = True
        if isinstance(settled, ActonceError):
            raise settled
        return settled

    async def _in_turn(self, landing: Landing, perform: OneCall) -> WriteResult:
        """Phases 3 to 5 as one job of the store client, committed in turn: the intent is
        durable before the store is called, the outcome after it answers."""
        timeout = perform.timeout()  # the lease is checked before anything is written
        in_turn = InTurn(*self._job_parts(landing, perform, failure_event))
        intent = in_turn.intent
        try:
            done = await perform.store.call(in_turn, timeout)
        except LeaseExpired:  # refused before anything was written
            raise
        except LedgerError as refused:  # the intent is not durable: the store was not called
            raise not_durable(
                intent, refused, because="audit intent not persisted, the store was not called"
            ) from refused
        except StoreDeadlineExceeded as late:
            if late.nothing_sent:  # it waited for the store's thread: nothing was written
                raise
            # Past the store's deadline its outcome is the core's to record, as apart.
            landing.store_called = True
            await self.audit.best_effort(
                failure_event(landing, late), lost="audit_failure_record_lost"
            )
            raise
        except BaseException:
            landing.store_called = True  # past its deadline, or cancelled: it may still land
            raise
        landing.store_called = True
        return _kept_in_turn(landing, done)

    def _job_parts(
        self,
        landing: Landing,
        perform: OneCall,
        failure: Callable[[Landing, ActonceError], AuditEvent],
    ) -> tuple[AuditEvent, StoreWrite, Settle[WriteResult | ActonceError], Callable[[], None]]:
        """What a job of a write and its audit is made of: the intent, the store's call, how
        its answer settles (``failure`` makes a failed write's event), and the lease's check
        for the job to make where it runs, after any wait."""
        attempt, store_timeout = landing.attempt, self.settings.store_timeout_seconds
        return (
            _intent(landing),
            perform.call(landing.derived_id),
            _settler(landing, perform, failure),
            lambda: leases.check(attempt, store_timeout),
        )

    def take_id(self, attempt: Attempt, write: Write, claim: Claim) -> Landing:
        """Check the lease, take the write's occurrence (or the one its request_id
        is bound to), derive its id."""
        try:
            leases.check(attempt, self.settings.store_timeout_seconds)
        except ActonceError:
            claim.failed(claim.occurrence, _give_back(attempt, write))
            raise
        occurrence = claim.occurrence
        if occurrence is None:
            occurrence = attempt.occurrences.take(write.write_type, write.identity)
        derived = derive(
            attempt, write.write_type, write.identity, occurrence, keyed=bool(write.key)
        )
        structlog.contextvars.bind_contextvars(derived_id=derived)
        return Landing(attempt, write, claim, occurrence, derived)

    async def _audit_intent(self, landing: Landing) -> None:
        await self.audit.required(
            _intent(landing), because="audit intent not persisted, the store was not called"
        )

    async def perform(self, landing: Landing, perform: Perform) -> WriteResult:
        """Call the store; from here on the write may land. A failure is recorded
        as the write's outcome, best effort: its intent is already durable."""
        landing.store_called = True
        try:
            return await perform(landing.derived_id)
        except ActonceError as error:
            await self.audit.best_effort(
                failure_event(landing, error), lost="audit_failure_record_lost"
            )
            raise

    async def _audit_outcome(self, landing: Landing, result: WriteResult) -> None:
        await self.audit.required(
            outcome_event(landing, result),
            because="the write landed but its audit outcome was not persisted",
        )

    async def to_the_end(self, attempt: Attempt, landing: Awaitable[T]) -> T:
        """Await ``landing`` in a task of its own that goes on if the caller gives up.

        A write cut off between its intent and its outcome would leave the store
        and the ledger in a state nobody knows; run to its end, it settles its
        request_id with an answer that a repeat gets.
        """
        task: asyncio.Task[T] = asyncio.ensure_future(landing)
        self._under_way.add(task)
        attempt.writing.add(task)

        def landed(done: asyncio.Task[T]) -> None:
            self._under_way.discard(done)
            attempt.writing.discard(done)
            if not done.cancelled():
                done.exception()  # its caller, if it gave up, never will look

        task.add_done_callback(landed)
        return await asyncio.shield(task)

    async def settle(self) -> None:
        """Wait until every write under way, also those whose callers gave up, has
        ended: before the ledger and the store are closed."""
        while self._under_way:
            await asyncio.wait(set(self._under_way))


async def claim_or_replay(attempt: Attempt, request_id: str, fingerprint: Hashable) -> Claim:
    """The call's claim, or the answer of the earlier call it repeats (``claim.answer``)."""
    claim = await attempt.requests.claim(request_id, fingerprint)
    if claim.answer is not None:
        log.info("request_replayed", request_id=request_id)
    return claim


def bind_key(attempt: Attempt, write: Write) -> None:
    """A write named by a key: refused KEY_REUSED when its attempt used the key with other
    data (sidecar.core.keys); nothing else is done before."""
    if write.key:
        derived = derive(attempt, write.write_type, write.identity, 0, keyed=True)
        keys.bind(attempt, key=write.key, derived_id=derived, digest=write.digest)


def derive(
    attempt: Attempt,
    write_type: ids.WriteType,
    identity: ids.Identity,
    occurrence: int,
    *,
    keyed: bool = False,
) -> str:
    """The id of ``attempt``'s write of this type, identity and occurrence (a ``keyed``
    write's identity holds its key, and its id no occurrence)."""
    return ids.derive_id(
        write_type,
        run_id=attempt.run_id,
        checkpoint=attempt.checkpoint,
        identity=identity,
        occurrence=occurrence,
        scope=attempt.scope,
        scheme=attempt.id_scheme,
        keyed=keyed,
    )


def _kept_in_turn(landing: Landing, done: Committed[WriteResult | ActonceError]) -> WriteResult:
    """What an InTurn's write answers: its result once its outcome is durable. A failure's
    outcome is best effort, as in the phases apart; a success whose outcome was lost fails
    closed, though it landed."""
    result, lost = done.result, done.outcome_lost
    if isinstance(result, ActonceError):
        if lost is not None:
            lost_best_effort(failure_event(landing, result), lost, lost="audit_failure_record_lost")
        raise result
    if lost is not None:
        raise not_durable(
            outcome_event(landing, result),
            lost,
            because="the write landed but its audit outcome was not persisted",
        ) from lost
    return result


def _settler(
    landing: Landing, perform: OneCall, failure: Callable[[Landing, ActonceError], AuditEvent]
) -> Settle[WriteResult | ActonceError]:
    """What a job makes of the store's answer where it runs (the store's thread): the
    outcome's event (``failure``'s, when the write fails) and what the write answers, in this
    call's context, so that the event names its front."""

    def settle(answer: object) -> tuple[AuditEvent, WriteResult | ActonceError]:
        try:
            if isinstance(answer, ActonceError):
                raise answer
            result = perform.classify(landing.derived_id, answer)
        except ActonceError as error:
            return failure(landing, error), error
        return outcome_event(landing, result), result

    context = contextvars.copy_context()
    return lambda answer: context.run(settle, answer)


def _refused_event(landing: Landing, error: ActonceError) -> AuditEvent:
    """The outcome's event of a write in one commit that failed with ``error``: its rows
    rolled back with the call, nothing of it landed."""
    return event(landing.attempt, landing.write.rpc, Phase.OUTCOME, landing.subject, refused=error)


def failure_event(landing: Landing, error: ActonceError) -> AuditEvent:
    """The outcome's event of a write that failed with ``error`` once the store was called.
    A write the store may have made says so: the audit must not call it failed."""
    detail = {} if nothing_landed(error) else {"landed": "unknown"}
    attempt, rpc = landing.attempt, landing.write.rpc
    return event(attempt, rpc, Phase.OUTCOME, landing.subject, refused=error, detail=detail)


def outcome_event(landing: Landing, result: WriteResult) -> AuditEvent:
    """The event of a write's outcome."""
    return event(
        landing.attempt,
        landing.write.rpc,
        Phase.OUTCOME,
        landing.subject,
        outcome=result.outcome.value,
        detail={"version": result.version},
    )


def answered(landing: Landing, result: WriteResult) -> WriteResult:
    """Count the write's outcome and answer its request_id with ``result``."""
    attempt = landing.attempt
    attempt.outcomes[result.outcome] += 1
    landing.claim.answered(result)
    # Debug, not info: the write's outcome event in the ledger and the writes counter say the
    # same, and rendering and printing a line per write cost about a tenth of its CPU.
    log.debug("write", outcome=result.outcome.value, occurrence=landing.occurrence)
    return result


def release(landing: Landing, error: BaseException) -> None:
    """Settle what a write that failed with ``error`` held (sidecar.core.requests)."""
    if isinstance(error, ActonceError):
        landing.attempt.failed += 1
    give_back = _give_back(landing.attempt, landing.write)
    landing.claim.failed(
        landing.occurrence, give_back, error=error, store_called=landing.store_called
    )


def _give_back(attempt: Attempt, write: Write) -> Callable[[int], None]:
    def give_back(occurrence: int) -> None:
        attempt.occurrences.give_back(write.write_type, write.identity, occurrence)

    return give_back


def _intent(landing: Landing) -> AuditEvent:
    """The write's intent: what it is about to ask the store, before the store is called."""
    write = landing.write
    return event(landing.attempt, write.rpc, Phase.INTENT, landing.subject, detail=write.detail)
