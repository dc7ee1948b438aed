"""Derived ids (ADR-0019): a write's id is a pure function of what the write is.

An id depends on the scheme version, the write's type, the run, the attempt's
checkpoint, the write's identity and its occurrence, and on nothing else: not
on the attempt, the clock or the order of calls. A retried attempt that makes
the same writes in any order, or at once, gets the same ids, and the store's
refusal of a used id makes each write land once. docs/derived-ids.md is the
specification; docs/derived-id-vectors.json holds its test vectors.
"""

from __future__ import annotations

import base64
import enum
import hashlib

from sidecar.rules.canonical import canonical

# Changing anything below changes every id, which breaks retries across an
# upgrade; a new scheme gets a new version and old attempts keep the old one.
SCHEME_VERSION = 1
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


def post_identity(thread_id: str, text_digest: str) -> Identity:
    """A notice or message is its thread and the digest of its exact text."""
    return (thread_id, text_digest)


def thread_identity(title: str) -> Identity:
    """A thread is its title."""
    return (title,)


def step_identity(tool: str, args_digest: str) -> Identity:
    """A step is its tool and the digest of its canonical arguments."""
    return (tool, args_digest)


def derive_id(
    write_type: WriteType,
    *,
    run_id: str,
    checkpoint: str,
    identity: Identity,
    occurrence: int,
) -> str:
    """The id of the ``occurrence``-th write of ``identity`` in an attempt.

    The material is the RFC 8785 form of a JSON array, so that no choice of
    strings can make two different writes collide by concatenation.
    """
    if occurrence < 0:
        raise ValueError("occurrence counts from 0")
    material = canonical(
        [
            _DOMAIN_TAG,
            SCHEME_VERSION,
            write_type.value,
            run_id,
            checkpoint,
            list(identity),
            occurrence,
        ]
    )
    digest = hashlib.sha256(material).digest()
    encoded = base64.b32encode(digest).decode("ascii").lower()[:_ID_CHARS]
    return f"{PREFIXES[write_type]}_{encoded}"
