"""The gRPC front's status table: each error of sidecar.errors as a ``google.rpc.Status``.

The error tree says what a refusal is (its reason and failure class); this table says
how gRPC tells it: a canonical status code, an ``ErrorInfo`` (reason, domain
``actonce``, ``metadata.failure_class``) and, for bad input, a ``BadRequest``.
:func:`abort` is the one place that ends a RunActionsService call with one.

    ActonceError                 INTERNAL
    ├── InvalidArgument          INVALID_ARGUMENT
    ├── UnknownAttempt           FAILED_PRECONDITION
    ├── AuditPersistenceFailed   INTERNAL
    ├── StoreRefused             the code its reason travels with on the store's wire
    ├── PatchDoesNotApply        likewise (PATCH_FAILED: FAILED_PRECONDITION)
    ├── StoreUnavailable         UNAVAILABLE
    ├── StoreDeadlineExceeded    DEADLINE_EXCEEDED
    ├── ArtifactArchived         FAILED_PRECONDITION
    ├── SendNotAllowed           PERMISSION_DENIED
    ├── RuleNotServed            PERMISSION_DENIED
    ├── RunOfAnotherRule         PERMISSION_DENIED
    ├── NotGranted               PERMISSION_DENIED
    ├── LeaseExpired             FAILED_PRECONDITION
    ├── AttemptFenced            FAILED_PRECONDITION
    ├── StepDecided              FAILED_PRECONDITION
    ├── InDoubt                  FAILED_PRECONDITION
    ├── UnknownStep              FAILED_PRECONDITION
    ├── StepEnded                FAILED_PRECONDITION
    ├── StepAborted              FAILED_PRECONDITION
    ├── KeyReused                ALREADY_EXISTS
    ├── ShuttingDown             UNAVAILABLE
    ├── Unauthenticated          UNAUTHENTICATED
    ├── CapabilityRefused        PERMISSION_DENIED
    └── RequestTooLarge          RESOURCE_EXHAUSTED

An error class this table does not name (the MCP front's own) is told by its nearest
ancestor that it names.
"""

from __future__ import annotations

from typing import Any, Never

import grpc
import structlog
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from sidecar import errors, store_contract

log = structlog.get_logger()

DOMAIN = "actonce"

_CODES: dict[type[errors.ActonceError], grpc.StatusCode] = {
    errors.ActonceError: grpc.StatusCode.INTERNAL,
    errors.InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    errors.UnknownAttempt: grpc.StatusCode.FAILED_PRECONDITION,
    # Not UNAVAILABLE: a transport retry policy would re-run a write whose effect may
    # already have landed.
    errors.AuditPersistenceFailed: grpc.StatusCode.INTERNAL,
    errors.StoreUnavailable: grpc.StatusCode.UNAVAILABLE,
    errors.StoreDeadlineExceeded: grpc.StatusCode.DEADLINE_EXCEEDED,
    errors.ArtifactArchived: grpc.StatusCode.FAILED_PRECONDITION,
    errors.SendNotAllowed: grpc.StatusCode.PERMISSION_DENIED,
    errors.RuleNotServed: grpc.StatusCode.PERMISSION_DENIED,
    errors.RunOfAnotherRule: grpc.StatusCode.PERMISSION_DENIED,
    errors.NotGranted: grpc.StatusCode.PERMISSION_DENIED,
    errors.LeaseExpired: grpc.StatusCode.FAILED_PRECONDITION,
    errors.AttemptFenced: grpc.StatusCode.FAILED_PRECONDITION,
    errors.StepDecided: grpc.StatusCode.FAILED_PRECONDITION,
    errors.InDoubt: grpc.StatusCode.FAILED_PRECONDITION,
    errors.UnknownStep: grpc.StatusCode.FAILED_PRECONDITION,
    errors.StepEnded: grpc.StatusCode.FAILED_PRECONDITION,
    errors.StepAborted: grpc.StatusCode.FAILED_PRECONDITION,
    # The id the key names exists, made from other data (AIP-193's ALREADY_EXISTS).
    errors.KeyReused: grpc.StatusCode.ALREADY_EXISTS,
    errors.ShuttingDown: grpc.StatusCode.UNAVAILABLE,
    errors.Unauthenticated: grpc.StatusCode.UNAUTHENTICATED,
    errors.CapabilityRefused: grpc.StatusCode.PERMISSION_DENIED,
    errors.RequestTooLarge: grpc.StatusCode.RESOURCE_EXHAUSTED,
}
# Errors that carry a store's refusal code travel with the code the store contract gives it
# (sidecar.store_contract.RefusalCode): the reference store sends it too, below this front.
_BY_STORE_CODE = (errors.StoreRefused, errors.PatchDoesNotApply)

_CODE_NUMBERS: dict[grpc.StatusCode, int] = {code: int(code.value[0]) for code in grpc.StatusCode}


def code_of(error: errors.ActonceError) -> grpc.StatusCode:
    """The status code ``error`` travels with."""
    if isinstance(error, _BY_STORE_CODE):
        return grpc.StatusCode[store_contract.status_of(error.reason)]
    for kind in type(error).__mro__:
        code = _CODES.get(kind)
        if code is not None:
            return code
    return grpc.StatusCode.INTERNAL


def to_status(error: errors.ActonceError) -> status_pb2.Status:
    """Build the google.rpc.Status that carries ``error`` to the caller."""
    info = error_details_pb2.ErrorInfo(
        reason=error.reason,
        domain=DOMAIN,
        metadata={**error.metadata, "failure_class": error.failure_class.value},
    )
    details = [_pack(info)]
    if error.violations:
        bad = error_details_pb2.BadRequest(
            field_violations=[
                error_details_pb2.BadRequest.FieldViolation(
                    field=v.field, description=v.description
                )
                for v in error.violations
            ]
        )
        details.append(_pack(bad))
    return status_pb2.Status(
        code=_CODE_NUMBERS.get(code_of(error), code_pb2.INTERNAL),
        message=error.message,
        details=details,
    )


def to_grpc_status(error: errors.ActonceError) -> grpc.Status:
    """``error`` as the status a call is aborted with (its details in the trailers)."""
    return rpc_status.to_status(to_status(error))


async def abort(
    context: grpc.aio.ServicerContext[Any, Any], error: errors.ActonceError, **said: str
) -> Never:
    """End the call with ``error``, logged with ``said``: the one place a RunActionsService
    call is refused."""
    log.info("refused", **said, reason=error.reason, failure_class=error.failure_class.value)
    await context.abort_with_status(to_grpc_status(error))


def _pack(message: error_details_pb2.ErrorInfo | error_details_pb2.BadRequest) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed
