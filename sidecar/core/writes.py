"""The write path, in the phases every write goes through.

1. **Claim or replay**: a write named by a key the caller chose is refused KEY_REUSED
   first when its attempt used the key with other data (:mod:`sidecar.core.keys`). A
   call that repeats an earlier one of the attempt (by its request identity, or
   identical to one without an answer yet: the repeat rule in
   :mod:`sidecar.core.attempts`) gets that call's answer, or makes its write again; any
   other call claims a new one.
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

Phases 3 to 5 are one job, handed to the assembly's :class:`~sidecar.core.audit.Lands`,
which answers what happened (the result or the error, and whether the store may have been
called); the claim is settled from that answer here, in one place (:meth:`WritePath._land`).
A write that is one call of the store (:class:`OneCall`) says so, so that it can land inside
its audit's commit where the store shares the ledger's file; any other (:class:`Calls`, an
Edit's re-reads) lands in order everywhere.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

import structlog

from sidecar.core import keys
from sidecar.core.attempts import Attempt, Claim, check_lease, nothing_landed
from sidecar.core.audit import Audit, Job, Lands, Subject, event
from sidecar.core.types import Settings, WriteResult
from sidecar.errors import ActonceError
from sidecar.ledger.base import AuditEvent, Phase
from sidecar.rules import canonical, ids
from sidecar.store_contract import Refusal
from sidecar.upstream.base import StoreClient, StoreWrite

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

    def one_call(self, derived: str) -> StoreWrite | None:
        return self.call(derived)

    def deadline(self) -> float:
        return self.timeout()


@dataclass(frozen=True)
class Calls:
    """A perform of more than one call of the store (an Edit's read and patch): it lands in
    order, whatever the layout."""

    perform: Perform

    async def __call__(self, derived: str) -> WriteResult:
        return await self.perform(derived)

    def one_call(self, _derived: str) -> StoreWrite | None:
        return None

    def classify(self, _derived: str, answer: object) -> WriteResult:
        raise TypeError(f"a perform of several calls classifies no one answer: {answer!r}")

    def deadline(self) -> float:
        raise TypeError("a perform of several calls has a deadline per call")


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

    def __init__(self, audit: Audit, settings: Settings, lands: Lands) -> None:
        self.audit = audit
        self.settings = settings
        # How a write lands with its audit: the assembly's choice (sidecar.core.audit).
        self._lands = lands
        self._under_way: set[asyncio.Task[object]] = set()

    async def write(self, attempt: Attempt, write: Write, perform: OneCall | Calls) -> WriteResult:
        """Make ``write`` in ``attempt``, phase by phase; ``perform`` calls the store."""
        canonical.require_request_id(write.request_id)
        bind_key(attempt, write)
        claim = await claim_or_replay(attempt, write.request_id, write.fingerprint)
        if claim.answer is not None:
            return claim.answer
        landing = self.take_id(attempt, write, claim)
        return await self.to_the_end(attempt, self._land(landing, perform))

    async def _land(self, landing: Landing, perform: OneCall | Calls) -> WriteResult:
        """Phases 3 to 5, as the assembly's Lands makes them; the claim settled from what
        it answers."""
        try:
            job = self._job(landing, perform)
        except BaseException as error:  # nothing was written: the store was not called
            release(landing, error)
            raise
        landed = await self._lands.land(job)
        if landed.error is not None:  # a cancelled write, too, settles what it held
            release(landing, landed.error, reached_store=landed.reached_store)
            raise landed.error
        assert landed.result is not None
        return answered(landing, landed.result)

    def _job(self, landing: Landing, perform: OneCall | Calls) -> Job:
        """The write as one job: its intent, its calls of the store, how an answer settles
        and the lease's check for the job to make where it runs, after any wait."""
        attempt, derived = landing.attempt, landing.derived_id
        store_timeout = self.settings.store_timeout_seconds
        return Job(
            intent=_intent(landing),
            perform=lambda: perform(derived),
            call=perform.one_call(derived),
            classify=lambda answer: perform.classify(derived, answer),
            timeout=perform.deadline,
            check_lease=lambda: check_lease(attempt, store_timeout),
            outcome=lambda result: outcome_event(landing, result),
            failure=lambda error: failure_event(landing, error),
            rolled_back=lambda error: _rolled_back_event(landing, error),
            context=contextvars.copy_context(),
        )

    def take_id(self, attempt: Attempt, write: Write, claim: Claim) -> Landing:
        """Check the lease, take the write's occurrence (or the one its request_id
        is bound to), derive its id."""
        try:
            check_lease(attempt, self.settings.store_timeout_seconds)
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


def _rolled_back_event(landing: Landing, error: ActonceError) -> AuditEvent:
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


def release(landing: Landing, error: BaseException, *, reached_store: bool = False) -> None:
    """Settle what a write that failed with ``error`` held (sidecar.core.attempts); one
    that ``reached_store`` may have landed."""
    if isinstance(error, ActonceError):
        landing.attempt.failed += 1
    give_back = _give_back(landing.attempt, landing.write)
    landing.claim.failed(landing.occurrence, give_back, error=error, reached_store=reached_store)


def _give_back(attempt: Attempt, write: Write) -> Callable[[int], None]:
    def give_back(occurrence: int) -> None:
        attempt.occurrences.give_back(write.write_type, write.identity, occurrence)

    return give_back


def _intent(landing: Landing) -> AuditEvent:
    """The write's intent: what it is about to ask the store, before the store is called."""
    write = landing.write
    return event(landing.attempt, write.rpc, Phase.INTENT, landing.subject, detail=write.detail)
