"""The plain rule modules, without a server: edits, refusals, effects, occurrences."""

from __future__ import annotations

import json

import pytest

from sidecar.core.attempts import Occurrences
from sidecar.errors import FailureClass, InvalidArgument
from sidecar.rules import edits, effects, refusals
from sidecar.rules.ids import WriteType


@pytest.mark.parametrize(
    ("path", "normalized"), [("/a/b", "/a/b"), ("/a~1b/~0c", "/a~1b/~0c"), ("/0", "/0"), ("/", "/")]
)
def test_pointer_normalization(path: str, normalized: str) -> None:
    assert edits.normalize_path(path) == normalized


@pytest.mark.parametrize("path", ["", "a", "/x/-", "/~2", "/a~"])
def test_pointer_refusals(path: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        edits.normalize_path(path)
    assert caught.value.violations[0].field == "path"


def test_skip_when_equal_compares_json_values_not_python_values() -> None:
    doc = {"a": [1.0], "b": True}
    assert edits.holds(doc, "/a/0", 1)
    assert not edits.holds(doc, "/b", 1)  # true is not 1 in JSON
    assert not edits.holds(doc, "/missing", None)


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


def test_builtin_effects_are_fixed_and_unknown_names_are_non_idempotent() -> None:
    assert effects.effect_for("Read") is effects.ToolEffect.READ_ONLY
    assert effects.effect_for("Create") is effects.ToolEffect.IDEMPOTENT_WRITE
    assert effects.effect_for("send_email") is effects.ToolEffect.NON_IDEMPOTENT_WRITE
    assert effects.declared(0) is effects.ToolEffect.NON_IDEMPOTENT_WRITE
    assert effects.declared(99) is effects.ToolEffect.NON_IDEMPOTENT_WRITE
    with pytest.raises(TypeError):
        effects.BUILTIN_EFFECTS["Create"] = effects.ToolEffect.READ_ONLY  # type: ignore[index]


def test_a_failed_write_gives_its_occurrence_back() -> None:
    occ = Occurrences()
    key = (WriteType.CREATE, ("k", "d"))
    assert [occ.take(*key), occ.take(*key)] == [0, 1]
    occ.give_back(*key, 0)
    assert occ.take(*key) == 0
    assert occ.take(*key) == 2


def test_an_edit_replaces_an_array_element_and_adds_or_replaces_an_object_member() -> None:
    doc = {"items": ["a", "b"], "tags": {"x": 1}}
    assert json.loads(edits.set_patch(doc, "/items/1", "y")) == [
        {"op": "replace", "path": "/items/1", "value": "y"}
    ]
    assert json.loads(edits.set_patch(doc, "/tags/x", 2))[0]["op"] == "add"
    assert json.loads(edits.set_patch(doc, "/tags/y", 2))[0]["op"] == "add"
    # A missing parent is left to the store, which refuses the patch (PATCH_FAILED).
    assert json.loads(edits.set_patch(doc, "/missing/x", 2))[0]["op"] == "add"


@pytest.mark.parametrize("path", ["/items/2", "/items/10", "/items/01", "/items/x", "/items/-1"])
def test_an_index_that_names_no_element_is_bad_input(path: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        edits.set_patch({"items": ["a", "b"]}, path, "z")
    assert caught.value.violations[0].field == "path"


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
