"""The core's one way to append an audit event: required, or best effort.

A required event fails its call closed when it cannot be made durable
(AUDIT_PERSISTENCE_FAILED); a best-effort one is logged when it is lost, and the
call goes on. Either way, an event refused because a newer attempt of the run
fenced this one stops the attempt (ATTEMPT_FENCED), and a begin refused because
its run belongs to another rule is FORBIDDEN. Every event names the front its
call came through.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from dataclasses import dataclass

import structlog

from sidecar.core.attempts import Attempt
from sidecar.errors import (
    ActonceError,
    AttemptFenced,
    AuditPersistenceFailed,
    LeaseExpired,
    RunOfAnotherRule,
    StepDecided,
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
