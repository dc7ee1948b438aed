"""The gRPC front's status table: each error's code, ErrorInfo and BadRequest, and an error
tree that knows no transport."""

from __future__ import annotations

import ast
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2

from sidecar import errors
from sidecar.errors import ActonceError, FailureClass, InvalidArgument, StoreRefused
from sidecar.fronts.grpc import status
from sidecar.fronts.mcp.gateway import UpstreamFailed

C = grpc.StatusCode

CODES: list[tuple[ActonceError, grpc.StatusCode]] = [
    (InvalidArgument("kind", "must not be empty"), C.INVALID_ARGUMENT),
    (errors.UnknownAttempt("gone"), C.FAILED_PRECONDITION),
    (errors.AuditPersistenceFailed("disk"), C.INTERNAL),
    (errors.PatchDoesNotApply("path", "no parent"), C.FAILED_PRECONDITION),
    (errors.StoreUnavailable("down"), C.UNAVAILABLE),
    (errors.StoreDeadlineExceeded("slow"), C.DEADLINE_EXCEEDED),
    (errors.ArtifactArchived("archived"), C.FAILED_PRECONDITION),
    (errors.SendNotAllowed("no"), C.PERMISSION_DENIED),
    (errors.RuleNotServed("no"), C.PERMISSION_DENIED),
    (errors.RunOfAnotherRule("no"), C.PERMISSION_DENIED),
    (errors.NotGranted("not yours"), C.PERMISSION_DENIED),
    (errors.LeaseExpired("late"), C.FAILED_PRECONDITION),
    (errors.AttemptFenced("newer"), C.FAILED_PRECONDITION),
    (errors.StepDecided("decided"), C.FAILED_PRECONDITION),
    (errors.InDoubt("maybe", step_id="s", tool="t"), C.FAILED_PRECONDITION),
    (errors.UnknownStep("which"), C.FAILED_PRECONDITION),
    (errors.StepEnded("ended"), C.FAILED_PRECONDITION),
    (errors.StepAborted("aborted"), C.FAILED_PRECONDITION),
    (errors.KeyReused(key="k", derived_id="art_x"), C.ALREADY_EXISTS),
    (errors.ShuttingDown("bye"), C.UNAVAILABLE),
    (errors.Unauthenticated("who"), C.UNAUTHENTICATED),
    (errors.CapabilityRefused("not yours"), C.PERMISSION_DENIED),
    (errors.RequestTooLarge("big"), C.RESOURCE_EXHAUSTED),
    # A store's refusal travels with the code its reason has on the store's wire.
    (StoreRefused("no", reason="NOT_FOUND", failure_class=FailureClass.REFUSED), C.NOT_FOUND),
    (StoreRefused("no", reason="VERSION_CONFLICT", failure_class=FailureClass.RETRYABLE),
     C.ABORTED),
    (StoreRefused("no", reason="SOMETHING_NEW", failure_class=FailureClass.PERMANENT),
     C.FAILED_PRECONDITION),
    # An error the table does not name is told as its nearest ancestor that it names.
    (UpstreamFailed("sent"), C.INTERNAL),
]  # fmt: skip


@pytest.mark.parametrize(
    ("error", "code"), CODES, ids=[f"{type(e).__name__}-{e.reason}" for e, _ in CODES]
)
def test_each_error_travels_with_its_status_code(
    error: ActonceError, code: grpc.StatusCode
) -> None:
    assert status.code_of(error) == code
    assert status.to_status(error).code == code.value[0]


def test_every_error_of_the_tree_is_in_the_table() -> None:
    tree = {c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, ActonceError)}
    named = {type(error) for error, _ in CODES}
    assert tree <= named | {ActonceError}


def test_the_status_carries_error_info_and_the_fields_at_fault() -> None:
    sent = status.to_status(InvalidArgument("data_json", "is not valid JSON"))
    info, bad = error_details_pb2.ErrorInfo(), error_details_pb2.BadRequest()
    assert sent.details[0].Unpack(info) and sent.details[1].Unpack(bad)
    assert (info.reason, info.domain, dict(info.metadata)) == (
        "INVALID_ARGUMENT", "actonce", {"failure_class": "REFUSED"},
    )  # fmt: skip
    assert [(v.field, v.description) for v in bad.field_violations] == [
        ("data_json", "is not valid JSON")
    ]
    assert sent.message == "data_json: is not valid JSON"


def test_the_error_tree_imports_no_transport() -> None:
    source = Path(errors.__file__).read_text()
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
    assert not {m for m in imported if m.split(".")[0] in {"grpc", "google", "grpc_status"}}
