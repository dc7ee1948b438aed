"""Derived ids (ADR-0019): a write's id is a pure function of what the write is.

An id depends on the scheme version, the write's type, the run, the attempt's
scope and checkpoint, the write's identity and its occurrence, and on nothing
else: not on the attempt, the clock or the order of calls. A retried attempt that makes
the same writes in any order, or at once, gets the same ids, and the store's
refusal of a used id makes each write land once. A write the caller names by a key
of its own (version 3) is that key, not its data, and has no occurrence: the same
key is the same write, whatever else its data holds. docs/derived-ids.md is the
specification; docs/derived-id-vectors.json holds its test vectors.
"""

from __future__ import annotations

import base64
import enum
import hashlib
from typing import NotRequired, TypedDict, Unpack

from sidecar.errors import InvalidArgument
from sidecar.rules.canonical import canonical, require_no_nul

# Changing anything below changes ids, which breaks retries across an upgrade;
# a new scheme gets a new version, and a run keeps the version it began with.
# Version 2 keys an edit proposal to its value too, and puts an attempt's
# scope into its ids; every other write derives its version-1 id. Version 3
# adds writes named by a key the caller chooses; every write without one
# derives its version-2 id.
SCHEME_VERSION = 3
SCHEME_VERSIONS = (1, 2, 3)
KEYED_SCHEME = 3  # the first version whose runs take keys
MAX_KEY_BYTES = 255
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


# The write types a caller may name by a key of its own: what the key stands for
# beside it (a create's kind, a step's tool; a thread is its key alone).
KEYED_TYPES = frozenset(
    {WriteType.CREATE, WriteType.CREATE_PROPOSAL, WriteType.THREAD, WriteType.STEP}
)


def require_key(key: str, *, run_id: str, scheme: int) -> str:
    """A key the caller chose: 1 to :data:`MAX_KEY_BYTES` bytes of UTF-8 without NUL, in a
    run whose scheme takes keys. "" is no key. A run of version 1 or 2 refuses one: a
    sidecar of an earlier release, which a retry of such a run may reach during an upgrade,
    would ignore the key and derive another id; it refuses a version-3 run outright."""
    if not key:
        return key
    size = len(key.encode("utf-8", "surrogatepass"))
    if size > MAX_KEY_BYTES:
        raise InvalidArgument("key", f"is {size} bytes; the limit is {MAX_KEY_BYTES}")
    require_no_nul(key, "key")
    if scheme < KEYED_SCHEME:
        raise InvalidArgument(
            "key",
            f"run {run_id} derives its ids under scheme {scheme}, which has no keys: make "
            f"this write without a key, or begin the run anew on a sidecar with --id-scheme "
            f"{KEYED_SCHEME} (docs/derived-ids.md)",
        )
    return key


def keyed_create_identity(kind: str, key: str) -> Identity:
    """A create named by a key: its kind and the key, not its data."""
    return (kind, key)


def keyed_thread_identity(key: str) -> Identity:
    """A thread named by a key: the key, not its title."""
    return (key,)


def keyed_step_identity(tool: str, key: str) -> Identity:
    """A step named by a key: its tool and the key, not its arguments."""
    return (tool, key)


def material(
    write_type: WriteType,
    *,
    run_id: str,
    checkpoint: str,
    identity: Identity,
    occurrence: int,
    scope: str = "",
    scheme: int = 1,
    keyed: bool = False,
) -> bytes:
    """What an id hashes: the RFC 8785 form of a JSON array, so that no choice
    of strings can make two different writes collide by concatenation.

    Version 2 has a material of its own only where it differs from version 1
    (a scoped attempt, an edit proposal); any other write keeps the version-1
    material, so that ids without a scope do not change. Version 3 has one only for
    a ``keyed`` write, and it holds no occurrence: the key names one write.
    """
    if occurrence < 0:
        raise ValueError("occurrence counts from 0")
    if scheme not in SCHEME_VERSIONS:
        raise ValueError(f"unknown id scheme version {scheme}")
    if scheme == 1 and scope:
        raise ValueError("a scope has no version-1 form")
    if keyed:
        if scheme < KEYED_SCHEME or write_type not in KEYED_TYPES:
            raise ValueError(f"a {write_type.value} of version {scheme} takes no key")
        return canonical(
            [_DOMAIN_TAG, 3, write_type.value, run_id, scope, checkpoint, list(identity)]
        )
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
    keyed: NotRequired[bool]


def derive_id(write_type: WriteType, **parts: Unpack[IdParts]) -> str:
    """The id of the ``occurrence``-th write of ``identity`` in an attempt."""
    digest = hashlib.sha256(material(write_type, **parts)).digest()
    encoded = base64.b32encode(digest).decode("ascii").lower()[:_ID_CHARS]
    return f"{PREFIXES[write_type]}_{encoded}"
