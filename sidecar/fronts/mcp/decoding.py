"""What a ``tools/call`` carries besides its arguments: its request identity, and the
duplicate keys the SDK's parser would silently drop.

A call's request identity, for harnesses that can set one, is
``_meta["actonce/request_id"]`` or the HTTP header ``actonce-request-id`` (given
both, they must agree). Without one, the core's repeat rule tells a repeat from a
new call (sidecar.core.requests).

The SDK parses the JSON-RPC body with a parser that keeps the last of duplicate
keys; the gRPC front refuses them (RFC 8785 needs I-JSON). The body, which the
SDK has read already, is parsed again here so that both fronts refuse alike.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sidecar.errors import InvalidArgument
from sidecar.rules import canonical

REQUEST_ID_META = "actonce/request_id"
REQUEST_ID_HEADER = "actonce-request-id"


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
    if len(identity.encode("utf-8", "surrogatepass")) > canonical.MAX_NAME_BYTES:
        raise InvalidArgument("request_id", f"is longer than {canonical.MAX_NAME_BYTES}")
    canonical.require_no_nul(identity, "request_id")
    return identity


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
