"""Live attempts: occurrence counts, request_id replay (the repeat rule), leases and the
registry of attempts.

An attempt lives in this process's memory only. Its occurrence counts are
what make two identical writes distinct and a retry's ids equal, so an
attempt this process does not know (also after a restart, when its counts are
gone) cannot go on safely: it is refused with UNKNOWN_ATTEMPT and the caller
begins a new one.

That is also what makes memory boundable: the registry forgets attempts idle
past a TTL, and, when live attempts exceed a count or an approximate number of
bytes, the least recently used ones. A forgotten attempt's later calls get
UNKNOWN_ATTEMPT, which is safe: the run is retried with a new attempt, whose
writes get the same derived ids.
"""

from __future__ import annotations

import asyncio
import enum
import secrets
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import NotRequired, TypedDict, Unpack

from sidecar import defaults
from sidecar.core.types import AttemptCounts, Outcome, WriteResult
from sidecar.errors import (
    ActonceError,
    ArtifactArchived,
    InDoubt,
    InvalidArgument,
    LeaseExpired,
    StoreRefused,
    UnknownAttempt,
)
from sidecar.rules import effects
from sidecar.rules.ids import Identity, WriteType

# How many ended attempts' answers are kept for a repeated EndAttempt (bounded
# memory: the oldest are forgotten first).
ENDED_REMEMBERED = 10_000
# What a live attempt costs, about (Python objects measured with tracemalloc, rounded
# up), and each call it holds (REQUEST_BYTES, below): the memory bound
# counts these. The process's resident memory grows about twice as fast (allocator
# slack, the ledger's and gRPC's buffers), which the defaults below allow for.
ATTEMPT_BYTES = 1024

# Why an attempt was forgotten before it ended.
IDLE = "idle"
PRESSURE = "pressure"
ForgetHook = Callable[["Attempt", str], None]


# -- one attempt's calls: the repeat rule ------------------------------------------
#
# One attempt's calls by their identity: the repeat rule, written once for every front.
#
# A call with a **request identity** (gRPC's ``request_id``; over MCP ``_meta`` or a
# header) repeats that call. A call **without** one that is identical to an earlier
# call of the attempt (same fingerprint) is that call repeated while the earlier one
# is still under way, or once it ended without an answer (it may have landed): it
# waits for it, then gets its answer, or makes the same write again under the same
# occurrence, and so the same id. Only once the earlier identical call was answered
# is another identical call without an identity a new write. So two identical calls
# made at once without an identity are one call; a caller that means two gives each
# its own identity.
#
# Every call the registry opens is settled by exactly one of three endings, by
# :class:`Claim`, which the write path holds from the claim to the end:
#
# - **answered**: its answer is kept for its identity (a repeat of it gets it again,
#   for good); an identical call without an identity is a new write from now on;
# - **released**: it did not land (refused before it acted, or by the store): its
#   identity is free, and a repeat makes it anew;
# - **unsettled**: it may have landed and was not answered: its occurrence stays bound
#   to it, and a repeat, with its identity or identical without one, makes that same
#   write again.
#
# Which of the last two a failure is, is decided here too (:meth:`Claim.failed`): it may
# have landed when an earlier call of it may have, or when the store was called and the
# error does not say that nothing landed (:func:`nothing_landed`).

# Failures that say the write did not land: refused before it acted, or by the store.
# Any other failure once the store was called (a deadline, an unreachable store, an
# outcome that could not be audited) leaves it unknown.
NOTHING_LANDED = (LeaseExpired, StoreRefused, ArtifactArchived, InDoubt)


def nothing_landed(error: BaseException) -> bool:
    """Whether ``error`` says its write did not land: refused, or never sent."""
    if isinstance(error, NOTHING_LANDED):
        return True
    return isinstance(error, ActonceError) and error.nothing_sent


# What each call the registry holds costs, about (tracemalloc, rounded up): the
# attempts' memory bound counts it.
REQUEST_BYTES = 2560

Charge = Callable[[int], None]


def _no_charge(_bytes: int) -> None:
    return None


@dataclass(eq=False)
class _Call:
    fingerprint: Hashable
    request_id: str
    done: asyncio.Event = field(default_factory=asyncio.Event)
    answer: WriteResult | None = None
    # Bound once the call may have landed without an answer: a repeat takes it.
    occurrence: int | None = None


class Requests:
    """The calls of one attempt that a repeat can meet: by identity, and open ones by
    fingerprint (in flight, or unsettled)."""

    def __init__(self, charge: Charge = _no_charge) -> None:
        self._by_identity: dict[str, _Call] = {}
        self._open: dict[Hashable, list[_Call]] = {}
        self._charge = charge

    def __len__(self) -> int:
        calls = set(self._by_identity.values())
        calls.update(call for open_calls in self._open.values() for call in open_calls)
        return len(calls)

    async def claim(self, request_id: str, fingerprint: Hashable) -> Claim:
        """The earlier call this one repeats, settled (``claim.answer`` to send again,
        or ``claim.occurrence`` to make again), or a new call for this one to make."""
        while True:
            earlier = self._earlier(request_id, fingerprint)
            if earlier is None:
                return Claim(self, self._open_call(request_id, fingerprint))
            if not earlier.done.is_set():
                await earlier.done.wait()
                if earlier.answer is not None:
                    return Claim(self, earlier, answer=earlier.answer)
                continue  # released (a new call), or unsettled (taken below)
            if earlier.answer is not None:
                return Claim(self, earlier, answer=earlier.answer)
            # Unsettled: this repeat makes the same write again, and holds it meanwhile.
            earlier.done = asyncio.Event()
            return Claim(self, earlier, occurrence=earlier.occurrence)

    def _earlier(self, request_id: str, fingerprint: Hashable) -> _Call | None:
        if request_id:
            held = self._by_identity.get(request_id)
            if held is not None and held.fingerprint != fingerprint:
                raise InvalidArgument(
                    "request_id", "was already used in this attempt for a different request"
                )
            return held
        open_calls = self._open.get(fingerprint)
        return open_calls[0] if open_calls else None

    def _open_call(self, request_id: str, fingerprint: Hashable) -> _Call:
        call = _Call(fingerprint, request_id)
        if request_id:
            self._by_identity[request_id] = call
        self._open.setdefault(fingerprint, []).append(call)
        self._charge(REQUEST_BYTES)
        return call

    def _close(self, call: _Call) -> None:
        open_calls = self._open.get(call.fingerprint)
        if open_calls and call in open_calls:
            open_calls.remove(call)
            if not open_calls:
                del self._open[call.fingerprint]
            if not call.request_id:
                self._charge(-REQUEST_BYTES)

    def _answered(self, call: _Call, answer: WriteResult) -> None:
        call.answer = answer
        call.occurrence = None
        self._close(call)
        call.done.set()

    def _released(self, call: _Call) -> None:
        self._close(call)
        if call.request_id and self._by_identity.get(call.request_id) is call:
            del self._by_identity[call.request_id]
            self._charge(-REQUEST_BYTES)
        call.done.set()

    def _unsettled(self, call: _Call, occurrence: int) -> None:
        call.occurrence = occurrence
        call.done.set()


@dataclass
class Claim:
    """A call's hold on its identity, from its claim to its end; settled once.

    ``answer`` is set when this call repeats one that was answered (send it again,
    settle nothing); ``occurrence`` when it repeats one that may have landed (make
    that write again, under that occurrence).
    """

    requests: Requests | None = None
    call: _Call | None = None
    answer: WriteResult | None = None
    occurrence: int | None = None
    settled: bool = False

    @property
    def is_repeat_of_landed(self) -> bool:
        """Whether an earlier call of this one may have landed: it keeps its occurrence."""
        return self.occurrence is not None

    def answered(self, answer: WriteResult) -> None:
        """The call succeeded: its identity answers ``answer`` from now on."""
        if self._settle() and self.requests is not None and self.call is not None:
            self.requests._answered(self.call, answer)

    def released(self) -> None:
        """The call did not land: a repeat makes it anew."""
        if self._settle() and self.requests is not None and self.call is not None:
            self.requests._released(self.call)

    def unsettled(self, occurrence: int) -> None:
        """The call may have landed and was not answered: a repeat makes it again
        under ``occurrence``."""
        if self._settle() and self.requests is not None and self.call is not None:
            self.requests._unsettled(self.call, occurrence)

    def failed(
        self,
        occurrence: int | None,
        give_back: Callable[[int], None],
        *,
        error: BaseException | None = None,
        reached_store: bool = False,
    ) -> None:
        """Settle a call that failed with ``error``. One that may have landed (an earlier
        call of it may have; or it called the store, and ``error`` does not say nothing
        landed) keeps its occurrence, bound to its claim: a repeat makes that same write
        again, under the same id. Any other gives its occurrence back (``give_back``)
        and is released: made again, it is the same write, with the same id."""
        acted = reached_store and (error is None or not nothing_landed(error))
        if (self.is_repeat_of_landed or acted) and occurrence is not None:
            self.unsettled(occurrence)
            return
        if occurrence is not None:
            give_back(occurrence)
        self.released()

    def _settle(self) -> bool:
        if self.settled or self.answer is not None:
            return False
        self.settled = True
        return True


# -- occurrences and steps ---------------------------------------------------------


class Occurrences:
    """Which occurrence of each (type, identity) the attempt has taken.

    A write takes the smallest free occurrence and gives it back when it fails,
    so that a write made again after a failure gets the id it would have had:
    the multiset of successful writes, not the history of failures, decides
    the ids. One exception: a write with a request_id that may have landed
    keeps its occurrence, bound to the request_id, so that no other write is
    given its id and a repeat of the request gets it again.
    """

    def __init__(self) -> None:
        self._taken: dict[tuple[WriteType, Identity], set[int]] = {}

    def take(self, write_type: WriteType, identity: Identity) -> int:
        taken = self._taken.setdefault((write_type, identity), set())
        occurrence = 0
        while occurrence in taken:
            occurrence += 1
        taken.add(occurrence)
        return occurrence

    def give_back(self, write_type: WriteType, identity: Identity, occurrence: int) -> None:
        self._taken.get((write_type, identity), set()).discard(occurrence)

    def taken(self, write_type: WriteType, identity: Identity) -> frozenset[int]:
        return frozenset(self._taken.get((write_type, identity), ()))


class StepStatus(enum.Enum):
    """Where a step this attempt began stands."""

    RUNNING = "running"  # begun: its call is under way
    ENDED = "ended"  # its effect happened: a repeat gets its result
    ABORTED = "aborted"  # its effect did not happen: a repeat runs it anew
    FAILED = "failed"  # its call was sent and failed, or answered an error: it may have acted
    REFUSED = "refused"  # its begin was refused: nothing ran


@dataclass(eq=False)
class StepState:
    """A step this attempt began: its tool, effect, identity and occurrence, where it
    stands, and the result it ended with."""

    tool: str
    effect: effects.ToolEffect
    identity: Identity = ()
    occurrence: int = 0
    step_id: str = ""
    status: StepStatus = StepStatus.RUNNING
    result_json: str = ""
    # The sidecar sends this step's call itself (the MCP front's gateway): how the call
    # ended is its answer's to say, never another caller's EndStep or AbortStep.
    sent_by_sidecar: bool = False
    # Set whenever the step is not running: a repeat of it waits for this.
    settled: asyncio.Event = field(default_factory=asyncio.Event)
    # Two EndSteps of one step at once: the second waits, then finds it ended.
    ending: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def is_write(self) -> bool:
        """Whether the step writes: its audit then fails closed, else it is best effort."""
        return effects.is_write(self.effect)

    @property
    def ended(self) -> bool:
        return self.status is StepStatus.ENDED

    @property
    def aborted(self) -> bool:
        return self.status is StepStatus.ABORTED

    @property
    def is_open(self) -> bool:
        """Whether an identical call is this step repeated: it runs, or may have acted."""
        return self.status in (StepStatus.RUNNING, StepStatus.FAILED)

    def settle(self, status: StepStatus, result_json: str = "") -> None:
        self.status = status
        self.result_json = result_json
        self.settled.set()

    def run_again(self) -> None:
        """A repeat runs the step again (it is idempotent): it is under way once more."""
        self.status = StepStatus.RUNNING
        self.settled = asyncio.Event()


class AttemptStart(TypedDict):
    """What begins an attempt: :meth:`AttemptRegistry.begin`'s keywords, but the id scheme."""

    run_id: str
    rule: str
    checkpoint: str
    lease_deadline: datetime | None
    scope: NotRequired[str]
    delivery_attempt_id: NotRequired[str]


@dataclass
class Attempt:
    """One try of a run, started from the run's last checkpoint."""

    attempt_id: str
    run_id: str
    rule: str
    checkpoint: str
    lease_deadline: datetime | None = None
    # The attempt's part of its run (a tool call's id, say): fencing and ids
    # are per (run, scope); empty for an unscoped attempt.
    scope: str = ""
    # The derived-id scheme version the attempt derives with (rules.ids).
    id_scheme: int = 1
    # The delivery a scoped attempt belongs to (an unscoped attempt of its run), and
    # that delivery's live attempt when it began on this sidecar: its lease bounds this
    # one's (core/deliveries.py).
    delivery_attempt_id: str = ""
    delivery: Attempt | None = field(default=None, repr=False, compare=False)
    # What BeginAttempt answers for the agent to carry: "" when the sidecar issues none.
    # Never in a repr, so never in a log line.
    capability: str = field(default="", repr=False, compare=False)
    occurrences: Occurrences = field(default_factory=Occurrences)
    outcomes: Counter[Outcome] = field(default_factory=Counter)
    # Writes that failed with an error the caller was given.
    failed: int = 0
    last_used: float = field(default_factory=time.monotonic)
    steps: dict[str, StepState] = field(default_factory=dict)
    # The data each key the caller chose names in this attempt: its id, and the digest
    # of the data it was first used with (sidecar.core.keys).
    keys: dict[str, str] = field(default_factory=dict)
    # Writes under way, also those whose caller gave up: EndAttempt counts them too.
    writing: set[asyncio.Task[object]] = field(default_factory=set)
    # The calls a repeat can meet (the repeat rule, below); the registry gives it a
    # charge that tells how the attempt's memory grows.
    requests: Requests = field(default_factory=Requests)

    def open_step(self, identity: Identity) -> StepState | None:
        """The oldest step of ``identity`` that an identical call repeats: one that
        runs, or that may have acted without an answer."""
        found = [s for s in self.steps.values() if s.identity == identity and s.is_open]
        return min(found, key=lambda s: s.occurrence) if found else None


# -- leases ------------------------------------------------------------------------
#
# A write needs the store call's whole deadline left on its attempt's lease. A lease bounds
# the whole write, not its start: it is checked again before every store call, and each store
# call's deadline is no later than the lease's end. A scoped attempt of a delivery is bounded
# by its delivery's lease too, as it stands (ExtendLease of the delivery moves it), since the
# queue's lease is the delivery's.


def now() -> datetime:
    """The time leases are checked against (tests move it)."""
    return datetime.now(UTC)


def require_future_lease(lease_deadline: datetime | None) -> None:
    """A new lease deadline must still be ahead."""
    if lease_deadline is not None and lease_deadline <= now():
        raise InvalidArgument("lease_deadline", "is in the past")


def lease_end(attempt: Attempt) -> datetime | None:
    """When the attempt's lease ends: its own, or its delivery's if that ends first."""
    bounds = [attempt.lease_deadline]
    if attempt.delivery is not None:
        bounds.append(attempt.delivery.lease_deadline)
    given = [bound for bound in bounds if bound is not None]
    return min(given) if given else None


def require_lease_running(attempt: Attempt) -> None:
    """LeaseExpired unless the attempt's lease still runs: one that ran out is not extended,
    since the queue may have given the run to another worker meanwhile."""
    ends = lease_end(attempt)
    if ends is not None and ends <= now():
        raise LeaseExpired(
            f"the attempt's lease ran out at {ends.isoformat()}; a lease that ran out is not "
            "extended, as the queue may have delivered the run again: begin a new attempt",
            metadata={"lease_deadline": ends.isoformat()},
        )


def check_lease(attempt: Attempt, store_timeout: float) -> None:
    """LeaseExpired, before acting, unless the lease outlasts a store call's deadline."""
    ends = lease_end(attempt)
    if ends is None:
        return
    left = (ends - now()).total_seconds()
    if left < store_timeout:
        raise LeaseExpired(
            f"the attempt's lease has {max(left, 0.0):.3f}s left, less than the store "
            f"call's deadline of {store_timeout}s; refused before acting",
            metadata={"lease_seconds_left": f"{max(left, 0.0):.3f}"},
        )


def store_deadline(attempt: Attempt, store_timeout: float) -> float:
    """The deadline of a write's next store call, no later than the lease's end;
    LeaseExpired, before the call, if the lease would not outlast it."""
    check_lease(attempt, store_timeout)
    ends = lease_end(attempt)
    if ends is None:
        return store_timeout
    return min(store_timeout, (ends - now()).total_seconds())


class AttemptRegistry:
    """The attempts this process knows, by id, least recently used first.

    Bounded three ways: an attempt idle for ``idle_ttl_seconds`` is forgotten when
    the next one begins; past ``max_attempts`` live attempts, or past ``max_bytes``
    of their approximate memory, the least recently used are forgotten at once.
    ``on_forget`` hears of each (with IDLE or PRESSURE), for metrics and logs.
    """

    def __init__(
        self,
        *,
        idle_ttl_seconds: float = defaults.ATTEMPT_IDLE_TTL_SECONDS,
        max_attempts: int = defaults.ATTEMPT_MAX_COUNT,
        max_bytes: int = defaults.ATTEMPT_MAX_MIB << 20,
        on_forget: ForgetHook | None = None,
    ) -> None:
        self._attempts: OrderedDict[str, Attempt] = OrderedDict()
        self._ended: OrderedDict[str, AttemptCounts | None] = OrderedDict()
        self._idle_ttl = idle_ttl_seconds
        self._max_attempts = max_attempts
        self._max_bytes = max_bytes
        self._on_forget: list[ForgetHook] = [on_forget] if on_forget is not None else []
        self._bytes = 0

    @property
    def approximate_bytes(self) -> int:
        """What the live attempts cost, as the memory bound counts it."""
        return self._bytes

    def begin(
        self, *, id_scheme: int = 1, delivery: Attempt | None = None, **start: Unpack[AttemptStart]
    ) -> Attempt:
        self.expire()
        attempt_id = f"att_{secrets.token_hex(16)}"
        attempt = Attempt(attempt_id=attempt_id, id_scheme=id_scheme, delivery=delivery, **start)
        attempt.requests = Requests(self._charge_for(attempt))
        self._attempts[attempt.attempt_id] = attempt
        self._bytes += ATTEMPT_BYTES
        self._shed(keep=attempt.attempt_id)
        return attempt

    def get(self, attempt_id: str) -> Attempt:
        if not attempt_id:
            raise InvalidArgument("attempt_id", "must not be empty")
        attempt = self._attempts.get(attempt_id)
        if attempt is None:
            raise UnknownAttempt(
                f"attempt {attempt_id!r} is not known to this sidecar (ended, expired, "
                "forgotten under memory pressure, or begun before a restart); begin a new "
                "attempt"
            )
        attempt.last_used = time.monotonic()
        self._attempts.move_to_end(attempt_id)
        return attempt

    def find(self, attempt_id: str) -> Attempt | None:
        """The live attempt ``attempt_id``, or None; its use is not counted."""
        return self._attempts.get(attempt_id)

    def end(self, attempt_id: str, counts: AttemptCounts | None = None) -> Attempt:
        """Forget an attempt; ``counts`` are what a repeated end gets back."""
        attempt = self.get(attempt_id)
        self._drop(attempt_id)
        self._ended[attempt_id] = counts
        while len(self._ended) > ENDED_REMEMBERED:
            self._ended.popitem(last=False)
        return attempt

    def ended(self, attempt_id: str) -> AttemptCounts | None:
        """The counts an attempt ended with, while it is remembered.

        An EndAttempt whose answer was lost on the wire is retried by the
        transport; it gets the same answer instead of UNKNOWN_ATTEMPT. Writes
        to an ended attempt are still UNKNOWN_ATTEMPT.
        """
        return self._ended.get(attempt_id)

    def expire(self) -> int:
        """Forget attempts idle past the TTL; returns how many were forgotten."""
        # Least recently used first: the idle ones are at the front, and the walk
        # stops at the first attempt still in use.
        cutoff = time.monotonic() - self._idle_ttl
        forgotten = 0
        while self._attempts:
            oldest = next(iter(self._attempts.values()))
            if oldest.last_used >= cutoff:
                break
            self._forget(oldest, IDLE)
            forgotten += 1
        return forgotten

    def _charge_for(self, attempt: Attempt) -> Callable[[int], None]:
        # By id, not by the attempt itself: a closure over the attempt would be a
        # reference cycle, freed only by the garbage collector's rare full passes.
        attempt_id = attempt.attempt_id

        def charge(n: int) -> None:
            if attempt_id not in self._attempts:
                return  # forgotten or ended: no longer counted
            self._bytes += n
            if n > 0:
                self._shed(keep=attempt_id)

        return charge

    def _shed(self, *, keep: str) -> None:
        """Forget the least recently used attempts until both bounds hold again."""
        while len(self._attempts) > self._max_attempts or self._bytes > self._max_bytes:
            oldest = next(iter(self._attempts.values()))
            if oldest.attempt_id == keep:
                return  # the attempt in use alone exceeds the bound: keep it
            self._forget(oldest, PRESSURE)

    def also_on_forget(self, hook: ForgetHook) -> None:
        """Have ``hook`` hear of each attempt forgotten early too."""
        self._on_forget.append(hook)

    def _forget(self, attempt: Attempt, why: str) -> None:
        self._drop(attempt.attempt_id)
        for hook in self._on_forget:
            hook(attempt, why)

    def _drop(self, attempt_id: str) -> None:
        attempt = self._attempts.pop(attempt_id)
        self._bytes -= ATTEMPT_BYTES + REQUEST_BYTES * len(attempt.requests)

    def __len__(self) -> int:
        return len(self._attempts)
