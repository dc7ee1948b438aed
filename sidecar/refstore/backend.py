"""The reference store's records, and its input rules that do not depend on storage.

`sidecar.refstore.sql.StoreBackend` is what the gRPC servicer calls; a subclass per database
gives it its connections (`sqlite`, `postgres`). It knows nothing of gRPC: it takes and
returns plain values and frozen records (the contract's `StoredArtifact` and `StoredMessage`,
and the store's own below), refuses with the contract's `StoreRefusal`
(`sidecar.store_contract`), and raises `StoreUnavailableError` when its database cannot be
reached (a store on a local file never is unreachable).

The input rules that do not depend on storage (what valid JSON, a valid JSON Patch, a message
kind, a stored string, a page size and a page token are) live here, so that every call refuses
the same input with the same code.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import TypedDict, Unpack

import jsonpatch
import jsonpointer

from sidecar.store_contract import (
    Owner,
    Principal,
    RefusalCode,
    StoredArtifact,
    StoredMessage,
    StoreRefusal,
)

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "MAX_PAGE_SIZE",
    "MESSAGE_KINDS",
    "OWNED",
    "ArtifactPage",
    "Owner",
    "Principal",
    "StoreUnavailableError",
    "StoredArtifact",
    "StoredMessage",
    "StoredProposal",
    "StoredThread",
    "apply_patch",
    "compact_json",
    "decode_page_token",
    "encode_page_token",
    "page_size_for",
    "parse_document",
    "parse_json",
    "parse_patch",
    "require_text",
]

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000

# "notice" starts and steers no turn; "message" (made by send) asks for the thread's turn.
MESSAGE_KINDS = frozenset({"notice", "message"})

# What an owner is assigned to, by the command that assigns owners to data made before they
# were recorded (sidecar.refstore.owners).
OWNED = ("artifacts", "threads", "proposals")

_PATCH_OPS = frozenset({"add", "remove", "replace", "move", "copy", "test"})
_OPS_WITH_VALUE = frozenset({"add", "replace", "test"})
_OPS_WITH_FROM = frozenset({"move", "copy"})


class StoreUnavailableError(Exception):
    """The backend's database could not be reached, or went away during the call.

    Not a refusal: the call may succeed when retried, and derived ids make a retry safe. When
    the connection was lost while the transaction was committing, the write may have landed;
    a retry then meets ID_USED (or, for a patch, a version conflict), never a second copy.
    """


@dataclass(frozen=True, slots=True)
class ArtifactPage:
    """One page of a kind's artifacts in id order; `next_page_token` is empty on the last."""

    artifacts: tuple[StoredArtifact, ...]
    next_page_token: str


class ProposalFields(TypedDict, total=False):
    """A proposal's content: a create's kind and data_json, or an edit's artifact_id,
    patch_json and base_version (empty or 0 where not given)."""

    kind: str
    data_json: str
    artifact_id: str
    patch_json: str
    base_version: int


@dataclass(frozen=True, slots=True)
class StoredProposal:
    """A proposal as recorded.

    A proposed create has `kind` and `data_json`; a proposed edit has `artifact_id`,
    `patch_json` and `base_version`. The other form's fields are empty ("" and 0), as on the
    wire.
    """

    id: str
    kind: str
    data_json: str
    artifact_id: str
    patch_json: str
    base_version: int
    owner: str = ""

    @property
    def is_edit(self) -> bool:
        return bool(self.artifact_id)


@dataclass(frozen=True, slots=True)
class NewMessage:
    """A message to post: its id, its thread, its kind (`notice` or `message`), its text, and
    whether a turn request commits with it (a message's only)."""

    message_id: str
    thread_id: str
    kind: str
    text: str
    request_turn: bool = False


@dataclass(frozen=True, slots=True)
class StoredThread:
    """A thread; ``owner`` is the rule whose run made it, empty when made before owners were
    recorded."""

    id: str
    title: str
    owner: str = ""


def require_text(value: str, field: str) -> str:
    """Refuse an empty required string, or one holding a NUL character, with VALIDATION_FAILED.

    PostgreSQL text cannot hold NUL. Refusing it in every backend keeps the answers the same
    whichever database is behind the store, and means no stored id ever contains one, so a
    lookup by such an id is simply NOT_FOUND. (JSON text never holds a raw NUL: it is
    escaped as \\u0000 when documents are stored compact.)
    """
    if not value:
        raise StoreRefusal(RefusalCode.VALIDATION_FAILED, f"{field} must not be empty")
    if "\0" in value:
        raise StoreRefusal(
            RefusalCode.VALIDATION_FAILED, f"{field} must not contain a NUL character"
        )
    return value


def _reject_constant(name: str) -> object:
    # Python's json accepts NaN and Infinity, which are not JSON and which other languages'
    # parsers (and RFC 8785 digests) would choke on later.
    raise ValueError(f"{name} is not valid JSON")


def parse_json(text: str, field: str) -> object:
    """Parse strict JSON text (RFC 8259); VALIDATION_FAILED otherwise."""
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise StoreRefusal(RefusalCode.VALIDATION_FAILED, f"{field} is nested too deeply") from None
    except ValueError as error:
        # The message names the position, never the content: refusals reach logs.
        detail = error.msg if isinstance(error, json.JSONDecodeError) else str(error)
        position = f" at {error.pos}" if isinstance(error, json.JSONDecodeError) else ""
        raise StoreRefusal(
            RefusalCode.VALIDATION_FAILED, f"{field} is not valid JSON: {detail}{position}"
        ) from None


def parse_document(text: str, field: str) -> dict[str, object]:
    """Parse an artifact's data: strict JSON whose top level is an object.

    An artifact is a document edited one JSON Pointer path at a time; a bare number, string or
    array at the top would leave no member to name, so it is refused (VALIDATION_FAILED).
    """
    document = parse_json(text, field)
    if not isinstance(document, dict):
        raise StoreRefusal(RefusalCode.VALIDATION_FAILED, f"{field} must be a JSON object")
    return document


def compact_json(value: object) -> str:
    """The compact text a document is stored as (key order kept, non-ASCII kept)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _check_pointer(value: object, where: str) -> None:
    if not isinstance(value, str):
        raise StoreRefusal(RefusalCode.VALIDATION_FAILED, f"{where} must be a string")
    try:
        jsonpointer.JsonPointer(value)
    except jsonpointer.JsonPointerException as error:
        raise StoreRefusal(
            RefusalCode.VALIDATION_FAILED, f"{where} is not a JSON Pointer: {error}"
        ) from None


def parse_patch(patch_json: str, field: str = "patch_json") -> jsonpatch.JsonPatch:
    """Parse an RFC 6902 JSON Patch document; VALIDATION_FAILED when it is not one.

    The `jsonpatch` library only notices a missing `value` or `from` when it applies the
    patch, which would make a malformed document look like a patch that does not apply
    (PATCH_FAILED); so the structure is checked here, before anything is read.
    """
    document = parse_json(patch_json, field)
    if not isinstance(document, list):
        raise StoreRefusal(
            RefusalCode.VALIDATION_FAILED, f"{field} must be a JSON array of operations"
        )
    for index, operation in enumerate(document):
        where = f"{field}[{index}]"
        if not isinstance(operation, dict):
            raise StoreRefusal(RefusalCode.VALIDATION_FAILED, f"{where} must be an object")
        op = operation.get("op")
        if op not in _PATCH_OPS:
            raise StoreRefusal(
                RefusalCode.VALIDATION_FAILED,
                f"{where}.op must be one of {', '.join(sorted(_PATCH_OPS))}",
            )
        if "path" not in operation:
            raise StoreRefusal(RefusalCode.VALIDATION_FAILED, f"{where} has no path")
        _check_pointer(operation["path"], f"{where}.path")
        if op in _OPS_WITH_VALUE and "value" not in operation:
            raise StoreRefusal(RefusalCode.VALIDATION_FAILED, f"{where} ({op}) has no value")
        if op in _OPS_WITH_FROM:
            if "from" not in operation:
                raise StoreRefusal(RefusalCode.VALIDATION_FAILED, f"{where} ({op}) has no from")
            _check_pointer(operation["from"], f"{where}.from")
    try:
        return jsonpatch.JsonPatch(document)
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as error:
        raise StoreRefusal(
            RefusalCode.VALIDATION_FAILED, f"{field} is not a JSON Patch: {error}"
        ) from None


def apply_patch(patch: jsonpatch.JsonPatch, document: dict[str, object]) -> dict[str, object]:
    """Apply a parsed patch to a copy of `document`; PATCH_FAILED when it does not apply.

    A missing parent, a failed `test`, an index out of range, a move into its own child, or a
    result that is no longer an object: the patch is well-formed but does not fit the document.
    The refusal names the operation and its paths, never the document: the library's own
    message quotes the data, and a refusal reaches logs and callers.
    """
    try:
        patched: object = patch.apply(document, in_place=False)
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException):
        raise StoreRefusal(RefusalCode.PATCH_FAILED, _why_not(patch, document)) from None
    if not isinstance(patched, dict):
        raise StoreRefusal(
            RefusalCode.PATCH_FAILED, "the patch would leave the artifact's data not an object"
        )
    return patched


def _why_not(patch: jsonpatch.JsonPatch, document: object) -> str:
    """Which operation of a patch that does not apply fails, and on which path. Only called
    once the patch failed, so the hot path applies it once."""
    current = document
    for index, operation in enumerate(patch.patch):
        try:
            current = jsonpatch.JsonPatch([operation]).apply(current, in_place=False)
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException):
            return f"the patch does not apply: operation {index} ({_what(operation, current)})"
    return "the patch does not apply to the artifact's data"


def _what(operation: dict[str, str], document: object) -> str:
    op, path = operation["op"], operation["path"]
    if op in _OPS_WITH_FROM and not _exists(document, operation["from"]):
        return f"{op} from {operation['from']!r}, which the artifact does not have"
    if op in _OPS_WITH_FROM and path.startswith(operation["from"] + "/"):
        return f"{op} of {operation['from']!r} into its own member {path!r}"
    if op == "test" and _exists(document, path):
        return f"test of {path!r}: the artifact holds another value there"
    if op == "add" or op in _OPS_WITH_FROM:
        parent = path.rpartition("/")[0]
        if not _exists(document, parent):
            return f"{op} at {path!r}: the artifact has no {parent!r} to add it to"
        return f"{op} at {path!r}: {parent!r} has no place {path.rpartition('/')[2]!r}"
    return f"{op} at {path!r}, which the artifact does not have"


def _exists(document: object, path: str) -> bool:
    missing = object()
    try:
        return jsonpointer.resolve_pointer(document, path, missing) is not missing
    except jsonpointer.JsonPointerException:
        return False


def page_size_for(requested: int) -> int:
    """The page size to use: 0 means the default; above the maximum is lowered to it."""
    if requested < 0:
        raise StoreRefusal(RefusalCode.VALIDATION_FAILED, "page_size must not be negative")
    if requested == 0:
        return DEFAULT_PAGE_SIZE
    return min(requested, MAX_PAGE_SIZE)


def encode_page_token(kind: str, after_id: str) -> str:
    """An opaque token for the page after `after_id` in `kind`'s listing."""
    raw = json.dumps({"kind": kind, "after": after_id}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode("ascii")


def decode_page_token(kind: str, token: str) -> str | None:
    """The id a page token continues after, or None for the first page.

    The token carries its kind so that one from another listing is refused rather than
    silently paging through the wrong artifacts.
    """
    if not token:
        return None
    try:
        decoded = json.loads(base64.urlsafe_b64decode(token.encode("ascii")))
    except (ValueError, binascii.Error, UnicodeError):
        decoded = None
    if (
        not isinstance(decoded, dict)
        or not isinstance(decoded.get("after"), str)
        or "\0" in decoded["after"]
        or decoded.get("kind") != kind
    ):
        raise StoreRefusal(
            RefusalCode.VALIDATION_FAILED, "page_token is not a token of this listing"
        )
    after: str = decoded["after"]
    return after


def proposal_for(proposal_id: str, **fields: Unpack[ProposalFields]) -> StoredProposal:
    """A proposal's fields checked and normalized, as every backend records them."""
    kind, data_json = fields.get("kind", ""), fields.get("data_json", "")
    artifact_id, patch_json = fields.get("artifact_id", ""), fields.get("patch_json", "")
    base_version = fields.get("base_version", 0)
    require_text(proposal_id, "proposal_id")
    is_create = bool(kind or data_json)
    is_edit = bool(artifact_id or patch_json or base_version)
    if is_create == is_edit:
        raise StoreRefusal(
            RefusalCode.VALIDATION_FAILED,
            "a proposal is either a create (kind, data_json) or an edit"
            " (artifact_id, patch_json, base_version), exactly one",
        )
    if is_create:
        require_text(kind, "kind")
        data_json = compact_json(parse_document(data_json, "data_json"))
    else:
        require_text(artifact_id, "artifact_id")
        patch_json = compact_json(parse_patch(patch_json).patch)
        if base_version < 1:
            raise StoreRefusal(
                RefusalCode.VALIDATION_FAILED, "base_version must be a version (from 1)"
            )
    return StoredProposal(
        id=proposal_id,
        kind=kind,
        data_json=data_json,
        artifact_id=artifact_id,
        patch_json=patch_json,
        base_version=base_version,
    )
