"""Edit rules (ADR-0019): one value at one JSON Pointer, skipped when already there.

An edit *sets* one value at one RFC 6901 path. Repeating it changes nothing,
not even the artifact's version, because the sidecar compares the value in
place first. An object member is added or replaced (an RFC 6902 ``add``); an
array index names an element that exists, which is replaced (a ``replace``),
never an insertion: an insertion shifts the elements after it, so a retry that
made the same edits in another order would find them at other places and
insert again. ``-`` (append) and an index at or past the end are refused as
bad input for the same reason: a rule names each entry.
"""

from __future__ import annotations

import json
from typing import Any

import jsonpointer
import rfc8785

from sidecar.errors import InvalidArgument, PatchDoesNotApply
from sidecar.rules.canonical import MAX_NAME_BYTES, as_doubles, canonical, compact

_MISSING = object()


def normalize_path(path: str, field: str = "path") -> str:
    """The canonical spelling of a JSON Pointer, or InvalidArgument.

    Parsing and re-encoding makes ``~0``/``~1`` escapes the one spelling of a
    token, so that two spellings of one path key one edit.
    """
    if len(path.encode("utf-8")) > MAX_NAME_BYTES * 8:
        raise InvalidArgument(field, f"is longer than {MAX_NAME_BYTES * 8} bytes")
    if path == "":
        raise InvalidArgument(field, "must not be the root: an edit sets one value inside")
    try:
        pointer = jsonpointer.JsonPointer(path)
    except jsonpointer.JsonPointerException as exc:
        raise InvalidArgument(field, f"is not a JSON Pointer (RFC 6901): {exc}") from None
    if pointer.parts and pointer.parts[-1] == "-":
        raise InvalidArgument(field, "must not end in '-': appends are refused, name each entry")
    return str(jsonpointer.JsonPointer.from_parts(pointer.parts).path)


def value_at(document: Any, path: str) -> tuple[bool, Any]:
    """Whether ``document`` holds a value at ``path``, and that value."""
    try:
        found = jsonpointer.resolve_pointer(document, path, _MISSING)
    except jsonpointer.JsonPointerException:
        return False, None
    if found is _MISSING:
        return False, None
    return True, found


def holds(document: Any, path: str, value: Any) -> bool:
    """True when ``document`` already holds a JSON-equal ``value`` at ``path``.

    Equality is on canonical form, so ``1.0`` equals ``1`` but ``true`` does
    not equal ``1`` (Python's ``==`` would say it does).
    """
    found, current = value_at(document, path)
    if not found:
        return False
    try:
        return canonical(as_doubles(current)) == canonical(value)
    except (rfc8785.CanonicalizationError, UnicodeError, ValueError):
        # The stored value is no I-JSON (another writer's NaN or huge integer): it cannot
        # equal a value that passed parse_json, so the edit sets it.
        return False


def set_patch(document: Any, path: str, value: Any, field: str = "path") -> str:
    """The JSON Patch document that sets ``value`` at ``path`` of ``document``.

    The patch is chosen by what holds the last token: an array's element is replaced, so
    it must exist (InvalidArgument otherwise); an object's member is added or replaced (an
    ``add``). A path whose parent the artifact does not have, or whose parent is no object or
    array, is refused here (PatchDoesNotApply: PATCH_FAILED, as the store would answer the
    patch, with ``field`` named) with the member that is missing and how to change the call,
    which no store's wording can say. The store applies the patch only at the version it was
    chosen for.
    """
    pointer = jsonpointer.JsonPointer(path)
    parent_parts = pointer.parts[:-1]
    found, parent = value_at(document, jsonpointer.JsonPointer.from_parts(parent_parts).path)
    if not found:
        raise PatchDoesNotApply(field, _missing_parent(document, path, pointer.parts))
    if isinstance(parent, list):
        token = pointer.parts[-1]
        if not _is_index(token):
            raise InvalidArgument(
                field, f"{token!r} is no array index: an array's element is named by its index"
            )
        if int(token) >= len(parent):
            raise InvalidArgument(
                field,
                f"index {token} is at or past the end of an array of {len(parent)}: an edit "
                "replaces an element that exists and never inserts one",
            )
        return compact([{"op": "replace", "path": path, "value": value}])
    if not isinstance(parent, dict):
        where = jsonpointer.JsonPointer.from_parts(parent_parts).path
        raise PatchDoesNotApply(
            field,
            f"{path!r} sets a member inside {where!r}, which holds {_kind(parent)}, not an "
            f"object or an array. Edit {where!r} itself, or a path inside an object",
        )
    return compact([{"op": "add", "path": path, "value": value}])


def _missing_parent(document: Any, path: str, parts: list[str]) -> str:
    """What is missing on the way to ``path``'s parent, and how to change the call: names
    the path and the member, never the document's content (errors reach logs and models)."""
    parent_parts = parts[:-1]
    depth = 0
    while value_at(document, jsonpointer.JsonPointer.from_parts(parent_parts[: depth + 1]).path)[0]:
        depth += 1
    missing = jsonpointer.JsonPointer.from_parts(parent_parts[: depth + 1]).path
    holder = jsonpointer.JsonPointer.from_parts(parent_parts[:depth]).path
    container = value_at(document, holder)[1]
    token = parent_parts[depth]
    if isinstance(container, dict):
        what = f"the artifact has no member {token!r}" + (f" in {holder!r}" if holder else "")
        if depth == len(parent_parts) - 1:
            member = json.dumps(parts[-1])
            fix = f"Set both in one edit: path {missing!r}, value {{{member}: <the value>}}"
        else:
            fix = f"Set {missing!r} first (an edit of path {missing!r} whose value is an object)"
    elif isinstance(container, list):
        what = f"{holder!r} is an array of {len(container)} with no element {token!r}"
        fix = "Name an element that exists"
    else:
        what = f"{holder!r} holds {_kind(container)}, which has no member {token!r}"
        fix = f"Edit {holder!r} itself, or a path inside an object"
    return f"{path!r} cannot be set: {what}; an edit sets one value in a parent that exists. {fix}"


def _kind(value: Any) -> str:
    names = {str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return "null" if value is None else names.get(type(value), "a value")


def _is_index(token: str) -> bool:
    # RFC 6901: an array index is 0 or digits without a leading zero.
    return token == "0" or (token.isascii() and token.isdigit() and token[0] != "0")
