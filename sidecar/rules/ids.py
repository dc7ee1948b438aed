"""Derived ids (ADR-0019): a write's id is a pure function of what the write is.

An id depends on the scheme version, the write's type, the run, the attempt's
scope and checkpoint, the write's identity and its occurrence, and on nothing
else: not on the attempt, the clock or the order of calls. A retried attempt that makes
the same writes in any order, or at once, gets the same ids, and the store's
refusal of a used id makes each write land once. docs/derived-ids.md is the
specification; docs/derived-id-vectors.json holds its test vectors.
"""

from __future__ import annotations

import base64
import enum
import hashlib
from typing import NotRequired, TypedDict, Unpack

from sidecar.rules.canonical import canonical

# Changing anything below changes ids, which breaks retries across an upgrade;
# a new scheme gets a new version, and a run keeps the version it began with.
# Version 2 keys an edit proposal to its value too, and puts an attempt's
# scope into its ids; every other write derives its version-1 id.
SCHEME_VERSION = 2
SCHEME_VERSIONS = (1, 2)
_DOMAIN_TAG = "actonce/derived-id"
_ID_CHARS = 26  # base32 characters: 130 bits of SHA-256


class WriteType(enum.StrEnum):
    """The types of write that get derived ids; each has its own id space."""

    CREATE = "create"
    CREATE_PROPOSAL = "create_proposal"
    EDIT = "edit"
    EDIT_PROPOSAL = "edit_proposal"
    NOTICE = "notice"
    MESSAGE = "message"
    THREAD = "thread"
    STEP = "step"


PREFIXES: dict[WriteType, str] = {
    WriteType.CREATE: "art",
    WriteType.CREATE_PROPOSAL: "prp",
    WriteType.EDIT: "edt",
    WriteType.EDIT_PROPOSAL: "prp",
    WriteType.NOTICE: "msg",
    WriteType.MESSAGE: "msg",
    WriteType.THREAD: "thr",
    WriteType.STEP: "stp",
}

Identity = tuple[str, ...]


def create_identity(kind: str, data_digest: str) -> Identity:
    """A create is its kind and the digest of its canonical data."""
    return (kind, data_digest)


def edit_identity(artifact_id: str, normalized_path: str) -> Identity:
    """An edit is its artifact and its normalized JSON Pointer, not its value."""
    return (artifact_id, normalized_path)


def edit_proposal_identity(
    artifact_id: str, normalized_path: str, value_digest: str, *, scheme: int
) -> Identity:
    """An edit proposal: from version 2, also the digest of the value it proposes.

    A proposal is a draft for review, so another draft is another proposal and
    the same draft is proposed once; a direct edit stays keyed by its path.
    """
    if scheme == 1:
        return (artifact_id, normalized_path)
    return (artifact_id, normalized_path, value_digest)


def post_identity(thread_id: str, text_digest: str) -> Identity:
    """A notice or message is its thread and the digest of its exact text."""
    return (thread_id, text_digest)


def thread_identity(title: str) -> Identity:
    """A thread is its title."""
    return (title,)


def step_identity(tool: str, args_digest: str) -> Identity:
    """A step is its tool and the digest of its canonical arguments."""
    return (tool, args_digest)


def material(
    write_type: WriteType,
    *,
    run_id: str,
    checkpoint: str,
    identity: Identity,
    occurrence: int,
    scope: str = "",
    scheme: int = 1,
) -> bytes:
    """What an id hashes: the RFC 8785 form of a JSON array, so that no choice
    of strings can make two different writes collide by concatenation.

    Version 2 has a material of its own only where it differs from version 1
    (a scoped attempt, an edit proposal); any other write keeps the version-1
    material, so that ids without a scope do not change.
    """
    if occurrence < 0:
        raise ValueError("occurrence counts from 0")
    if scheme not in SCHEME_VERSIONS:
        raise ValueError(f"unknown id scheme version {scheme}")
    if scheme == 1 and scope:
        raise ValueError("a scope has no version-1 form")
    if scheme == 1 or (not scope and write_type is not WriteType.EDIT_PROPOSAL):
        return canonical(
            [_DOMAIN_TAG, 1, write_type.value, run_id, checkpoint, list(identity), occurrence]
        )
    return canonical(
        [_DOMAIN_TAG, 2, write_type.value, run_id, scope, checkpoint, list(identity), occurrence]
    )


class IdParts(TypedDict):
    """What names a write besides its type: :func:`material`'s keywords."""

    run_id: str
    checkpoint: str
    identity: Identity
    occurrence: int
    scope: NotRequired[str]
    scheme: NotRequired[int]


def derive_id(write_type: WriteType, **parts: Unpack[IdParts]) -> str:
    """The id of the ``occurrence``-th write of ``identity`` in an attempt."""
    digest = hashlib.sha256(material(write_type, **parts)).digest()
    encoded = base64.b32encode(digest).decode("ascii").lower()[:_ID_CHARS]
    return f"{PREFIXES[write_type]}_{encoded}"
