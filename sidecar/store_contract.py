"""The store contract, spelled here and nowhere else: what a store answers, how it refuses,
and what each refusal means for the run.

`protos/actonce/store/v1/artifact_store.proto` says it on the wire: a store refuses with a gRPC
status whose `google.rpc.ErrorInfo` is in domain "store.actonce" and whose reason is one of the
codes below; an INVALID_STATE names in metadata["states"] every state that refused the write,
and a refusal whose only state is ID_USED means the write was already made.

Everything that speaks of a store's answers takes its words from here: the reference store
that gives them (`sidecar.refstore`), the clients that read them (`sidecar.upstream`), the core
that acts on them and the conformance kit that checks them. So:

- :class:`RefusalCode` is the refusal table: each code with the status it travels with and the
  failure class it gets when it does not count as done. Adding a code is one entry there.
  The status is a canonical code's name (google.rpc.Code), so that this module, the error tree
  and the core that read it speak no transport: the reference store's wire
  (`sidecar.refstore.wire`) and the gRPC front's status table (`sidecar.fronts.grpc.status`)
  turn it into gRPC's.
- :data:`ID_USED` and :data:`ARCHIVED` are the INVALID_STATE states the sidecar acts on, and
  :func:`counts_as_done` the one rule about them.
- :class:`StoredArtifact` and :class:`StoredMessage` are the records a store answers with;
  :class:`Owner` what a store says of a target's owner, and :class:`Principal` the rule a call
  acts for (with the other rule its grants let it reach), which a store checks the owner
  against (:func:`may_reach`, the one rule of ownership).
- :class:`Refusal` is a store's refusal on either side of the wire; :class:`StoreRefusal` the
  reference store's own, which only ever says what the contract allows.
- :class:`RefusalVocabulary` is the bounded form in which an untrusted store's code, states and
  message pass on to the ledger, the logs and the metrics.
"""

from __future__ import annotations

import enum
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from sidecar.errors import FailureClass, StoreRefused

__all__ = [
    "ARCHIVED",
    "ID_USED",
    "KNOWN_STATES",
    "OWNER",
    "STORE_DOMAIN",
    "Owner",
    "Principal",
    "Refusal",
    "RefusalCode",
    "RefusalVocabulary",
    "StoreRefusal",
    "StoredArtifact",
    "StoredMessage",
    "as_error",
    "counts_as_done",
    "failure_class",
    "may_reach",
    "status_code_for",
    "status_of",
]

STORE_DOMAIN = "store.actonce"

# The canonical status codes (google.rpc.Code) a store's refusal travels with, by name.
Status = Literal[
    "NOT_FOUND",
    "ABORTED",
    "INVALID_ARGUMENT",
    "FAILED_PRECONDITION",
    "PERMISSION_DENIED",
    "ALREADY_EXISTS",
]
_Class = FailureClass


class RefusalCode(enum.StrEnum):
    """The contract's refusal codes, each also its ErrorInfo reason: with the status code it
    travels with (on the store's wire, and from the sidecar to the agent alike) and the failure
    class of a refusal that does not count as done (ADR-0019, docs/design.md's table)."""

    status: Status
    failure_class: FailureClass

    def __new__(cls, value: str, status: Status, klass: FailureClass) -> RefusalCode:
        member = str.__new__(cls, value)
        member._value_ = value
        member.status = status
        member.failure_class = klass
        return member

    NOT_FOUND = "NOT_FOUND", "NOT_FOUND", _Class.REFUSED
    VERSION_CONFLICT = "VERSION_CONFLICT", "ABORTED", _Class.RETRYABLE
    VALIDATION_FAILED = "VALIDATION_FAILED", "INVALID_ARGUMENT", _Class.REFUSED
    PATCH_FAILED = "PATCH_FAILED", "FAILED_PRECONDITION", _Class.REFUSED
    FORBIDDEN = "FORBIDDEN", "PERMISSION_DENIED", _Class.PERMANENT
    INVALID_STATE = "INVALID_STATE", "FAILED_PRECONDITION", _Class.PERMANENT


# States of an INVALID_STATE refusal. The contract leaves the set open (PROPOSAL_CLOSED, ...);
# these are the ones the reference store reports and the sidecar acts on.
ID_USED = "ID_USED"
ARCHIVED = "ARCHIVED"
KNOWN_STATES = frozenset({ID_USED, ARCHIVED})
_KNOWN_CODES = {code.value: code for code in RefusalCode}


# -- the records ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoredArtifact:
    """An artifact as the store holds it; `data_json` is compact JSON text. `owner` is the
    rule whose run created it, empty for one made before owners were recorded."""

    id: str
    kind: str
    version: int
    data_json: str
    archived: bool
    owner: str = ""


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """One message of a thread; `seq` is its position in the thread, from 1."""

    id: str
    thread_id: str
    kind: str
    text: str
    seq: int


# -- ownership ---------------------------------------------------------------------------

# The metadata key of a FORBIDDEN refusal that names the target's owner.
OWNER = "owner"


@dataclass(frozen=True, slots=True)
class Principal:
    """The rule a call acts for, and the one other rule (``granted_owner``) whose artifact or
    thread the caller's grants let this call reach; empty when it reaches only its own."""

    rule: str
    granted_owner: str = ""


@dataclass(frozen=True, slots=True)
class Owner:
    """What a store says of a target's owner: the rule (empty: made before owners were
    recorded) and, for an artifact, its kind (empty for a thread)."""

    owner: str
    kind: str = ""


def may_reach(principal: Principal | None, owner: str) -> bool:
    """Whether a call acting for ``principal`` may reach data owned by ``owner``.

    A call without a principal (a caller from before ownership) and data without an owner
    (made before owners were recorded, until they are assigned) are not checked: a store
    keeps answering what it answered before. Otherwise the owner must be the principal's
    rule, or the other rule its caller's grants name."""
    if principal is None or not owner:
        return True
    return owner in (principal.rule, principal.granted_owner)


# -- refusals ----------------------------------------------------------------------------


class Refusal(Exception):
    """The store refused a call, and changed nothing: ``code`` is its refusal code (one this
    module knows, or another a store sent), ``states`` the states an INVALID_STATE names."""

    def __init__(self, code: str, message: str, states: frozenset[str] = frozenset()) -> None:
        super().__init__(code, message, states)
        self.code = code
        self.message = message
        self.states = states

    def __str__(self) -> str:
        if self.states:
            return f"{self.code} [{','.join(sorted(self.states))}]: {self.message}"
        return f"{self.code}: {self.message}"

    def __repr__(self) -> str:
        name = type(self).__name__
        return f"{name}({self.code!r}, {self.message!r}, states={sorted(self.states)!r})"


class StoreRefusal(Refusal):
    """The reference store's refusal: a code of the contract, and states exactly when it is an
    INVALID_STATE. A caller decides "already done" from the states, so a state on any other
    code, or an INVALID_STATE without one, would be a lie on the wire: it is never built."""

    code: RefusalCode

    def __init__(
        self, code: RefusalCode | str, message: str, *, states: Iterable[str] = ()
    ) -> None:
        known = _KNOWN_CODES.get(str(code))
        if known is None:
            raise ValueError(f"{code!r} is not a refusal code of the store contract")
        frozen = frozenset(states)
        if known is RefusalCode.INVALID_STATE and not frozen:
            raise ValueError("an INVALID_STATE refusal needs at least one state")
        if known is not RefusalCode.INVALID_STATE and frozen:
            raise ValueError(f"states are only for INVALID_STATE, not {known}")
        super().__init__(known, message, frozen)


def counts_as_done(refusal: Refusal) -> bool:
    """Whether the store refused only because the id is used: an earlier attempt made the
    write, and it counts as done (ALREADY_APPLIED). Any other refusal is an error."""
    return refusal.code == RefusalCode.INVALID_STATE and refusal.states == {ID_USED}


def failure_class(code: str) -> FailureClass:
    """The failure class of a refusal that does not count as done.

    A code this table does not know is PERMANENT: retrying a refusal nobody understands
    would repeat it, and a run must not loop on it.
    """
    known = _KNOWN_CODES.get(code)
    return known.failure_class if known is not None else FailureClass.PERMANENT


def status_of(code: str) -> Status:
    """The status a refusal ``code`` travels with, on the store's wire and from the sidecar
    to the agent alike; FAILED_PRECONDITION for a code this table does not know."""
    known = _KNOWN_CODES.get(code)
    return known.status if known is not None else "FAILED_PRECONDITION"


def status_code_for(refusal: Refusal) -> Status:
    """The status a store sends a refusal with: its code's, but ALREADY_EXISTS for an
    INVALID_STATE whose only state is ID_USED (the sidecar never answers with that one,
    since it counts as done)."""
    if counts_as_done(refusal):
        return "ALREADY_EXISTS"
    return status_of(refusal.code)


def as_error(refusal: Refusal) -> StoreRefused:
    """The error a refusal that does not count as done is answered with: its reason is the
    store's code, classed by the table (which a front also reads its status from,
    :func:`status_of`)."""
    metadata = {"states": ",".join(sorted(refusal.states))} if refusal.states else {}
    return StoreRefused(
        f"the store refused: {refusal.message}",
        reason=refusal.code,
        failure_class=failure_class(refusal.code),
        metadata=metadata,
    )


# -- what an untrusted store may say --------------------------------------------------------

# What a refusal becomes when its code or a state is not of the form codes have.
STORE_REFUSAL_UNRECOGNIZED = "STORE_REFUSAL_UNRECOGNIZED"
STATE_UNRECOGNIZED = "STATE_UNRECOGNIZED"
# UPPER_SNAKE_CASE, as AIP-193 writes a reason, at most 64 characters.
_CODE_FORM = re.compile(r"[A-Z][A-Z0-9_]{0,63}")
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

    An external store is not trusted with what it says: its refusal code becomes a reason in
    the ledger, a field of log lines and a metrics label. A known code passes. Another code
    passes when it has the form of a code and it is one of the first ``max_other`` such codes
    seen; any other code, a NUL or a newline in it, a lower-case or overlong one, becomes
    STORE_REFUSAL_UNRECOGNIZED, which is PERMANENT like any code the sidecar does not know. A
    malformed state becomes STATE_UNRECOGNIZED, never dropped: ``{ID_USED, <garbage>}`` must
    not read as a used id alone.
    """

    def __init__(self, max_other: int = MAX_OTHER_CODES) -> None:
        self._max_other = max_other
        self._other: set[str] = set()
        self._lock = threading.Lock()

    def code(self, raw: str) -> str:
        if raw in _KNOWN_CODES:
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
