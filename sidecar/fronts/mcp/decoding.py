"""What a ``tools/call`` carries: its arguments, taken by the API's table, its request
identity, and the duplicate keys the SDK's parser would silently drop.

A tool's arguments are its RPC's request fields but those the harness binds
(``attempt_id``, ``request_id``), each taken by its kind in the table
(sidecar.fronts.operations), as the gRPC front takes the same field from a request
message: a JSON value is canonicalized here, once, into the JsonValue the core
takes. ``POST /attempts`` takes BeginAttempt's fields from its JSON body the same way.

A call's request identity, for harnesses that can set one, is
``_meta["actonce/request_id"]`` or the HTTP header ``actonce-request-id`` (given
both, they must agree). Without one, the core's repeat rule tells a repeat from a
new call (sidecar.core.attempts).

The SDK parses the JSON-RPC body with a parser that keeps the last of duplicate
keys; the gRPC front refuses them (RFC 8785 needs I-JSON). The body, which the
SDK has read already, is parsed again here so that both fronts refuse alike.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from sidecar.errors import InvalidArgument
from sidecar.fronts.operations import Field, Kind, Operation
from sidecar.rules import canonical
from sidecar.rules.canonical import Document, JsonValue

REQUEST_ID_META = "actonce/request_id"
REQUEST_ID_HEADER = "actonce-request-id"


# -- arguments --------------------------------------------------------------------------


def arguments(
    op: Operation,
    given: Mapping[str, Any],
    bound: Mapping[str, str],
    *,
    unknown: str = "is not an argument of this tool",
) -> dict[str, Any]:
    """The core method's keywords for ``op``: each field from ``given`` by its kind, in the
    request's order, and the fields the harness binds from ``bound``."""
    taken = {f.parameter for f in op.fields if not f.bound}
    for name in given:
        if name not in taken:
            raise InvalidArgument(name, unknown)
    _one_of_each_oneof(op, given)
    return {
        f.parameter: bound.get(f.name, "") if f.bound else _TAKE[f.kind](given, f)
        for f in op.fields
    }


def _one_of_each_oneof(op: Operation, given: Mapping[str, Any]) -> None:
    oneofs: dict[str, list[str]] = {}
    for f in op.fields:
        if f.oneof:
            oneofs.setdefault(f.oneof, []).append(f.parameter)
    for oneof, members in oneofs.items():
        if sum(name in given for name in members) > 1:
            raise InvalidArgument(oneof, f"name {_either(members)}, not both")


def _either(names: list[str]) -> str:
    return " or ".join(f"{'an' if name[0] in 'aeiou' else 'a'} {name}" for name in names)


def _text(given: Mapping[str, Any], f: Field) -> str | None:
    if f.oneof and f.parameter not in given:
        return None
    if f.parameter not in given:
        return ""  # missing: the core says what it needs of the field
    value = given[f.parameter]
    if not isinstance(value, str):
        # A null is no string either: taken as "left out", a scope of null would begin an
        # unscoped attempt, which fences the run's live delivery.
        kind = "null" if value is None else type(value).__name__
        raise InvalidArgument(f.parameter, f"must be a string, not {kind}")
    return value


def _json(given: Mapping[str, Any], f: Field) -> JsonValue:
    if f.parameter not in given:
        raise InvalidArgument(f.parameter, "is required: give it as a JSON value")
    return JsonValue.of(given[f.parameter], f.parameter)


def _document(given: Mapping[str, Any], f: Field) -> Document:
    if f.parameter not in given:
        raise InvalidArgument(f.parameter, "is required: give it as a JSON value")
    return Document.of(given[f.parameter], f.parameter)


def _flag(given: Mapping[str, Any], f: Field) -> bool:
    value = given.get(f.parameter, False)
    if not isinstance(value, bool):
        raise InvalidArgument(f.parameter, "must be true or false")
    return value


def _effect(given: Mapping[str, Any], f: Field) -> int:
    value = given.get(f.parameter, 0)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f.parameter, "must be a ToolEffect's number")
    return value


def _timestamp(given: Mapping[str, Any], f: Field) -> datetime | None:
    value = given.get(f.parameter)
    if value is None:
        if f.required:
            raise InvalidArgument(f.parameter, "must be set")
        return None
    if not isinstance(value, str):
        raise InvalidArgument(f.parameter, "must be an RFC 3339 timestamp")
    try:
        stamp = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidArgument(f.parameter, "must be an RFC 3339 timestamp") from None
    if stamp.tzinfo is None:
        raise InvalidArgument(f.parameter, "must name its time zone (e.g. Z)")
    return stamp


_TAKE: dict[Kind, Callable[[Mapping[str, Any], Field], Any]] = {
    Kind.TEXT: _text,
    Kind.OPTIONAL_TEXT: _text,
    Kind.NAME: _text,
    Kind.JSON: _json,
    Kind.DOCUMENT: _document,
    Kind.FLAG: _flag,
    Kind.EFFECT: _effect,
    Kind.TIMESTAMP: _timestamp,
}


# -- the call's identity and body -----------------------------------------------------


def request_identity(meta: Mapping[str, Any] | None, headers: Mapping[str, str] | None) -> str:
    """The call's request identity, or "" when it names none."""
    from_meta = (meta or {}).get(REQUEST_ID_META)
    if from_meta is not None and not isinstance(from_meta, str):
        raise InvalidArgument(f"_meta.{REQUEST_ID_META}", "must be a string")
    from_header = (headers or {}).get(REQUEST_ID_HEADER)
    if from_meta and from_header and from_meta != from_header:
        raise InvalidArgument(
            REQUEST_ID_HEADER, f"names another request than _meta.{REQUEST_ID_META}"
        )
    identity = from_meta or from_header or ""
    return canonical.require_request_id(identity)


class _Pairs(dict[str, Any]):
    """A JSON object as parsed, remembering the first key it held twice."""

    duplicated: str | None = None


def _keep_pairs(pairs: list[tuple[str, Any]]) -> _Pairs:
    obj = _Pairs()
    for key, value in pairs:
        if key in obj and obj.duplicated is None:
            obj.duplicated = key
        obj[key] = value
    return obj


def refuse_duplicate_keys(body: bytes) -> None:
    """INVALID_ARGUMENT naming the argument whose JSON holds a key twice, if any does."""
    try:
        message = json.loads(body, object_pairs_hook=_keep_pairs)
    except (ValueError, RecursionError):
        return  # the SDK has parsed it: what it refused never reaches a tool
    params = message.get("params") if isinstance(message, _Pairs) else None
    arguments = params.get("arguments") if isinstance(params, _Pairs) else None
    if not isinstance(arguments, _Pairs):
        return
    if arguments.duplicated is not None:
        raise InvalidArgument(arguments.duplicated, "is given twice")
    for name, value in arguments.items():
        key = _first_duplicate(value)
        if key is not None:
            raise InvalidArgument(name, f"is not valid JSON: duplicate key {key!r}")


def _first_duplicate(value: Any) -> str | None:
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, _Pairs):
            if node.duplicated is not None:
                return node.duplicated
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return None
