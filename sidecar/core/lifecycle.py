"""BeginAttempt, EndAttempt and ExtendLease: an attempt's life, audited.

An attempt begins under the derived-id scheme its run began with, so that a
retry begun after an upgrade derives the ids the attempts before it did; it ends
once every write it made has ended, also those whose callers gave up.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Unpack

import structlog

from sidecar.core import deliveries
from sidecar.core.attempts import (
    Attempt,
    AttemptRegistry,
    AttemptStart,
    require_future_lease,
    require_lease_running,
)
from sidecar.core.audit import Audit, event
from sidecar.core.types import AttemptCounts, Outcome, Settings
from sidecar.errors import ActonceError, AuditPersistenceFailed, InvalidArgument, RuleNotServed
from sidecar.ledger.base import LedgerError, Phase
from sidecar.rules import canonical, ids, names


class Lifecycle:
    """Begins and ends the attempts of ``attempts``."""

    def __init__(self, attempts: AttemptRegistry, audit: Audit, settings: Settings) -> None:
        self.attempts = attempts
        self.audit = audit
        self.settings = settings
        self._forgetting: set[asyncio.Task[None]] = set()
        attempts.also_on_forget(self._forgotten)

    def _forgotten(self, attempt: Attempt, why: str) -> None:
        # An attempt forgotten early ends, as the ledger sees it: its steps are no longer
        # in flight, and an operator may decide them (sidecar.ledger.liveness).
        ended = event(attempt, "EndAttempt", Phase.ATTEMPT_END, detail={"forgotten": why})
        task = asyncio.ensure_future(self.audit.best_effort(ended, lost="attempt_end_lost"))
        self._forgetting.add(task)
        task.add_done_callback(self._forgetting.discard)

    async def extend(self, attempt_id: str, lease_deadline: datetime) -> datetime:
        """Move an attempt's lease, audited first: an operator must not take a step whose
        lease was extended for one that is no longer in flight. A lease that already ran out
        stays run out (LEASE_EXPIRED), and nothing is audited."""
        require_future_lease(lease_deadline)
        attempt = self.attempts.get(attempt_id)
        require_lease_running(attempt)
        moved = event(
            attempt,
            "ExtendLease",
            Phase.LEASE,
            detail={"lease_deadline": lease_deadline.isoformat()},
        )
        await self.audit.required(moved, because="the lease's extension was not persisted")
        attempt.lease_deadline = lease_deadline
        return lease_deadline

    async def begin(self, **start: Unpack[AttemptStart]) -> Attempt:
        run_id, scope = start["run_id"], start.get("scope", "")
        lease_deadline = start["lease_deadline"]
        self._validate(run_id, start["rule"], start["checkpoint"], scope)
        require_future_lease(lease_deadline)
        delivery = deliveries.delivery_of(self.attempts, start)
        id_scheme = await self._id_scheme(run_id, scope)
        attempt = self.attempts.begin(id_scheme=id_scheme, delivery=delivery, **start)
        structlog.contextvars.bind_contextvars(run_id=run_id, attempt_id=attempt.attempt_id)
        detail: dict[str, object] = {"id_scheme": id_scheme}
        if self.settings.sidecar_id:
            detail["sidecar"] = self.settings.sidecar_id
        if lease_deadline:
            detail["lease_deadline"] = lease_deadline.isoformat()
        try:
            await self.audit.required(
                event(attempt, "BeginAttempt", Phase.ATTEMPT_BEGIN, detail=detail)
            )
        # Not durable, or refused: a run of another rule, or a delivery a newer one of its
        # run replaced. No attempt either way.
        except ActonceError:
            self.attempts.end(attempt.attempt_id)
            raise
        return attempt

    def _validate(self, run_id: str, rule: str, checkpoint: str, scope: str) -> None:
        names.require_run(run_id, rule)
        if self.settings.rules is not None and rule not in self.settings.rules:
            raise RuleNotServed(f"rule {rule!r} is not one this sidecar serves (--rules)")
        if scope:
            canonical.require_name(scope, "scope")
        if len(checkpoint.encode("utf-8", "surrogatepass")) > canonical.MAX_TEXT_BYTES:
            raise InvalidArgument("checkpoint", f"is longer than {canonical.MAX_TEXT_BYTES} bytes")
        canonical.require_no_nul(checkpoint, "checkpoint")

    async def _id_scheme(self, run_id: str, scope: str) -> int:
        # A run keeps the scheme its first attempt began with, so that a retry
        # begun after an upgrade derives the ids the attempts before it did. A
        # scope has no version-1 form: a scoped attempt derives version 2 at least.
        try:
            first = await self.audit.ledger.first_attempt(run_id, scope)
        except LedgerError as exc:
            raise AuditPersistenceFailed(
                f"the ledger could not be read to find the run's id scheme: {exc}"
            ) from exc
        if first is None:
            return max(self.settings.id_scheme, 2) if scope else self.settings.id_scheme
        recorded = first.detail.get("id_scheme", 1)  # attempts from before versions: 1
        if recorded not in ids.SCHEME_VERSIONS:
            raise AuditPersistenceFailed(
                f"run {run_id} began under id scheme {recorded}, which this sidecar does "
                "not know: a newer sidecar began it"
            )
        return int(recorded)

    async def end(self, attempt_id: str) -> AttemptCounts:
        ended = self.attempts.ended(attempt_id)
        if ended is not None:
            return ended
        attempt = self.attempts.get(attempt_id)
        # Writes whose callers gave up are still the attempt's: count them too.
        while attempt.writing:
            await asyncio.wait(set(attempt.writing))
        counts = AttemptCounts(
            applied=attempt.outcomes[Outcome.APPLIED],
            already_applied=attempt.outcomes[Outcome.ALREADY_APPLIED],
            skipped=attempt.outcomes[Outcome.SKIPPED],
            failed=attempt.failed,
        )
        await self.audit.required(
            event(attempt, "EndAttempt", Phase.ATTEMPT_END, detail=counts.__dict__)
        )
        self.attempts.end(attempt_id, counts)
        return counts
