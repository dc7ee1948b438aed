"""Refusal classes: what each store refusal code means for the run, and the bounded form
in which a store's own codes, states and messages pass on."""

from __future__ import annotations

import pytest

from sidecar.errors import FailureClass
from sidecar.rules import refusals


def test_only_a_used_id_alone_counts_as_done() -> None:
    assert refusals.is_used_id_only("INVALID_STATE", {"ID_USED"})
    assert not refusals.is_used_id_only("INVALID_STATE", {"ID_USED", "ARCHIVED"})
    assert not refusals.is_used_id_only("INVALID_STATE", {"ARCHIVED"})
    assert not refusals.is_used_id_only("NOT_FOUND", {"ID_USED"})


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
