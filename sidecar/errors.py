"""The one error hierarchy of the sidecar: what each refusal is, in no protocol's words.

Every refusal the sidecar gives is an :class:`ActonceError`, carrying its ``reason``
(the ErrorInfo reason every front sends), its :class:`FailureClass` and, for bad
input, the fields at fault. How a front tells it is the front's own table, as
httpx's error tree knows no transport: the gRPC front's status codes, ErrorInfo and
BadRequest (sidecar.fronts.grpc.status), the MCP front's tool errors and HTTP
statuses (sidecar.fronts.mcp).

    ActonceError
    ├── InvalidArgument          INVALID_ARGUMENT        REFUSED
    ├── UnknownAttempt           UNKNOWN_ATTEMPT         RETRYABLE
    ├── AuditPersistenceFailed   AUDIT_PERSISTENCE_FAILED UNKNOWN
    ├── StoreRefused             <the store's code>      (the store contract's table)
    ├── PatchDoesNotApply        PATCH_FAILED            REFUSED
    ├── StoreUnavailable         STORE_UNAVAILABLE       RETRYABLE
    ├── StoreDeadlineExceeded    STORE_DEADLINE_EXCEEDED RETRYABLE
    ├── ArtifactArchived         INVALID_STATE           PERMANENT
    ├── SendNotAllowed           FORBIDDEN               PERMANENT
    ├── RuleNotServed            FORBIDDEN               PERMANENT
    ├── RunOfAnotherRule         FORBIDDEN               PERMANENT
    ├── NotGranted               FORBIDDEN               PERMANENT
    ├── LeaseExpired             LEASE_EXPIRED           RETRYABLE
    ├── AttemptFenced            ATTEMPT_FENCED          RETRYABLE
    ├── InDoubt                  IN_DOUBT                UNKNOWN
    ├── StepDecided              STEP_DECIDED            RETRYABLE
    ├── UnknownStep              UNKNOWN_STEP            REFUSED
    ├── StepEnded                STEP_ENDED              REFUSED
    ├── StepAborted              STEP_ABORTED            REFUSED
    ├── KeyReused                KEY_REUSED              REFUSED
    ├── ShuttingDown             SHUTTING_DOWN           RETRYABLE
    ├── Unauthenticated          UNAUTHENTICATED         PERMANENT
    ├── CapabilityRefused        CAPABILITY_REFUSED      PERMANENT
    └── RequestTooLarge          REQUEST_TOO_LARGE       REFUSED
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


class FailureClass(enum.StrEnum):
    """What the caller does with a failure (docs/design.md, the refusal table)."""

    REFUSED = "REFUSED"  # hand it back to the model; it can correct the call
    RETRYABLE = "RETRYABLE"  # fail the attempt; the queue retries the run
    PERMANENT = "PERMANENT"  # the run fails, no retry
    UNKNOWN = "UNKNOWN"  # never retried: the run is dead-lettered or settles FAILED


@dataclass(frozen=True)
class FieldViolation:
    """One bad field of a request, as google.rpc.BadRequest reports it."""

    field: str
    description: str


class ActonceError(Exception):
    """Root of every refusal the sidecar gives to its caller."""

    reason: str = "INTERNAL"
    failure_class: FailureClass = FailureClass.UNKNOWN

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = None,
        failure_class: FailureClass | None = None,
        metadata: Mapping[str, str] | None = None,
        violations: Sequence[FieldViolation] = (),
        nothing_sent: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        # Set where the sidecar knows the write was never sent to the store: it did
        # not land, and the audit says so (not "may have landed").
        self.nothing_sent = nothing_sent
        if reason is not None:
            self.reason = reason
        if failure_class is not None:
            self.failure_class = failure_class
        self.metadata: dict[str, str] = dict(metadata or {})
        self.violations: tuple[FieldViolation, ...] = tuple(violations)


class InvalidArgument(ActonceError):
    """Bad input: nothing of the request reached the store."""

    reason = "INVALID_ARGUMENT"
    failure_class = FailureClass.REFUSED

    def __init__(self, field: str, description: str) -> None:
        super().__init__(f"{field}: {description}", violations=[FieldViolation(field, description)])


class UnknownAttempt(ActonceError):
    """The attempt is not known to this process (also after a restart)."""

    reason = "UNKNOWN_ATTEMPT"
    failure_class = FailureClass.RETRYABLE


class AuditPersistenceFailed(ActonceError):
    """The ledger could not make an audit event durable: the write fails closed."""

    reason = "AUDIT_PERSISTENCE_FAILED"
    failure_class = FailureClass.UNKNOWN


class StoreRefused(ActonceError):
    """The store refused the write; reason is the store's own code, and its class follows it
    (the store contract's table, sidecar.store_contract.as_error)."""

    def __init__(
        self,
        message: str,
        *,
        reason: str,
        failure_class: FailureClass,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message, reason=reason, failure_class=failure_class, metadata=metadata)


class PatchDoesNotApply(ActonceError):
    """An edit whose path has no parent in the artifact it read: refused before the patch is
    sent, with the reason the store would give it, the field named, and how to fix the call."""

    reason = "PATCH_FAILED"
    failure_class = FailureClass.REFUSED

    def __init__(self, field: str, description: str) -> None:
        super().__init__(
            f"{field}: {description}",
            violations=[FieldViolation(field, description)],
            nothing_sent=True,
        )


class StoreUnavailable(ActonceError):
    """The store could not be reached; derived ids make a retry safe."""

    reason = "STORE_UNAVAILABLE"
    failure_class = FailureClass.RETRYABLE


class StoreDeadlineExceeded(ActonceError):
    """The store did not answer in time; the write may or may not have landed."""

    reason = "STORE_DEADLINE_EXCEEDED"
    failure_class = FailureClass.RETRYABLE


class ArtifactArchived(ActonceError):
    """An edit of an archived artifact, refused before it is tried, as the store would."""

    reason = "INVALID_STATE"
    failure_class = FailureClass.PERMANENT


class SendNotAllowed(ActonceError):
    """Send from a rule that the operator's allowlist does not name."""

    reason = "FORBIDDEN"
    failure_class = FailureClass.PERMANENT


class RuleNotServed(ActonceError):
    """BeginAttempt for a rule the operator did not pin this sidecar to (``--rules``)."""

    reason = "FORBIDDEN"
    failure_class = FailureClass.PERMANENT


class RunOfAnotherRule(ActonceError):
    """BeginAttempt of a run under another rule than the one its first attempt began
    under: a run belongs to its rule, on every sidecar sharing the ledger."""

    reason = "FORBIDDEN"
    failure_class = FailureClass.PERMANENT


class NotGranted(ActonceError):
    """A read or a write of an artifact or a thread that another rule owns, which the
    operator's grants do not open to the attempt's rule: refused before the store is called."""

    reason = "FORBIDDEN"
    failure_class = FailureClass.PERMANENT


class LeaseExpired(ActonceError):
    """The attempt's lease would not outlast the write: refused before acting."""

    reason = "LEASE_EXPIRED"
    failure_class = FailureClass.RETRYABLE


class AttemptFenced(ActonceError):
    """A newer attempt of the run began; this one stops."""

    reason = "ATTEMPT_FENCED"
    failure_class = FailureClass.RETRYABLE


def decide_step(step_id: str) -> str:
    """The command a person runs to settle a step in doubt: what every refusal and listing
    of one names, so that the next thing to do is on the line that stopped the run."""
    return f"actonce audit resolve {step_id} --ran|--did-not-run"


def decide_write(derived_id: str) -> str:
    """The command a person runs to settle a write that may or may not have landed."""
    return f"actonce audit resolve {derived_id} --landed|--not-landed"


class InDoubt(ActonceError):
    """A non-idempotent step began earlier and never ended: never re-run it automatically.
    Its message ends with the command that decides it."""

    reason = "IN_DOUBT"
    failure_class = FailureClass.UNKNOWN

    def __init__(self, message: str, *, step_id: str, tool: str) -> None:
        super().__init__(
            f"{message}; look at the upstream, then decide with `{decide_step(step_id)}`",
            metadata={"step_id": step_id, "tool": tool},
        )


class StepDecided(ActonceError):
    """An operator decided the step after this attempt began it: this attempt may not send
    its call (the ledger refused the send permit). A new attempt honours the decision."""

    reason = "STEP_DECIDED"
    failure_class = FailureClass.RETRYABLE


class UnknownStep(ActonceError):
    """EndStep for a step this attempt did not begin."""

    reason = "UNKNOWN_STEP"
    failure_class = FailureClass.REFUSED


class StepEnded(ActonceError):
    """AbortStep for a step that ended: its effect happened, it cannot be undone by word."""

    reason = "STEP_ENDED"
    failure_class = FailureClass.REFUSED


class StepAborted(ActonceError):
    """EndStep for a step that was aborted: its effect was declared not to have happened."""

    reason = "STEP_ABORTED"
    failure_class = FailureClass.REFUSED


class KeyReused(ActonceError):
    """The key a write names was used in the same attempt for a write of other data:
    nothing was done; the caller sends that data again, or names the other write by
    another key."""

    reason = "KEY_REUSED"
    failure_class = FailureClass.REFUSED

    def __init__(self, *, key: str, derived_id: str) -> None:
        super().__init__(
            f"key {key!r} already names {derived_id}, made with other data in this attempt: "
            "send the same data again to get it, or choose another key for other data",
            metadata={"key": key, "id": derived_id},
            nothing_sent=True,
        )


class ShuttingDown(ActonceError):
    """The sidecar is draining and takes no new calls."""

    reason = "SHUTTING_DOWN"
    failure_class = FailureClass.RETRYABLE


class Unauthenticated(ActonceError):
    """A call without the API token the sidecar was started with, or with another one.

    PERMANENT: the caller's configuration is wrong, and retrying the run cannot mend it.
    """

    reason = "UNAUTHENTICATED"
    failure_class = FailureClass.PERMANENT


class CapabilityRefused(ActonceError):
    """A call without the API token whose attempt capability is not that of the attempt it
    names (sidecar.ops.auth, ``--agent-capabilities``): another attempt's, a forged one, or
    a BeginAttempt that only the token may make.

    PERMANENT: an agent that reaches beyond its attempt is misconfigured or misled, and a
    retry of the run would be refused the same way.
    """

    reason = "CAPABILITY_REFUSED"
    failure_class = FailureClass.PERMANENT


class RequestTooLarge(ActonceError):
    """A request larger than any the API's field limits allow; nothing of it was parsed."""

    reason = "REQUEST_TOO_LARGE"
    failure_class = FailureClass.REFUSED
