"""The store contract: what each store refusal code means for the run, the one rule that a
used id alone counts as done, and the bounded form in which a store's own codes, states and
messages pass on."""

from __future__ import annotations

import grpc
import pytest

from sidecar import store_contract as refusals
from sidecar.errors import (
    ArtifactArchived,
    FailureClass,
    PatchDoesNotApply,
    RuleNotServed,
    RunOfAnotherRule,
    SendNotAllowed,
)
from sidecar.fronts.grpc import status


def _counts(code: str, states: set[str]) -> bool:
    return refusals.counts_as_done(refusals.Refusal(code, "refused", frozenset(states)))


def test_only_a_used_id_alone_counts_as_done() -> None:
    assert _counts("INVALID_STATE", {"ID_USED"})
    assert not _counts("INVALID_STATE", {"ID_USED", "ARCHIVED"})
    assert not _counts("INVALID_STATE", {"ARCHIVED"})
    assert not _counts("NOT_FOUND", {"ID_USED"})


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("NOT_FOUND", FailureClass.REFUSED),
        ("VALIDATION_FAILED", FailureClass.REFUSED),
        ("PATCH_FAILED", FailureClass.REFUSED),
        ("VERSION_CONFLICT", FailureClass.RETRYABLE),
        ("FORBIDDEN", FailureClass.PERMANENT),
        ("INVALID_STATE", FailureClass.PERMANENT),
        ("SOMETHING_NEW", FailureClass.PERMANENT),
    ],
)
def test_refusal_classes(code: str, expected: FailureClass) -> None:
    assert refusals.failure_class(code) is expected


def test_a_stores_refusal_code_passes_only_in_a_bounded_form_and_number() -> None:
    vocabulary = refusals.RefusalVocabulary(max_other=2)
    unrecognized = refusals.STORE_REFUSAL_UNRECOGNIZED
    assert vocabulary.code("PATCH_FAILED") == "PATCH_FAILED"
    assert [vocabulary.code(c) for c in ("NEW_A", "NEW_B", "NEW_C", "NEW_A")] == [
        "NEW_A", "NEW_B", unrecognized, "NEW_A"
    ]  # fmt: skip
    for bad in ("", "lower", "NUL\0", "LINE\nBREAK", "A" * 65, "9LIVES", "ÄRGER"):
        assert vocabulary.code(bad) == unrecognized, bad
    assert vocabulary.code("NOT_FOUND") == "NOT_FOUND"  # known codes are never bounded away
    assert vocabulary.states("ID_USED") == {"ID_USED"}
    assert vocabulary.states("ID_USED,x y") == {"ID_USED", refusals.STATE_UNRECOGNIZED}
    assert len(vocabulary.states(",".join(f"S{n}" for n in range(50)))) == 1
    assert vocabulary.message("a\0b\r\nc" + "x" * 5000).startswith("a b c")
    assert len(vocabulary.message("x" * 5000)) <= refusals.MAX_MESSAGE_CHARS + 3


def test_a_refusal_is_answered_with_its_code_class_and_status() -> None:
    error = refusals.as_error(
        refusals.Refusal("INVALID_STATE", "archived", frozenset({"ARCHIVED"}))
    )
    assert (error.reason, error.failure_class, error.metadata) == (
        "INVALID_STATE", FailureClass.PERMANENT, {"states": "ARCHIVED"}
    )  # fmt: skip
    assert status.code_of(error) is grpc.StatusCode.FAILED_PRECONDITION
    assert status.code_of(refusals.as_error(refusals.Refusal("NEW_CODE", "?"))) is (
        grpc.StatusCode.FAILED_PRECONDITION
    )
    for code in refusals.RefusalCode:
        answered = status.code_of(refusals.as_error(refusals.Refusal(code, "x")))
        assert answered is grpc.StatusCode[code.status]


def test_a_used_id_alone_is_sent_as_already_exists() -> None:
    used = refusals.Refusal("INVALID_STATE", "used", frozenset({"ID_USED"}))
    assert refusals.status_code_for(used) == "ALREADY_EXISTS"
    assert refusals.status_code_for(refusals.Refusal("VERSION_CONFLICT", "x")) == "ABORTED"


def test_every_status_of_the_table_is_a_canonical_code() -> None:
    # The contract names statuses without importing a transport; each name must be gRPC's.
    for code in refusals.RefusalCode:
        assert code.status in grpc.StatusCode.__members__, code


def test_the_errors_that_speak_the_store_s_words_say_what_the_table_says() -> None:
    # The sidecar's own refusals that answer as the store would: the same reason and status.
    assert ArtifactArchived.reason == refusals.RefusalCode.INVALID_STATE
    assert PatchDoesNotApply.reason == refusals.RefusalCode.PATCH_FAILED
    patch = PatchDoesNotApply("path", "no parent")
    assert status.code_of(patch) is grpc.StatusCode[refusals.RefusalCode.PATCH_FAILED.status]
    for forbidden in (SendNotAllowed, RuleNotServed, RunOfAnotherRule):
        assert forbidden.reason == refusals.RefusalCode.FORBIDDEN
        wanted = grpc.StatusCode[refusals.RefusalCode.FORBIDDEN.status]
        assert status.code_of(forbidden("no")) is wanted
