"""The one error the client raises for anything the sidecar refuses.

    ActonceError   code, reason, failure_class, metadata, violations, request_id
    │              .refused / .retryable / .permanent / .unknown
    ├── InvalidInput   (also a ValueError) an input the sidecar would refuse,
    │                  refused before an id is derived locally; .field names it
    └── InvalidSetting (also a ValueError) a setting of the client that cannot work
                       (its target, its API token file), PERMANENT, refused before
                       any call; .setting names it as it was given

Every sidecar error carries a ``google.rpc.ErrorInfo`` (domain ``actonce``)
whose ``metadata.failure_class`` says what the caller does next. One table,
the same in every client (docs/status-cases.md), classifies what a call gets:

1. details (``grpc-status-details-bin``) that do not decode, whose code is not
   the call's, or whose ErrorInfo or BadRequest does not decode: a malformed
   status; the code's name is the reason, the class UNKNOWN;
2. an ErrorInfo of domain ``actonce``: its reason, and its ``failure_class``
   when it is exactly one of the four classes, else UNKNOWN;
3. no such ErrorInfo, a status from the transport: the code's name is the
   reason; UNAVAILABLE, DEADLINE_EXCEEDED and a CANCELLED the caller did not
   cause are RETRYABLE, anything else UNKNOWN.

A CANCELLED the caller did not cause is safe to retry: a sidecar never acts on
a call it did not dispatch (a draining one answers SHUTTING_DOWN), and a write
that may have landed stays bound to its request_id, so repeating it with that
request_id gets the first answer, and a retried run finds it by its derived id.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import grpc
from google.protobuf.message import DecodeError
from google.rpc import error_details_pb2, status_pb2

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
        request_id: str = "",
    ) -> None:
        super().__init__(f"{reason} ({failure_class}): {message}")
        self.message = message
        self.code = code
        self.reason = reason
        self.failure_class = failure_class
        self.metadata: dict[str, str] = dict(metadata or {})
        self.violations: tuple[FieldViolation, ...] = tuple(violations)
        self.request_id = request_id
        """The request_id the write was sent with ("" for a call that is not a write).
        Repeating the write with it, in the same attempt, gets the first answer back."""

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


class InvalidSetting(ActonceError, ValueError):
    """A setting of the client that cannot work: INVALID_ARGUMENT, PERMANENT (a retried run
    would meet it again), raised when the client is made, before any call. ``setting`` is
    the option or the environment variable it came from, as the user wrote it."""

    def __init__(self, setting: str, description: str) -> None:
        super().__init__(
            f"{setting}: {description}",
            code=grpc.StatusCode.INVALID_ARGUMENT,
            reason="INVALID_ARGUMENT",
            failure_class=FailureClass.PERMANENT,
            violations=[FieldViolation(setting, description)],
        )
        self.setting = setting


_FAILURE_CLASSES = {member.value: member for member in FailureClass}

# A status without the sidecar's ErrorInfo came from the transport. A retried
# run is safe after these, since derived ids make each write once.
_RETRYABLE_TRANSPORT_CODES = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
}

_DETAILS_KEY = "grpc-status-details-bin"
_ERROR_INFO = error_details_pb2.ErrorInfo.DESCRIPTOR.full_name
_BAD_REQUEST = error_details_pb2.BadRequest.DESCRIPTOR.full_name


class _Malformed(Exception):
    pass


def from_rpc_error(
    error: grpc.RpcError, *, request_id: str = "", caller_cancelled: bool = False
) -> ActonceError:
    """The ActonceError for a failed call; never raises, whatever the status holds.

    ``caller_cancelled`` says the caller cancelled the call itself: that
    CANCELLED says nothing of the sidecar, and is not retryable.
    """
    # Every unary call's error is a grpc.Call; an asyncio call's, an AioRpcError.
    if not isinstance(error, grpc.Call | grpc.aio.AioRpcError):
        return ActonceError(
            str(error), code=grpc.StatusCode.UNKNOWN, reason="UNKNOWN",
            failure_class=FailureClass.UNKNOWN, request_id=request_id,
        )  # fmt: skip
    code: grpc.StatusCode = error.code()
    message: str = error.details() or ""
    details = [value for key, value in error.trailing_metadata() or () if key == _DETAILS_KEY]
    try:
        info, violations = _decode(code, details[0] if details else None)
    except _Malformed:
        return ActonceError(
            message, code=code, reason=code.name, failure_class=FailureClass.UNKNOWN,
            request_id=request_id,
        )  # fmt: skip
    if info is not None:
        metadata = dict(info.metadata)
        return ActonceError(
            message, code=code, reason=info.reason,
            failure_class=_FAILURE_CLASSES.get(metadata.get("failure_class", ""),
                                               FailureClass.UNKNOWN),
            metadata=metadata, violations=violations, request_id=request_id,
        )  # fmt: skip
    retryable = code in _RETRYABLE_TRANSPORT_CODES and not (
        code is grpc.StatusCode.CANCELLED and caller_cancelled
    )
    return ActonceError(
        message, code=code, reason=code.name,
        failure_class=FailureClass.RETRYABLE if retryable else FailureClass.UNKNOWN,
        violations=violations, request_id=request_id,
    )  # fmt: skip


def _decode(
    code: grpc.StatusCode, raw: bytes | str | None
) -> tuple[error_details_pb2.ErrorInfo | None, list[FieldViolation]]:
    """The sidecar's ErrorInfo and the field violations in a status's details."""
    if raw is None:
        return None, []
    if not isinstance(raw, bytes):
        raise _Malformed
    try:
        status = status_pb2.Status.FromString(raw)
    except DecodeError:
        raise _Malformed from None
    if status.code != code.value[0]:
        raise _Malformed
    info: error_details_pb2.ErrorInfo | None = None
    violations: list[FieldViolation] = []
    for detail in status.details:
        name = detail.type_url.rpartition("/")[2]
        try:
            if name == _ERROR_INFO:
                found = error_details_pb2.ErrorInfo.FromString(detail.value)
                if found.domain == DOMAIN and info is None:
                    info = found
            elif name == _BAD_REQUEST:
                bad = error_details_pb2.BadRequest.FromString(detail.value)
                violations += [FieldViolation(v.field, v.description) for v in bad.field_violations]
        except DecodeError:
            raise _Malformed from None
    return info, violations
