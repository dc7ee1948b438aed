"""The sidecar's edits of one artifact queue, one at a time.

Edits of one artifact made at once each read its version and patch against it: the store
takes the first and refuses the others with VERSION_CONFLICT, and each refused edit reads the
artifact again, up to three times in its attempt, then fails RETRYABLE. Within one sidecar
nothing obliges them to race: an edit waits until the edit before it has its answer from the
store, reads the version that one made, and patches once. Writers the sidecar does not see
(other sidecars, the store's other clients) still conflict, and the re-reads answer them as
before.

An edit waits in the queue no longer than a bound the caller gives (its store deadline):
past it, :class:`QueueTooSlow`, and the caller has sent nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field


class QueueTooSlow(Exception):
    """The edit's place in the queue did not come within the wait allowed for it."""


@dataclass
class _Place:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Edits holding or waiting for this key: the entry goes when none is left.
    users: int = 0


class EditQueue:
    """One edit at a time per key (an artifact id), first come, first served."""

    def __init__(self) -> None:
        self._keys: dict[str, _Place] = {}

    def __len__(self) -> int:
        return len(self._keys)

    @asynccontextmanager
    async def of(self, key: str, *, wait_seconds: float) -> AsyncIterator[None]:
        """Hold ``key``; QueueTooSlow when it is not free within ``wait_seconds``."""
        place = self._keys.get(key)
        if place is None:
            place = self._keys[key] = _Place()
        place.users += 1
        try:
            if place.users == 1:
                # Nobody holds it or waits for it: acquire() takes it at once, without a
                # pass of the event loop, and needs no timer.
                await place.lock.acquire()
            else:
                await _wait_for(place.lock, key, wait_seconds)
            try:
                yield
            finally:
                place.lock.release()
        finally:
            place.users -= 1
            if place.users == 0:
                del self._keys[key]


async def _wait_for(lock: asyncio.Lock, key: str, wait_seconds: float) -> None:
    try:
        async with asyncio.timeout(wait_seconds):
            await lock.acquire()
    except TimeoutError:
        raise QueueTooSlow(f"{key!r} not free within {wait_seconds:g}s") from None
