"""The one error the client raises for anything the sidecar refuses.

    ActonceError   code, reason, failure_class, metadata, violations
    │              .refused / .retryable / .permanent / .unknown
    └── InvalidInput   (also a ValueError) an input the sidecar would refuse,
                       refused before an id is derived locally; .field names it

Every sidecar error carries a ``google.rpc.ErrorInfo`` (domain ``actonce``)
whose ``metadata.failure_class`` says what the caller does next.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

DOMAIN = "actonce"


class FailureClass(enum.StrEnum):
    """What the caller does with an error."""

    REFUSED = "REFUSED"
    """The call was wrong: hand it to the model, which can correct it."""
    RETRYABLE = "RETRYABLE"
    """Fail the attempt; the run is retried, and derived ids make that safe."""
    PERMANENT = "PERMANENT"
    """The run fails; retrying cannot help."""
    UNKNOWN = "UNKNOWN"
    """The outcome is not known: never retry automatically."""


@dataclass(frozen=True)
class FieldViolation:
    """One bad field of a request."""

    field: str
    description: str


class ActonceError(Exception):
    """An error the sidecar answered with, or the transport gave for it."""

    def __init__(
        self,
        message: str,
        *,
        code: grpc.StatusCode,
        reason: str,
        failure_class: FailureClass,
        metadata: Mapping[str, str] | None = None,
        violations: Sequence[FieldViolation] = (),
    ) -> None:
        super().__init__(f"{reason} ({failure_class}): {message}")
        self.message = message
        self.code = code
        self.reason = reason
        self.failure_class = failure_class
        self.metadata: dict[str, str] = dict(metadata or {})
        self.violations: tuple[FieldViolation, ...] = tuple(violations)

    @property
    def refused(self) -> bool:
        """Hand it to the model: it can correct the call."""
        return self.failure_class is FailureClass.REFUSED

    @property
    def retryable(self) -> bool:
        """Fail the attempt; the queue retries the run."""
        return self.failure_class is FailureClass.RETRYABLE

    @property
    def permanent(self) -> bool:
        """The run fails, with no retry."""
        return self.failure_class is FailureClass.PERMANENT

    @property
    def unknown(self) -> bool:
        """The outcome is not known: never retry automatically."""
        return self.failure_class is FailureClass.UNKNOWN


class InvalidInput(ActonceError, ValueError):
    """An input the sidecar refuses (INVALID_ARGUMENT, REFUSED), refused before an id is
    derived from it locally; ``field`` is the field the sidecar's refusal names."""

    def __init__(self, field: str, description: str) -> None:
        super().__init__(
            f"{field}: {description}",
            code=grpc.StatusCode.INVALID_ARGUMENT,
            reason="INVALID_ARGUMENT",
            failure_class=FailureClass.REFUSED,
            violations=[FieldViolation(field, description)],
        )
        self.field = field


# A status without ErrorInfo came from the transport, not the sidecar's rules.
# A retried run is safe after these, since derived ids make each write once.
_RETRYABLE_TRANSPORT_CODES = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}


def from_rpc_error(error: grpc.RpcError) -> ActonceError:
    """The ActonceError for a failed call."""
    if not isinstance(error, grpc.Call):  # every unary call's error is one
        return ActonceError(
            str(error), code=grpc.StatusCode.UNKNOWN, reason="UNKNOWN",
            failure_class=FailureClass.UNKNOWN,
        )  # fmt: skip
    code: grpc.StatusCode = error.code()
    message: str = error.details() or ""
    reason = code.name
    failure_class = (
        FailureClass.RETRYABLE if code in _RETRYABLE_TRANSPORT_CODES else FailureClass.UNKNOWN
    )
    metadata: dict[str, str] = {}
    violations: list[FieldViolation] = []
    status = rpc_status.from_call(error)
    for detail in status.details if status is not None else ():
        info = error_details_pb2.ErrorInfo()
        bad = error_details_pb2.BadRequest()
        if detail.Unpack(info) and info.domain == DOMAIN:
            reason = info.reason
            metadata = dict(info.metadata)
            try:
                failure_class = FailureClass(metadata.get("failure_class", ""))
            except ValueError:
                failure_class = FailureClass.UNKNOWN
        elif detail.Unpack(bad):
            violations += [FieldViolation(v.field, v.description) for v in bad.field_violations]
    return ActonceError(
        message,
        code=code,
        reason=reason,
        failure_class=failure_class,
        metadata=metadata,
        violations=violations,
    )
