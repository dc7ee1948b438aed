"""The audit ledger's interface and its event.

A write's intent is appended before the store is called and its outcome
before the answer is sent; ``append`` returns only once the event is durable
(fsync'd or committed). Each event carries a hash over its content and the
previous event's hash, so that an edited, deleted or reordered event shows.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

GENESIS_HASH = "0" * 64


class LedgerError(Exception):
    """The ledger could not make an event durable (or could not be reached)."""


class FencedError(LedgerError):
    """An intent of an attempt that a newer attempt of its run and scope has fenced.

    Checked in the same transaction that would make the intent durable, so a
    fenced attempt's write never reaches the store, on any sidecar that
    shares the ledger.
    """


class RunRuleError(LedgerError):
    """An attempt of a run begun under another rule than the run's: refused, unwritten.

    A run belongs to the rule of its first attempt. The binding is read and made in the
    same transaction that would make the attempt's begin durable, so two sidecars
    beginning one run under two rules at once cannot both win.
    """

    def __init__(self, run_id: str, rule: str, run_rule: str) -> None:
        super().__init__(f"run {run_id} belongs to rule {run_rule!r}, not {rule!r}")
        self.run_id = run_id
        self.rule = rule
        self.run_rule = run_rule


class Phase:
    """What an event records."""

    ATTEMPT_BEGIN = "attempt_begin"
    ATTEMPT_END = "attempt_end"
    INTENT = "intent"  # a write is about to be tried
    OUTCOME = "outcome"  # how a write ended: outcome, or reason and failure class
    READ = "read"  # a read, audited fail-soft
    STEP_BEGIN = "step_begin"
    STEP_END = "step_end"
    STEP_ABORT = "step_abort"  # the agent declares a begun step's effect did not happen
    # A begun step's call failed after it was sent, or its tool answered an error: it may
    # have acted, and it did not end (a later attempt never takes it for done).
    STEP_FAILED = "step_failed"
    # The ledger's leave to send a begun step's call (sidecar.ledger.permits): granted
    # atomically against fencing, the lease by the ledger's clock, and operators' decisions.
    STEP_PERMIT = "step_permit"
    LEASE = "lease"  # an attempt's lease was extended
    DECISION = "decision"  # an operator's decision on what needs a person


# Events whose attempt must still be the newest of its (run, scope) to be written, or, for a
# step's end, written marked (FENCED_END): a fenced attempt's result must not become the one
# later attempts replay (a model's answer recorded by a stale delivery would give a
# redelivery other tool calls than those the newer delivery made), so its step stays as the
# newer attempt leaves it: a later attempt runs it again. But the end is recorded, since the
# tool acted; and a non-idempotent step's end is written plain (see fences()).
FENCED_PHASES = frozenset({Phase.INTENT, Phase.STEP_BEGIN, Phase.STEP_PERMIT, Phase.STEP_END})
NON_IDEMPOTENT = "NON_IDEMPOTENT_WRITE"
# Events of a scoped attempt that names its delivery (an unscoped attempt of its run), whose
# delivery must still be the run's newest unscoped attempt to be written: its begin too.
DELIVERY_FENCED_PHASES = FENCED_PHASES | {Phase.ATTEMPT_BEGIN}
# The detail key that marks a step's end written by a fenced attempt: recorded, since the
# tool acted, but never the result later attempts replay.
FENCED_END = "fenced"
# Where an event of a scoped attempt names its delivery: the detail key.
DELIVERY_KEY = "delivery_attempt_id"


@dataclass(frozen=True)
class AuditEvent:
    """One ledger entry. Digests, never payloads, except a step's result,
    which a later attempt must be able to return."""

    run_id: str
    attempt_id: str
    rpc: str
    phase: str
    rule: str = ""
    checkpoint: str = ""
    write_type: str = ""
    derived_id: str = ""
    request_id: str = ""
    occurrence: int = -1
    digest: str = ""
    outcome: str = ""
    reason: str = ""
    failure_class: str = ""
    detail: dict[str, Any] = field(default_factory=dict)
    # The attempt's scope within its run; empty for an unscoped attempt.
    scope: str = ""
    # The trace (32 hex digits) and span (16) of the call that wrote the event, when the
    # sidecar traces (sidecar.ops.tracing); empty otherwise.
    trace_id: str = ""
    span_id: str = ""


_EVENT_FIELDS = tuple(f.name for f in fields(AuditEvent))
# Fields added after ledgers existed: hashed only when set, so that every
# event written before them keeps its hash and `audit verify` still passes.
# The trace ids are hashed when set, like the rest of an event: an edit that
# pointed an event at another trace would mislead whoever follows the link.
_HASHED_WHEN_SET = frozenset({"scope", "trace_id", "span_id"})


@dataclass(frozen=True)
class RunSummary:
    """One run as the ledger saw it (``actonce audit list``)."""

    run_id: str
    rule: str
    attempts: int
    events: int
    first_ts: str
    last_ts: str


@dataclass(frozen=True)
class StoredEvent:
    """An event as the ledger holds it: numbered, timestamped, chained."""

    seq: int
    ts: str
    event: AuditEvent
    prev_hash: str
    hash: str
    # The chain the event was appended to (sidecar.ledger.sql.chain_of): prev_hash links to the
    # event before it in that chain.
    chain: int = 0


@dataclass(frozen=True)
class Checkpoint:
    """What one prune recorded: the last event it removed (number and hash), and how many
    it removed, which ran from the event after the checkpoint before it."""

    seq: int
    hash: str
    events: int
    chain: int = 0
    # The checkpoint (of the same chain) this prune went on from, where the prune recorded
    # it: a chain's numbers have gaps in a ledger of many chains.
    follows: int | None = None

    @property
    def after(self) -> int:
        """The last event of the chain before what this prune removed."""
        return self.seq - self.events if self.follows is None else self.follows


def event_hash(seq: int, ts: str, event: AuditEvent, prev_hash: str, chain: int = 0) -> str:
    """The chain hash of an event: over its number, time, content, chain and predecessor.

    Chain 0 is hashed without naming it, as every event was before a ledger had chains:
    a ledger's history from then is chain 0's, its hashes unchanged."""
    # The fields as asdict() gives them, without its deep copy: the JSON is the same.
    content = {
        name: getattr(event, name)
        for name in _EVENT_FIELDS
        if name not in _HASHED_WHEN_SET or getattr(event, name)
    }
    if chain:
        content["chain"] = chain
    body = json.dumps(
        {"seq": seq, "ts": ts, **content},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=True,
    )
    return hashlib.sha256((prev_hash + body).encode("ascii")).hexdigest()


# A fencing key: the run, and the attempt's scope ("" for unscoped attempts, a run's deliveries).
RunScope = tuple[str, str]


def delivery_of(event: AuditEvent) -> str:
    """The delivery an event's scoped attempt belongs to, or "" when it names none."""
    return str(event.detail.get(DELIVERY_KEY, "")) if event.scope else ""


def fences(event: AuditEvent, phases: frozenset[str] = FENCED_PHASES) -> bool:
    """Whether ``event`` is written only while its attempt is the newest. A non-idempotent
    step's end is written whoever ends it: its tool acted, once, and a later attempt must
    get that result rather than find the step in doubt."""
    if event.phase not in phases:
        return False
    return not (event.phase == Phase.STEP_END and event.detail.get("effect") == NON_IDEMPOTENT)


def fencing_keys(event: AuditEvent) -> list[RunScope]:
    """The (run, scope) pairs whose newest attempt decides whether ``event`` is written."""
    keys: list[RunScope] = []
    if fences(event):
        keys.append((event.run_id, event.scope))
    if delivery_of(event) and fences(event, DELIVERY_FENCED_PHASES):
        keys.append((event.run_id, ""))
    return keys


def fenced(event: AuditEvent, newest: Callable[[RunScope], str | None]) -> FencedError | None:
    """The refusal of ``event`` if its attempt is no longer the newest of its (run,
    scope), or if it names a delivery that is no longer its run's newest unscoped attempt
    (``newest`` gives the newest attempt of a pair, None when none began); attempts of
    other scopes never fence it."""
    if fences(event):
        newest_attempt = newest((event.run_id, event.scope))
        if newest_attempt not in (None, event.attempt_id):
            scope = f" scope {event.scope!r}" if event.scope else ""
            return FencedError(
                f"attempt {event.attempt_id} of run {event.run_id}{scope} was fenced by a "
                f"newer attempt {newest_attempt}"
            )
    delivery = delivery_of(event)
    if delivery and fences(event, DELIVERY_FENCED_PHASES):
        newest_delivery = newest((event.run_id, ""))
        if newest_delivery != delivery:
            found = f"newer delivery {newest_delivery}" if newest_delivery else "no delivery"
            return FencedError(
                f"attempt {event.attempt_id} of run {event.run_id} belongs to delivery "
                f"{delivery}, which is not the run's newest: the ledger has {found}"
            )
    return None


def other_rule(event: AuditEvent, run_rules: dict[str, str]) -> RunRuleError | None:
    """The refusal of a begin ``event`` whose run belongs to another rule; else None, and
    a run the ledger has not bound yet is bound to the event's rule in ``run_rules``."""
    bound = run_rules.setdefault(event.run_id, event.rule)
    return None if bound == event.rule else RunRuleError(event.run_id, event.rule, bound)


class AuditLedger(Protocol):
    """What the sidecar needs of a ledger backend."""

    async def append(self, event: AuditEvent) -> int:
        """Make ``event`` durable and return its sequence number; LedgerError if
        not, FencedError if a newer attempt of its run began (intents only),
        RunRuleError if its run belongs to another rule (begins only)."""
        ...

    async def events_for(self, derived_id: str) -> list[StoredEvent]:
        """Every event that names ``derived_id``, oldest first; LedgerError if unreadable."""
        ...

    async def first_attempt(self, run_id: str, scope: str) -> AuditEvent | None:
        """The begin event of the earliest attempt of (run, scope), or None when
        the ledger holds none; LedgerError if unreadable."""
        ...

    async def ping(self) -> None:
        """Raise LedgerError unless the ledger answers."""
        ...

    async def close(self) -> None:
        """Flush what is pending and release the backend."""
        ...


class LedgerReader(Protocol):
    """Read access for operators (``actonce audit``): never writes."""

    def runs(self) -> list[RunSummary]:
        """Every run in the ledger, most recent first."""
        ...

    def events(
        self, *, run_id: str | None = None, after: int = 0, chain: int | None = None
    ) -> Iterator[StoredEvent]:
        """Events in sequence order, all, one run's or one chain's, from after ``after``."""
        ...

    def count(self) -> int:
        """How many events the ledger holds."""
        ...

    def heads(self) -> dict[int, tuple[int, str]]:
        """Each chain's head as the ledger recorded it: last sequence number and hash."""
        ...

    def head(self) -> tuple[int, str]:
        """The newest of the chains' heads: the ledger's newest event's number and hash."""
        ...

    def checkpoint(self, chain: int = 0) -> tuple[int, str]:
        """Where ``chain`` as the ledger holds it begins: the sequence number and hash of
        the last event of it the newest prune removed, or (0, GENESIS_HASH) if none was."""
        ...

    def checkpoints(self) -> list[Checkpoint]:
        """Every prune's checkpoint, oldest first."""
        ...

    def first_seq(self, chain: int | None = None) -> int | None:
        """The number of the oldest event the ledger (or ``chain``) still holds; None when
        it holds none."""
        ...

    def snapshot(self) -> AbstractContextManager[None]:
        """Within it, every read sees the ledger as it was at one moment, whatever is
        appended meanwhile: the chain and its recorded head then agree on a live ledger."""
        ...

    def close(self) -> None: ...
