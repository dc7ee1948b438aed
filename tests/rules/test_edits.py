"""Edits: JSON Pointer paths, skip-when-equal, and the patch each edit sends."""

from __future__ import annotations

import json

import pytest

from sidecar.errors import InvalidArgument, PatchDoesNotApply
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


@pytest.mark.parametrize(
    ("doc", "path", "says"),
    [
        (
            {"title": "Disk full"},
            "/a/b",
            "'/a/b' cannot be set: the artifact has no member 'a'; an edit sets one value in a "
            "parent that exists. Set both in one edit: path '/a', value {\"b\": <the value>}",
        ),
        (
            {"title": "Disk full"},
            "/a/b/c",
            "'/a/b/c' cannot be set: the artifact has no member 'a'; an edit sets one value in "
            "a parent that exists. Set '/a' first (an edit of path '/a' whose value is an object)",
        ),
        (
            {"a": {"x": 1}},
            "/a/b/c",
            "'/a/b/c' cannot be set: the artifact has no member 'b' in '/a'; an edit sets one "
            "value in a parent that exists. Set both in one edit: path '/a/b', value {\"c\": "
            "<the value>}",
        ),
        (
            {"items": ["a"]},
            "/items/3/x",
            "'/items/3/x' cannot be set: '/items' is an array of 1 with no element '3'; an "
            "edit sets one value in a parent that exists. Name an element that exists",
        ),
        (
            {"title": "Disk full"},
            "/title/x",
            "'/title/x' sets a member inside '/title', which holds a string, not an object or "
            "an array. Edit '/title' itself, or a path inside an object",
        ),
    ],
)
def test_a_path_whose_parent_is_missing_names_the_member_and_the_fix(
    doc: dict[str, object], path: str, says: str
) -> None:
    with pytest.raises(PatchDoesNotApply) as caught:
        edits.set_patch(doc, path, 2)
    assert (caught.value.reason, caught.value.failure_class) == ("PATCH_FAILED", "REFUSED")
    (violation,) = caught.value.violations
    assert (violation.field, violation.description) == ("path", says)
    assert "Disk full" not in str(caught.value)  # names paths, never the artifact's data


@pytest.mark.parametrize("path", ["/items/2", "/items/10", "/items/01", "/items/x", "/items/-1"])
def test_an_index_that_names_no_element_is_bad_input(path: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        edits.set_patch({"items": ["a", "b"]}, path, "z")
    assert caught.value.violations[0].field == "path"
