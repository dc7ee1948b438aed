"""Deliveries: a queue's delivery of a job is an unscoped attempt of its run, and the
scoped attempts of its tool calls name it.

Beginning a newer delivery fences the older ones' scoped attempts too: the ledger
refuses, in the transaction that would store it, every event of a scoped attempt
whose delivery is no longer the run's newest (sidecar.ledger.base.fenced), so a stale
delivery's tool calls write nothing, on any sidecar sharing the ledger. A scoped
attempt's lease is bounded by its delivery's (core/attempts.py): the delivery's live
attempt, when it began on this sidecar. One begun on another sidecar cannot be seen
from here, its lease nor its ExtendLease, so a scoped attempt that names it must
bring a lease of its own: without one it could outlive the queue's lease unbounded.

The MCP front binds a tool call's scope by a header rather than by BeginAttempt:
:class:`ScopedAttempts` begins the scoped attempt of (delivery, scope) on its first
call and hands it to every later call of that scope in the delivery, and ends them
with the delivery.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from sidecar.core.attempts import Attempt, AttemptRegistry, AttemptStart
from sidecar.errors import InvalidArgument
from sidecar.rules import canonical

FIELD = "delivery_attempt_id"


def delivery_of(attempts: AttemptRegistry, start: AttemptStart) -> Attempt | None:
    """The live delivery a new attempt names, if it began on this sidecar; refuses a
    delivery named where none may be, or one of another run."""
    named = start.get("delivery_attempt_id", "")
    if not named:
        return None
    canonical.require_name(named, FIELD)
    if not start.get("scope", ""):
        raise InvalidArgument(
            FIELD, "names a delivery for a scoped attempt only: an unscoped attempt is one"
        )
    delivery = attempts.find(named)
    if delivery is None:
        if start["lease_deadline"] is None:
            raise InvalidArgument(
                "lease_deadline",
                f"must be set: the delivery {named} was not begun on this sidecar, so its "
                "lease cannot bound this attempt's",
            )
        return None
    if delivery.scope or delivery.run_id != start["run_id"]:
        raise InvalidArgument(FIELD, f"{named} is not an unscoped attempt of this run")
    return delivery


Begin = Callable[..., Awaitable[Attempt]]


@dataclass
class _Scopes:
    by_scope: dict[str, str] = field(default_factory=dict)
    locks: dict[str, asyncio.Lock] = field(default_factory=dict)


class ScopedAttempts:
    """The scoped attempts a front began for the tool calls of its deliveries."""

    def __init__(self, attempts: AttemptRegistry, begin: Begin) -> None:
        self._attempts = attempts
        self._begin = begin
        self._deliveries: dict[str, _Scopes] = {}

    async def of(self, delivery_attempt_id: str, scope: str) -> Attempt:
        """The scoped attempt of ``scope`` in the delivery: begun on its first call (its
        run, rule and checkpoint are the delivery's), the same one after."""
        canonical.require_name(scope, "scope")
        delivery = self._attempts.get(delivery_attempt_id)
        if delivery.scope:
            raise InvalidArgument(
                "actonce-attempt-id", "names a scoped attempt: a scope belongs to a delivery"
            )
        scopes = self._deliveries.setdefault(delivery_attempt_id, _Scopes())
        async with scopes.locks.setdefault(scope, asyncio.Lock()):
            known = scopes.by_scope.get(scope)
            found = self._attempts.find(known) if known else None
            if found is not None:
                return self._attempts.get(found.attempt_id)
            attempt = await self._begin(
                run_id=delivery.run_id,
                rule=delivery.rule,
                checkpoint=delivery.checkpoint,
                lease_deadline=None,
                scope=scope,
                delivery_attempt_id=delivery_attempt_id,
            )
            scopes.by_scope[scope] = attempt.attempt_id
            return attempt

    def ended(self, delivery_attempt_id: str) -> list[str]:
        """Forget an ended delivery; the live scoped attempts begun for it, to end."""
        scopes = self._deliveries.pop(delivery_attempt_id, None)
        if scopes is None:
            return []
        return [a for a in scopes.by_scope.values() if self._attempts.find(a) is not None]
