"""Edits of one artifact take turns within the sidecar.

Edits of one artifact made at once each read its version and patch against it: the store
takes the first and refuses the others with VERSION_CONFLICT, and each refused edit reads the
artifact again, up to three times in its attempt, then fails RETRYABLE. Within one sidecar
nothing obliges them to race: an edit waits until the edit before it has its answer from the
store, reads the version that one made, and patches once. Writers the sidecar does not see
(other sidecars, the store's other clients) still conflict, and the re-reads answer them as
before.

A turn is waited for no longer than a bound the caller gives (an edit gives its store
deadline): past it, :class:`TurnNotCome`, and the caller has sent nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field


class TurnNotCome(Exception):
    """The turn did not come within the wait allowed for it."""


@dataclass
class _Turn:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Edits holding or waiting for this key's turn: the entry goes when none is left.
    users: int = 0


class Turns:
    """One turn at a time per key (an artifact id), first come, first served."""

    def __init__(self) -> None:
        self._turns: dict[str, _Turn] = {}

    def __len__(self) -> int:
        return len(self._turns)

    @asynccontextmanager
    async def of(self, key: str, *, wait_seconds: float) -> AsyncIterator[None]:
        """Hold ``key``'s turn; TurnNotCome when it does not come within ``wait_seconds``."""
        turn = self._turns.get(key)
        if turn is None:
            turn = self._turns[key] = _Turn()
        turn.users += 1
        try:
            if turn.users == 1:
                # Nobody holds it or waits for it: acquire() takes it at once, without a turn
                # of the event loop, and needs no timer.
                await turn.lock.acquire()
            else:
                await _wait_for(turn.lock, key, wait_seconds)
            try:
                yield
            finally:
                turn.lock.release()
        finally:
            turn.users -= 1
            if turn.users == 0:
                del self._turns[key]


async def _wait_for(lock: asyncio.Lock, key: str, wait_seconds: float) -> None:
    try:
        async with asyncio.timeout(wait_seconds):
            await lock.acquire()
    except TimeoutError:
        raise TurnNotCome(f"no turn for {key!r} within {wait_seconds:g}s") from None
