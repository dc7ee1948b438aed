"""One attempt's calls by their identity: the repeat rule, written once for every front.

A call with a **request identity** (gRPC's ``request_id``; over MCP ``_meta`` or a
header) repeats that call. A call **without** one that is identical to an earlier
call of the attempt (same fingerprint) is that call repeated while the earlier one
is still under way, or once it ended without an answer (it may have landed): it
waits for it, then gets its answer, or makes the same write again under the same
occurrence, and so the same id. Only once the earlier identical call was answered
is another identical call without an identity a new write. So two identical calls
made at once without an identity are one call; a caller that means two gives each
its own identity.

Every call the registry opens is settled by exactly one of three endings, by
:class:`Claim`, which the write path holds from the claim to the end:

- **answered**: its answer is kept for its identity (a repeat of it gets it again,
  for good); an identical call without an identity is a new write from now on;
- **released**: it did not land (refused before it acted, or by the store): its
  identity is free, and a repeat makes it anew;
- **unsettled**: it may have landed and was not answered: its occurrence stays bound
  to it, and a repeat, with its identity or identical without one, makes that same
  write again.

Which of the last two a failure is, is decided here too (:meth:`Claim.failed`): it may
have landed when an earlier call of it may have, or when the store was called and the
error does not say that nothing landed (:func:`nothing_landed`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from sidecar.core.types import WriteResult
from sidecar.errors import (
    ActonceError,
    ArtifactArchived,
    InDoubt,
    InvalidArgument,
    LeaseExpired,
    StoreRefused,
)

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
