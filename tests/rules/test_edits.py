"""Edits: JSON Pointer paths, skip-when-equal, and the patch each edit sends."""

from __future__ import annotations

import json

import pytest

from sidecar.errors import InvalidArgument
from sidecar.rules import edits


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
