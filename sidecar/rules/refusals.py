"""How a store refusal is classified (ADR-0019, docs/design.md's refusal table).

A refusal counts as done only when it says the derived id is used and nothing
else: then an earlier attempt made the write. Every other refusal keeps the
store's code as its reason and gets a failure class that tells the caller
what to do.
"""

from __future__ import annotations

from collections.abc import Set

from sidecar.errors import FailureClass

NOT_FOUND = "NOT_FOUND"
VERSION_CONFLICT = "VERSION_CONFLICT"
VALIDATION_FAILED = "VALIDATION_FAILED"
PATCH_FAILED = "PATCH_FAILED"
FORBIDDEN = "FORBIDDEN"
INVALID_STATE = "INVALID_STATE"

ID_USED = "ID_USED"
ARCHIVED = "ARCHIVED"

# A VERSION_CONFLICT re-reads the artifact and edits again this many times
# within the attempt before the attempt fails to be retried.
VERSION_CONFLICT_REREADS = 3

_CLASSES: dict[str, FailureClass] = {
    NOT_FOUND: FailureClass.REFUSED,
    VALIDATION_FAILED: FailureClass.REFUSED,
    PATCH_FAILED: FailureClass.REFUSED,
    VERSION_CONFLICT: FailureClass.RETRYABLE,
    FORBIDDEN: FailureClass.PERMANENT,
    INVALID_STATE: FailureClass.PERMANENT,
}


def is_used_id_only(code: str, states: Set[str]) -> bool:
    """True when the refusal says only that the derived id is used."""
    return code == INVALID_STATE and set(states) == {ID_USED}


def failure_class(code: str) -> FailureClass:
    """The failure class of a refusal that does not count as done.

    A code this table does not know is PERMANENT: retrying a refusal nobody
    understands would repeat it, and a run must not loop on it.
    """
    return _CLASSES.get(code, FailureClass.PERMANENT)
