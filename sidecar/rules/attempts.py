"""Attempts: occurrence counts, request_id replay and the registry of live attempts.

An attempt lives in this process's memory only. Its occurrence counts are
what make two identical writes distinct and a retry's ids equal, so an
attempt this process does not know (also after a restart, when its counts are
gone) cannot go on safely: it is refused with UNKNOWN_ATTEMPT and the caller
begins a new one.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import Counter, OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sidecar.errors import InvalidArgument, UnknownAttempt
from sidecar.rules.ids import Identity, WriteType

# An attempt nobody has called for this long is forgotten, so that memory
# stays bounded when agents die without EndAttempt. Its later calls get
# UNKNOWN_ATTEMPT, which is safe: the run is retried with a new attempt.
DEFAULT_IDLE_TTL_SECONDS = 3600.0
# How many ended attempts' answers are kept for a repeated EndAttempt (bounded
# memory: the oldest are forgotten first).
ENDED_REMEMBERED = 10_000


class Occurrences:
    """Which occurrence of each (type, identity) the attempt has taken.

    A write takes the smallest free occurrence and gives it back when it fails,
    so that a write retried after a failure gets the id it would have had:
    the multiset of successful writes, not the history of failures, decides
    the ids.
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


@dataclass
class _Request:
    fingerprint: Hashable
    done: asyncio.Event = field(default_factory=asyncio.Event)
    answer: Any = None


@dataclass
class StepState:
    """A step this attempt began: its effect, and whether it ended."""

    tool: str
    effect: int
    ended: bool = False


@dataclass
class Attempt:
    """One try of a run, started from the run's last checkpoint."""

    attempt_id: str
    run_id: str
    rule: str
    checkpoint: str
    lease_deadline: datetime | None = None
    occurrences: Occurrences = field(default_factory=Occurrences)
    outcomes: Counter[str] = field(default_factory=Counter)
    last_used: float = field(default_factory=time.monotonic)
    steps: dict[str, StepState] = field(default_factory=dict)
    _requests: dict[str, _Request] = field(default_factory=dict)

    async def replay(self, request_id: str, fingerprint: Hashable) -> Any | None:
        """The first answer to ``request_id`` if it was answered, else None.

        Claims ``request_id`` for the caller when nobody holds it; a repeat
        that arrives while the first call is in flight waits for its answer.
        Reusing a request_id for a different request is bad input (AIP-155).
        """
        while True:
            held = self._requests.get(request_id)
            if held is None:
                self._requests[request_id] = _Request(fingerprint)
                return None
            if held.fingerprint != fingerprint:
                raise InvalidArgument(
                    "request_id", "was already used in this attempt for a different request"
                )
            if held.done.is_set():
                if held.answer is not None:
                    return held.answer
                # The first call failed: this repeat runs the write again.
                continue
            await held.done.wait()

    def answered(self, request_id: str, answer: Any) -> None:
        """Record the answer to a claimed request_id."""
        held = self._requests.get(request_id)
        if held is not None:
            held.answer = answer
            held.done.set()

    def failed(self, request_id: str) -> None:
        """Release a claimed request_id whose call failed, so a repeat runs again."""
        held = self._requests.pop(request_id, None)
        if held is not None:
            held.done.set()


class AttemptRegistry:
    """The attempts this process knows, by id."""

    def __init__(self, *, idle_ttl_seconds: float = DEFAULT_IDLE_TTL_SECONDS) -> None:
        self._attempts: dict[str, Attempt] = {}
        self._ended: OrderedDict[str, Any] = OrderedDict()
        self._idle_ttl = idle_ttl_seconds
        self._last_sweep = time.monotonic()

    def begin(
        self, *, run_id: str, rule: str, checkpoint: str, lease_deadline: datetime | None
    ) -> Attempt:
        # A sweep walks every live attempt; at most one per tenth of the TTL
        # keeps BeginAttempt cheap under a high rate of attempts, and an idle
        # attempt still goes within 1.1 TTLs.
        now = time.monotonic()
        if now - self._last_sweep >= self._idle_ttl / 10:
            self._last_sweep = now
            self.expire()
        attempt = Attempt(
            attempt_id=f"att_{secrets.token_hex(16)}",
            run_id=run_id,
            rule=rule,
            checkpoint=checkpoint,
            lease_deadline=lease_deadline,
        )
        self._attempts[attempt.attempt_id] = attempt
        return attempt

    def get(self, attempt_id: str) -> Attempt:
        if not attempt_id:
            raise InvalidArgument("attempt_id", "must not be empty")
        attempt = self._attempts.get(attempt_id)
        if attempt is None:
            raise UnknownAttempt(
                f"attempt {attempt_id!r} is not known to this sidecar (ended, expired or "
                "begun before a restart); begin a new attempt"
            )
        attempt.last_used = time.monotonic()
        return attempt

    def end(self, attempt_id: str, summary: Any = None) -> Attempt:
        """Forget an attempt; ``summary`` is what a repeated end gets back."""
        attempt = self.get(attempt_id)
        del self._attempts[attempt_id]
        self._ended[attempt_id] = summary
        while len(self._ended) > ENDED_REMEMBERED:
            self._ended.popitem(last=False)
        return attempt

    def ended(self, attempt_id: str) -> Any | None:
        """The summary an attempt ended with, while it is remembered.

        An EndAttempt whose answer was lost on the wire is retried by the
        transport; it gets the same answer instead of UNKNOWN_ATTEMPT. Writes
        to an ended attempt are still UNKNOWN_ATTEMPT.
        """
        return self._ended.get(attempt_id)

    def expire(self) -> int:
        """Forget attempts idle past the TTL; returns how many were forgotten."""
        cutoff = time.monotonic() - self._idle_ttl
        stale = [key for key, a in self._attempts.items() if a.last_used < cutoff]
        for key in stale:
            del self._attempts[key]
        return len(stale)

    def __len__(self) -> int:
        return len(self._attempts)
