"""How a store refusal is classified (ADR-0019, docs/design.md's refusal table).

A refusal counts as done only when it says the derived id is used and nothing
else: then an earlier attempt made the write. Every other refusal keeps the
store's code as its reason and gets a failure class that tells the caller
what to do.

An external store is not trusted with what it says: its refusal code becomes a
reason in the ledger, a field of log lines and a metrics label, so
:class:`RefusalVocabulary` lets through only codes of a bounded form, and only
a bounded number of distinct codes the sidecar does not know.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Set

from sidecar.errors import FailureClass
from sidecar.store_codes import ARCHIVED as ARCHIVED
from sidecar.store_codes import ID_USED, RefusalCode

# The code the core acts on itself (it re-reads and edits again), under the rule's name.
VERSION_CONFLICT = RefusalCode.VERSION_CONFLICT

# A VERSION_CONFLICT re-reads the artifact and edits again this many times
# within the attempt before the attempt fails to be retried.
VERSION_CONFLICT_REREADS = 3

_CLASSES: dict[str, FailureClass] = {
    RefusalCode.NOT_FOUND: FailureClass.REFUSED,
    RefusalCode.VALIDATION_FAILED: FailureClass.REFUSED,
    RefusalCode.PATCH_FAILED: FailureClass.REFUSED,
    RefusalCode.VERSION_CONFLICT: FailureClass.RETRYABLE,
    RefusalCode.FORBIDDEN: FailureClass.PERMANENT,
    RefusalCode.INVALID_STATE: FailureClass.PERMANENT,
}


def is_used_id_only(code: str, states: Set[str]) -> bool:
    """True when the refusal says only that the derived id is used."""
    return code == RefusalCode.INVALID_STATE and set(states) == {ID_USED}


def failure_class(code: str) -> FailureClass:
    """The failure class of a refusal that does not count as done.

    A code this table does not know is PERMANENT: retrying a refusal nobody
    understands would repeat it, and a run must not loop on it.
    """
    return _CLASSES.get(code, FailureClass.PERMANENT)


# What a refusal becomes when its code or a state is not of the form codes have.
STORE_REFUSAL_UNRECOGNIZED = "STORE_REFUSAL_UNRECOGNIZED"
STATE_UNRECOGNIZED = "STATE_UNRECOGNIZED"
# UPPER_SNAKE_CASE, as AIP-193 writes a reason, at most 64 characters.
_CODE_FORM = re.compile(r"[A-Z][A-Z0-9_]{0,63}")
KNOWN_CODES = frozenset(_CLASSES)
KNOWN_STATES = frozenset({ID_USED, ARCHIVED})
# Distinct well-formed codes beyond the known ones that one store client passes on (a
# sidecar has one): a store that makes codes up without end must not grow the metrics'
# label set without end.
MAX_OTHER_CODES = 16
MAX_STATES = 8
# A store's message reaches the caller and the logs: bounded, no control characters.
MAX_MESSAGE_CHARS = 1024
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


class RefusalVocabulary:
    """The refusal codes and states one sidecar passes on from a store.

    A known code passes. Another code passes when it has the form of a code and it is one
    of the first ``max_other`` such codes seen; any other code, a NUL or a newline in it, a
    lower-case or overlong one, becomes STORE_REFUSAL_UNRECOGNIZED, which is PERMANENT like
    any code the sidecar does not know. A malformed state becomes STATE_UNRECOGNIZED, never
    dropped: ``{ID_USED, <garbage>}`` must not read as a used id alone.
    """

    def __init__(self, max_other: int = MAX_OTHER_CODES) -> None:
        self._max_other = max_other
        self._other: set[str] = set()
        self._lock = threading.Lock()

    def code(self, raw: str) -> str:
        if raw in KNOWN_CODES:
            return raw
        if not _CODE_FORM.fullmatch(raw):
            return STORE_REFUSAL_UNRECOGNIZED
        with self._lock:
            if raw in self._other:
                return raw
            if len(self._other) < self._max_other:
                self._other.add(raw)
                return raw
        return STORE_REFUSAL_UNRECOGNIZED

    @staticmethod
    def states(raw: str) -> frozenset[str]:
        named = [s for s in raw.split(",") if s]
        states = {s if _CODE_FORM.fullmatch(s) else STATE_UNRECOGNIZED for s in named}
        if len(states) > MAX_STATES:
            states = {s for s in states if s in KNOWN_STATES} | {STATE_UNRECOGNIZED}
        return frozenset(states)

    @staticmethod
    def message(raw: str) -> str:
        cleaned = _CONTROL.sub(" ", raw)
        if len(cleaned) > MAX_MESSAGE_CHARS:
            return cleaned[:MAX_MESSAGE_CHARS] + "..."
        return cleaned
