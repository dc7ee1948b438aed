"""JSON as it comes from a model: strict parsing, limits, RFC 8785 digests.

Every JSON value a caller sends is checked here, once, where it enters: a gRPC
``*_json`` field's text is parsed, an MCP argument's value taken as it is, and
either becomes a :class:`JsonValue` (or a :class:`Document`) that carries its
canonical form and digest into the core. A value that could not be canonicalized
never reaches the ledger or the store.
Canonical form is RFC 8785 (JCS) through the ``rfc8785`` library: key order,
``1.0`` against ``1`` and escaping do not change a digest.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Self

import rfc8785

from sidecar.errors import InvalidArgument

# Documented limits (docs/limits.md). The transport's own limit is set well
# above these so that an oversized payload gets this clear error instead.
MAX_JSON_BYTES = 1 << 20  # 1 MiB of UTF-8 JSON text per field
MAX_JSON_DEPTH = 64  # nested arrays/objects
MAX_TEXT_BYTES = 64 << 10  # a notice's or message's text
MAX_NAME_BYTES = 512  # kind, title, ids, tool names, paths
SAFE_INTEGER = 2**53 - 1  # I-JSON's integers; beyond, a JSON number is a double


class _DuplicateKey(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    # json.loads accepts NaN, Infinity and -Infinity, which JSON does not.
    raise ValueError(f"{name} is not JSON")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # RFC 8785 needs I-JSON: with duplicate keys the canonical form is ambiguous.
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(f"duplicate key {key!r}")
        result[key] = value
    return result


def parse_json(text: str, field: str) -> Any:
    """Parse one ``*_json`` field strictly, or raise InvalidArgument naming it."""
    return parse_canonical(text, field)[0]


def parse_canonical(text: str, field: str) -> tuple[Any, bytes]:
    """Parse one ``*_json`` field strictly and return it with its canonical bytes.

    Parsing must canonicalize to know the value is I-JSON; handing the bytes
    back spares a write canonicalizing it again for its digest and its stored form.
    """
    if not text:
        raise InvalidArgument(field, "must be JSON text, got an empty string")
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_JSON_BYTES:
        raise InvalidArgument(field, f"is {size} bytes; the limit is {MAX_JSON_BYTES}")
    try:
        value = json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_no_duplicates)
    except RecursionError:
        raise InvalidArgument(field, f"nests deeper than {MAX_JSON_DEPTH} levels") from None
    except (ValueError, TypeError) as exc:
        raise InvalidArgument(field, f"is not valid JSON: {exc}") from None
    return _canonicalized(value, field)


def _canonicalized(value: Any, field: str) -> tuple[Any, bytes]:
    """``value`` within the depth limit, with its canonical bytes (the value may change:
    see :func:`as_doubles`)."""
    depth = _depth(value)
    if depth > MAX_JSON_DEPTH:
        raise InvalidArgument(field, f"nests {depth} levels; the limit is {MAX_JSON_DEPTH}")
    try:
        try:
            form = canonical(value)
        except rfc8785.IntegerDomainError:
            # Digits beyond 2^53 are accepted when they are what RFC 8785 writes for a
            # double: the store hands 6.06e16 back as "60600000000000000", and an agent that
            # sends a document it read must not be refused. Other large integers would be
            # rounded, and are refused.
            value = as_doubles(value)
            form = canonical(value)
    except (rfc8785.CanonicalizationError, UnicodeError, ValueError, TypeError) as exc:
        raise InvalidArgument(field, f"cannot be canonicalized (RFC 8785): {exc}") from None
    return value, form


@dataclass(frozen=True, slots=True)
class JsonValue:
    """A JSON value checked once, where it entered: the value, its RFC 8785 form and the
    form's digest. The core takes these, so that no JSON is parsed or canonicalized twice.

    :meth:`parse` reads the JSON text a gRPC ``*_json`` field carries; :meth:`of` takes a
    value a JSON front has parsed already (an MCP argument, an upstream's result). Either
    refuses, as InvalidArgument naming ``field``, what the other would refuse.
    """

    value: Any
    form: bytes
    digest: str

    @classmethod
    def parse(cls, text: str, field: str) -> Self:
        """Parse JSON text strictly (no duplicate keys, no NaN, within the limits)."""
        value, form = parse_canonical(text, field)
        return cls._checked(value, form, field)

    @classmethod
    def of(cls, value: Any, field: str) -> Self:
        """Take a parsed JSON value. Such a value has no text of its own: the size limit
        holds for its canonical form. Duplicate keys were the parser's to refuse (the MCP
        front reads its body again for them: sidecar.fronts.mcp.decoding)."""
        value, form = _canonicalized(value, field)
        if len(form) > MAX_JSON_BYTES:
            raise InvalidArgument(field, f"is {len(form)} bytes; the limit is {MAX_JSON_BYTES}")
        return cls._checked(value, form, field)

    @classmethod
    def _checked(cls, value: Any, form: bytes, field: str) -> Self:
        return cls(value, form, digest(form))

    @property
    def text(self) -> str:
        """The canonical form as text: what the store and the ledger keep."""
        return self.form.decode("utf-8")


class Document(JsonValue):
    """An artifact's data: a JSON value that must be an object.

    An artifact is a document edited one member at a time: the store contract refuses any
    other top level (VALIDATION_FAILED), and the sidecar says so first, before the write
    is audited, with the field named and how to send it instead.
    """

    __slots__ = ()

    @classmethod
    def _checked(cls, value: Any, form: bytes, field: str) -> Self:
        if not isinstance(value, dict):
            raise InvalidArgument(
                field,
                f"must be a JSON object, got {_json_kind(value)}: an artifact's data is a "
                "document whose members edits set. Wrap the value in an object, "
                'e.g. {"items": ...}',
            )
        return cls(value, form, digest(form))


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    return "null" if value is None else "a number"


def as_doubles(value: Any) -> Any:
    """``value`` with each integer beyond 2^53 that RFC 8785 writes for a double as that double.

    JSON has one number type. RFC 8785 writes an integral double of 2^53 or more as plain
    digits, which ``json.loads`` reads back as an int beyond the safe range; as the double it
    is, it canonicalizes as it did when it was written. Digits RFC 8785 would not write for
    that double (an exact integer from another writer) stay an int, which canonicalization
    refuses.
    """
    if isinstance(value, dict):
        return {key: as_doubles(item) for key, item in value.items()}
    if isinstance(value, list):
        return [as_doubles(item) for item in value]
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > SAFE_INTEGER:
        try:
            as_float = float(value)
        except OverflowError:
            return value
        return as_float if rfc8785.dumps(as_float) == str(value).encode() else value
    return value


def _depth(value: Any) -> int:
    # Iterative, so that a hostile document cannot exhaust the stack here.
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


def canonical(value: Any) -> bytes:
    """The RFC 8785 canonical UTF-8 bytes of a JSON value."""
    return bytes(rfc8785.dumps(value))


def digest(data: bytes) -> str:
    """Hex SHA-256: what logs and ids carry instead of payloads."""
    return hashlib.sha256(data).hexdigest()


def json_digest(value: Any) -> str:
    """Digest of a JSON value's canonical form."""
    return digest(canonical(value))


def text_digest(text: str) -> str:
    """Digest of a text's exact UTF-8 bytes (no normalization: ADR-0019)."""
    return digest(text.encode("utf-8", "surrogatepass"))


def compact(value: Any) -> str:
    """JSON text of a value as the store keeps it (canonical, so stable)."""
    return canonical(value).decode("utf-8")


def require_text(value: str, field: str, *, limit: int = MAX_TEXT_BYTES) -> str:
    """A non-empty string field within its byte limit, without NUL."""
    if not value:
        raise InvalidArgument(field, "must not be empty")
    require_no_nul(value, field)
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise InvalidArgument(field, f"is {size} bytes; the limit is {limit}")
    return value


def require_request_id(value: str) -> str:
    """A write's request_id: "" (the call names none) or at most :data:`MAX_NAME_BYTES` bytes
    of UTF-8, without NUL; the one check both fronts and every write share."""
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > MAX_NAME_BYTES:
        raise InvalidArgument("request_id", f"is {size} bytes; the limit is {MAX_NAME_BYTES}")
    return require_no_nul(value, "request_id")


def as_reason(text: str) -> str:
    """``text`` as a step's abort reason, the sidecar's own words on a failure: cut to
    :data:`MAX_NAME_BYTES` bytes of UTF-8 (ending in "...") and its NULs made spaces, never
    refused."""
    clean = text.replace("\x00", " ")
    encoded = clean.encode("utf-8", "replace")
    if len(encoded) <= MAX_NAME_BYTES:
        return clean
    return encoded[: MAX_NAME_BYTES - 3].decode("utf-8", "ignore") + "..."


def require_no_nul(value: str, field: str) -> str:
    """Refuse a NUL character: PostgreSQL text cannot hold one, and an audit event carrying
    it would fail the whole group commit it shares with other callers' events."""
    if "\0" in value:
        raise InvalidArgument(field, "must not contain a NUL character")
    return value


def require_name(value: str, field: str) -> str:
    """A non-empty identifier-like field (kind, title, ids, tool names)."""
    return require_text(value, field, limit=MAX_NAME_BYTES)
