"""Derived ids (docs/derived-ids.md, scheme version 1), as the sidecar derives them.

A write's id is a pure function of the scheme version, the write's type, the
run, the attempt's checkpoint, what the write is (its identity) and its
occurrence in the attempt. Deriving one here lets an agent know an id before
the write; the tests hold this module to the scheme's test vectors. An input
the sidecar refuses raises ``InvalidInput`` naming the field, as the sidecar's
refusal does (``actonce_client.inputs``).
"""

from __future__ import annotations

import base64
import enum
import hashlib
from collections.abc import Sequence
from typing import Any

import rfc8785

from actonce_client import inputs

SCHEME_VERSION = 1
_DOMAIN_TAG = "actonce/derived-id"
_ID_CHARS = 26  # base32 characters: 130 bits of SHA-256


class WriteType(enum.StrEnum):
    """A type of write; each has its own id space."""

    CREATE = "create"
    CREATE_PROPOSAL = "create_proposal"
    EDIT = "edit"
    EDIT_PROPOSAL = "edit_proposal"
    NOTICE = "notice"
    MESSAGE = "message"
    THREAD = "thread"
    STEP = "step"


_PREFIXES = {
    WriteType.CREATE: "art",
    WriteType.CREATE_PROPOSAL: "prp",
    WriteType.EDIT: "edt",
    WriteType.EDIT_PROPOSAL: "prp",
    WriteType.NOTICE: "msg",
    WriteType.MESSAGE: "msg",
    WriteType.THREAD: "thr",
    WriteType.STEP: "stp",
}


def derive_id(
    write_type: WriteType,
    *,
    run_id: str,
    checkpoint: str,
    identity: Sequence[str],
    occurrence: int,
) -> str:
    """The id of the ``occurrence``-th write of ``identity`` (from 0) in an attempt."""
    digest = hashlib.sha256(
        id_material(
            write_type,
            run_id=run_id,
            checkpoint=checkpoint,
            identity=identity,
            occurrence=occurrence,
        )
    ).digest()
    encoded = base64.b32encode(digest).decode("ascii").lower()[:_ID_CHARS]
    return f"{_PREFIXES[write_type]}_{encoded}"


def id_material(
    write_type: WriteType,
    *,
    run_id: str,
    checkpoint: str,
    identity: Sequence[str],
    occurrence: int,
) -> bytes:
    """What is hashed: the RFC 8785 form of a JSON array, so that no choice of
    strings can make two writes collide by concatenation."""
    if occurrence < 0:
        raise ValueError("occurrence counts from 0")
    inputs.name(run_id, "run_id")
    inputs.checkpoint(checkpoint)
    material: list[Any] = [
        _DOMAIN_TAG, SCHEME_VERSION, write_type.value, run_id, checkpoint, list(identity),
        occurrence,
    ]  # fmt: skip
    return bytes(rfc8785.dumps(material))


def create_identity(kind: str, data_json: str) -> tuple[str, str]:
    """A create is its kind and the digest of its data's canonical form."""
    inputs.name(kind, "kind")
    return (kind, _json_digest(data_json, "data_json"))


def edit_identity(artifact_id: str, path: str) -> tuple[str, str]:
    """An edit is its artifact and normalized path, not its value."""
    inputs.name(artifact_id, "artifact_id")
    return (artifact_id, normalize_path(path))


def post_identity(thread_id: str, text: str) -> tuple[str, str]:
    """A notice or message is its thread and the digest of its exact text."""
    inputs.name(thread_id, "thread_id")
    inputs.text(text, "text")
    return (thread_id, hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest())


def thread_identity(title: str) -> tuple[str]:
    """A thread is its title."""
    return (inputs.name(title, "title"),)


def step_identity(tool: str, args_json: str) -> tuple[str, str]:
    """A step is its tool and the digest of its arguments' canonical form."""
    inputs.name(tool, "tool")
    return (tool, _json_digest(args_json, "args_json"))


def normalize_path(path: str) -> str:
    """An RFC 6901 pointer re-encoded from its tokens: one spelling per path.

    The root, a last token ``-`` (append) and a bad escape raise InvalidInput (a
    ValueError) naming ``path``, as the sidecar refuses them.
    """
    tokens = inputs.pointer_tokens(path)
    return "".join("/" + token.replace("~", "~0").replace("/", "~1") for token in tokens)


def _json_digest(text: str, field: str) -> str:
    return hashlib.sha256(inputs.canonical_json(text, field)).hexdigest()
