"""Derived ids (docs/derived-ids.md, scheme versions 1 to 3), as the sidecar derives them.

A write's id is a pure function of the scheme version, the write's type, the
run, the attempt's scope and checkpoint, what the write is (its identity) and
its occurrence in the attempt. An attempt's version and scope are
``Attempt.id_scheme_version`` and ``Attempt.scope``. Deriving one here lets an
agent know an id before the write; the tests hold this module to the scheme's
test vectors. An input the sidecar refuses raises ``InvalidInput`` naming the
field, as the sidecar's refusal does (``actonce_client.inputs``). A write named by a
key the caller chose (version 3) is its key, not its data, and has no occurrence:
``keyed_create_identity`` and the others, with ``keyed=True``.
"""

from __future__ import annotations

import base64
import enum
import hashlib
from collections.abc import Sequence
from typing import Any

import rfc8785

from actonce_client import inputs

# The newest version; a run keeps the version it began with, which the sidecar
# names when an attempt begins. Version 2 keys an edit proposal to its value
# too and puts a scoped attempt's scope into its ids; every other write keeps
# its version-1 id. Version 3 adds writes named by a key the caller chooses;
# every write without one keeps its version-2 id.
SCHEME_VERSION = 3
SCHEME_VERSIONS = (1, 2, 3)
KEYED_SCHEME = 3  # the first version whose runs take keys
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


# The write types a key can name.
KEYED_TYPES = frozenset(
    {WriteType.CREATE, WriteType.CREATE_PROPOSAL, WriteType.THREAD, WriteType.STEP}
)

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
    scope: str = "",
    scheme: int = 1,
    keyed: bool = False,
) -> str:
    """The id of the ``occurrence``-th write of ``identity`` (from 0) in an attempt; a
    ``keyed`` write's (its identity holds its key) whatever its occurrence."""
    digest = hashlib.sha256(
        id_material(
            write_type,
            run_id=run_id,
            checkpoint=checkpoint,
            identity=identity,
            occurrence=occurrence,
            scope=scope,
            scheme=scheme,
            keyed=keyed,
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
    scope: str = "",
    scheme: int = 1,
    keyed: bool = False,
) -> bytes:
    """What is hashed: the RFC 8785 form of a JSON array, so that no choice of
    strings can make two writes collide by concatenation. Version 2 has a
    material of its own only for a scoped attempt or an edit proposal; any
    other write keeps its version-1 material. Version 3 has one only for a
    ``keyed`` write, without its occurrence."""
    if occurrence < 0:
        raise ValueError("occurrence counts from 0")
    if scheme not in SCHEME_VERSIONS:
        raise ValueError(f"unknown id scheme version {scheme}")
    inputs.name(run_id, "run_id")
    if scope:
        if scheme == 1:
            raise ValueError("a scope has no version-1 form")
        inputs.name(scope, "scope")
    inputs.checkpoint(checkpoint)
    material: list[Any]
    if keyed:
        if scheme < KEYED_SCHEME or write_type not in KEYED_TYPES:
            raise ValueError(f"a {write_type.value} of version {scheme} takes no key")
        material = [_DOMAIN_TAG, 3, write_type.value, run_id, scope, checkpoint, list(identity)]
    elif scheme == 1 or (not scope and write_type is not WriteType.EDIT_PROPOSAL):
        material = [_DOMAIN_TAG, 1, write_type.value, run_id, checkpoint, list(identity),
                    occurrence]  # fmt: skip
    else:
        material = [_DOMAIN_TAG, 2, write_type.value, run_id, scope, checkpoint, list(identity),
                    occurrence]  # fmt: skip
    return bytes(rfc8785.dumps(material))


def create_identity(kind: str, data_json: str) -> tuple[str, str]:
    """A create is its kind and the digest of its data's canonical form."""
    inputs.name(kind, "kind")
    return (kind, _json_digest(data_json, "data_json"))


def keyed_create_identity(kind: str, key: str, *, scheme: int) -> tuple[str, str]:
    """A create named by a key: its kind and the key, not its data."""
    inputs.name(kind, "kind")
    return (kind, inputs.key(key, scheme=scheme))


def keyed_thread_identity(key: str, *, scheme: int) -> tuple[str]:
    """A thread named by a key: the key, not its title."""
    return (inputs.key(key, scheme=scheme),)


def keyed_step_identity(tool: str, key: str, *, scheme: int) -> tuple[str, str]:
    """A step named by a key: its tool and the key, not its arguments."""
    inputs.name(tool, "tool")
    return (tool, inputs.key(key, scheme=scheme))


def edit_identity(artifact_id: str, path: str) -> tuple[str, str]:
    """An edit is its artifact and normalized path, not its value."""
    inputs.name(artifact_id, "artifact_id")
    return (artifact_id, normalize_path(path))


def edit_proposal_identity(
    artifact_id: str, path: str, value_json: str, *, scheme: int
) -> tuple[str, ...]:
    """An edit proposal: its artifact and normalized path, and from version 2
    the digest of the value it proposes (a draft for review: another value is
    another proposal)."""
    identity = edit_identity(artifact_id, path)
    if scheme == 1:
        return identity
    return (*identity, _json_digest(value_json, "value_json"))


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
