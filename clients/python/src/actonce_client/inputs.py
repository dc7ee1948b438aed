"""The sidecar's checks of a write's inputs, made before an id is derived locally.

An id derived here from an input the sidecar refuses would name nothing, so
each check refuses what the sidecar refuses, with the same error: an
``InvalidInput`` (code, reason and class of the sidecar's INVALID_ARGUMENT)
naming the same field. ``docs/derived-id-vectors.json`` lists the refused
inputs (``refusals``) that the tests hold this module to.
"""

from __future__ import annotations

import json
from typing import Any

import rfc8785

from actonce_client.errors import InvalidInput

MAX_JSON_BYTES = 1 << 20  # UTF-8 bytes of a *_json field
MAX_JSON_DEPTH = 64  # nested arrays and objects
MAX_TEXT_BYTES = 64 << 10  # a notice's or message's text, a checkpoint
MAX_NAME_BYTES = 512  # kind, title, ids, tool names
MAX_KEY_BYTES = 255  # a key the caller chooses
KEYED_SCHEME = 3  # the first derived-id scheme whose runs take keys
MAX_PATH_BYTES = MAX_NAME_BYTES * 8
SAFE_INTEGER = 2**53 - 1


def _size(value: str) -> int:
    return len(value.encode("utf-8", "surrogatepass"))


def no_nul(value: str, field: str) -> str:
    if "\0" in value:
        raise InvalidInput(field, "must not contain a NUL character")
    return value


def text(value: str, field: str, *, limit: int = MAX_TEXT_BYTES) -> str:
    """A non-empty string without NUL, within its byte limit."""
    if not value:
        raise InvalidInput(field, "must not be empty")
    no_nul(value, field)
    if _size(value) > limit:
        raise InvalidInput(field, f"is {_size(value)} bytes; the limit is {limit}")
    return value


def name(value: str, field: str) -> str:
    """A kind, title, id or tool name."""
    return text(value, field, limit=MAX_NAME_BYTES)


def key(value: str, *, scheme: int) -> str:
    """A key the caller chose: 1 to 255 bytes without NUL, in a run of version 3 or later."""
    if not value:
        raise InvalidInput("key", "must not be empty: leave a write without a key unnamed")
    if _size(value) > MAX_KEY_BYTES:
        raise InvalidInput("key", f"is {_size(value)} bytes; the limit is {MAX_KEY_BYTES}")
    no_nul(value, "key")
    if scheme < KEYED_SCHEME:
        raise InvalidInput("key", f"a run of id scheme {scheme} has no keys; version "
                                  f"{KEYED_SCHEME} has")  # fmt: skip
    return value


def checkpoint(value: str) -> str:
    """A checkpoint may be empty; it has no NUL and is within 64 KiB."""
    if _size(value) > MAX_TEXT_BYTES:
        raise InvalidInput("checkpoint", f"is longer than {MAX_TEXT_BYTES} bytes")
    return no_nul(value, "checkpoint")


class _Duplicate(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _Duplicate(f"duplicate key {key!r}")
        result[key] = value
    return result


def _no_constant(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def canonical_json(value: str, field: str) -> bytes:
    """The RFC 8785 bytes of one ``*_json`` field, refused as the sidecar refuses it."""
    if not value:
        raise InvalidInput(field, "must be JSON text, got an empty string")
    if _size(value) > MAX_JSON_BYTES:
        raise InvalidInput(field, f"is {_size(value)} bytes; the limit is {MAX_JSON_BYTES}")
    try:
        parsed = json.loads(value, parse_constant=_no_constant, object_pairs_hook=_no_duplicates)
    except RecursionError:
        raise InvalidInput(field, f"nests deeper than {MAX_JSON_DEPTH} levels") from None
    except (ValueError, TypeError) as exc:
        raise InvalidInput(field, f"is not valid JSON: {exc}") from None
    depth = _depth(parsed)
    if depth > MAX_JSON_DEPTH:
        raise InvalidInput(field, f"nests {depth} levels; the limit is {MAX_JSON_DEPTH}")
    try:
        return bytes(rfc8785.dumps(_as_doubles(parsed)))
    except (rfc8785.CanonicalizationError, UnicodeError, ValueError) as exc:
        raise InvalidInput(field, f"cannot be canonicalized (RFC 8785): {exc}") from None


def _as_doubles(value: Any) -> Any:
    # JSON has one number type: digits beyond 2^53 that RFC 8785 writes for a double (how
    # the store hands back 6.06e16) are that double, as the sidecar reads them. Any other
    # large integer stays an int, which canonicalization refuses.
    if isinstance(value, dict):
        return {key: _as_doubles(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_as_doubles(item) for item in value]
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > SAFE_INTEGER:
        try:
            as_float = float(value)
        except OverflowError:
            return value
        return as_float if rfc8785.dumps(as_float) == str(value).encode() else value
    return value


def _depth(value: Any) -> int:
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in node.values())
        elif isinstance(node, list):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in node)
    return deepest


def pointer_tokens(path: str) -> list[str]:
    """The tokens of an RFC 6901 pointer, refused as the sidecar refuses it: the root, no
    leading '/', '~' not followed by 0 or 1, a last token '-' (an append), over 4096 bytes."""
    if len(path.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        raise InvalidInput("path", f"is longer than {MAX_PATH_BYTES} bytes")
    if path == "":
        raise InvalidInput("path", "must not be the root: an edit sets one value inside")
    if not path.startswith("/"):
        raise InvalidInput("path", "is not a JSON Pointer (RFC 6901): it must start with '/'")
    tokens = [_unescape(token) for token in path[1:].split("/")]
    if tokens[-1] == "-":
        raise InvalidInput("path", "must not end in '-': appends are refused, name each entry")
    return tokens


def _unescape(token: str) -> str:
    out: list[str] = []
    chars = iter(token)
    for char in chars:
        if char != "~":
            out.append(char)
            continue
        escaped = next(chars, "")
        if escaped not in ("0", "1"):
            raise InvalidInput("path", "is not a JSON Pointer: '~' must be followed by 0 or 1")
        out.append("~" if escaped == "0" else "/")
    return "".join(out)
