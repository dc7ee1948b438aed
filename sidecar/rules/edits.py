"""Edit rules (ADR-0019): one value at one JSON Pointer, skipped when already there.

An edit is an RFC 6902 ``add`` of one value at one RFC 6901 path. Repeating it
changes nothing, not even the artifact's version, because the sidecar compares
the value in place first. ``-`` (append) is refused: a retried append would
append twice, so a rule names each entry.
"""

from __future__ import annotations

from typing import Any

import jsonpointer
import rfc8785

from sidecar.errors import InvalidArgument
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


def add_patch(path: str, value: Any) -> str:
    """The JSON Patch document that sets ``value`` at ``path``."""
    return compact([{"op": "add", "path": path, "value": value}])
