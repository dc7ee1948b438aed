"""The ledger's table, shared by its SQL backends: columns, rows, and their codec.

Both backends store the same row for an event, so that ``actonce audit`` reads
and verifies either the same way; only the dialect's types differ.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sidecar.ledger import liveness
from sidecar.ledger.base import (
    FENCED_END,
    GENESIS_HASH,
    AuditEvent,
    LedgerError,
    Phase,
    RunScope,
    StoredEvent,
    event_hash,
    fenced,
    fencing_keys,
    other_rule,
)

# The chains of a PostgreSQL ledger created or migrated without ``--chains``: enough that
# the runs a fleet appends to at one moment seldom share one (8 runs at once make 28 pairs:
# 0.22 pairs on one chain expected among 128 chains, 1.75 among 16; a shared chain is a
# batch waiting on another), few enough that verify's walk per chain stays cheap (a query
# per chain) and the heads stay one small table.
POSTGRES_CHAINS = 128
# The most a ledger may have: each append locks its chains' rows, and verify walks each.
MAX_CHAINS = 1024


def chain_of(run_id: str, chains: int) -> int:
    """The chain of ``run_id``'s events in a ledger of ``chains`` chains.

    A ledger holds a fixed number of hash chains, recorded in it (one head row per chain in
    ``audit_chains``) when it is created or migrated, so that every sidecar sharing it
    agrees. A run's events all go to one chain, picked by a stable hash of its run id:
    everything an append reads under its chain's lock (the run's fencing rows, its rule, a
    step's decisions before its send permit) concerns that one run, so the chain's lock
    serializes it as the single head once did, while runs of other chains append at the same
    time.

    SQLite keeps one chain: its file has one writer, so more would gain nothing. A ledger of
    one chain numbers its events from its head, without gaps; a ledger of many takes numbers
    from one sequence, unique, increasing along each chain, but neither gap-free nor in
    commit order across chains: whoever follows the ledger keeps a cursor per chain.
    """
    if chains <= 1:
        return 0
    digest = hashlib.sha256(run_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % chains


# The schema this release writes and reads. A ledger records the versions it was brought
# up to in ``audit_schema``; whoever finds an older one (a sidecar that may create tables,
# or `actonce audit migrate`) runs the DDL below again, which creates only what is missing.
# Any change to the DDL bumps it. 1: the tables, columns and checkpoints of the releases
# before versions were recorded; 2: runs bound to their rules (``audit_run_rules``) and the
# sidecars' heartbeats (``audit_sidecars``); 3: chains (``audit_chains``, each event's
# ``chain``, each checkpoint's), which replace the single head row ``audit_head``.
SCHEMA_VERSION = 3

COLUMNS = (
    "seq, ts, run_id, attempt_id, rpc, phase, rule, checkpoint, write_type, derived_id, "
    "request_id, occurrence, digest, outcome, reason, failure_class, detail, prev_hash, hash, "
    "scope, trace_id, span_id, chain"
)

# Columns added after ledgers existed, each with the statement that adds it and what a
# reader of a ledger not yet migrated reads in its place. A backend runs the statement
# of each column its table lacks, idempotently and under its lock. Earlier sidecars
# sharing the ledger keep working: they name their columns, so the defaults fill the
# new ones (a scope of '', no trace), and the unscoped attempts keep their fencing row
# in audit_runs.
ADDED_COLUMNS = (
    ("scope", "ALTER TABLE audit_events ADD COLUMN scope TEXT NOT NULL DEFAULT ''", "''"),
    ("trace_id", "ALTER TABLE audit_events ADD COLUMN trace_id TEXT", "NULL"),
    ("span_id", "ALTER TABLE audit_events ADD COLUMN span_id TEXT", "NULL"),
    ("chain", "ALTER TABLE audit_events ADD COLUMN chain INTEGER NOT NULL DEFAULT 0", "0"),
)


def readable_columns(present: Collection[str]) -> str:
    """COLUMNS as a ledger holding only the columns ``present`` can answer them: a ledger
    no sidecar has opened since a column came is read as it is."""
    missing = {name: stand_in for name, _, stand_in in ADDED_COLUMNS if name not in present}
    return ", ".join(
        f"{missing[name]} AS {name}" if name in missing else name for name in COLUMNS.split(", ")
    )


def tables(seq_type: str) -> str:
    """DDL of the events and runs tables; ``seq_type`` is the dialect's 64-bit integer."""
    return (
        f"""
CREATE TABLE IF NOT EXISTS audit_events (
    seq {seq_type} PRIMARY KEY,
    ts TEXT NOT NULL,
    run_id TEXT NOT NULL,
    attempt_id TEXT NOT NULL,
    rpc TEXT NOT NULL,
    phase TEXT NOT NULL,
    rule TEXT NOT NULL,
    checkpoint TEXT NOT NULL,
    write_type TEXT NOT NULL,
    derived_id TEXT NOT NULL,
    request_id TEXT NOT NULL,
    occurrence INTEGER NOT NULL,
    digest TEXT NOT NULL,
    outcome TEXT NOT NULL,
    reason TEXT NOT NULL,
    failure_class TEXT NOT NULL,
    detail TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL,
    scope TEXT NOT NULL DEFAULT '',
    trace_id TEXT,
    span_id TEXT,
    chain INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS audit_events_run ON audit_events (run_id, seq);
CREATE INDEX IF NOT EXISTS audit_events_derived ON audit_events (derived_id);
-- For the operator's queries (sidecar.ledger.operator): runs by their attempts' begins,
-- steps and intents that may be pending, and the rare writes that failed UNKNOWN.
CREATE INDEX IF NOT EXISTS audit_events_phase ON audit_events (phase, run_id, seq);
CREATE INDEX IF NOT EXISTS audit_events_unknown ON audit_events (run_id)
    WHERE failure_class = 'UNKNOWN';
-- The newest attempt of each run's unscoped attempts, and of each (run, scope):
-- fencing is per (run, scope). Unscoped attempts keep the table they had before
-- scopes, so that sidecars of both versions sharing a ledger fence each other.
CREATE TABLE IF NOT EXISTS audit_runs (
    run_id TEXT PRIMARY KEY,
    attempt_id TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS audit_scopes (
    run_id TEXT NOT NULL,
    scope TEXT NOT NULL,
    attempt_id TEXT NOT NULL,
    PRIMARY KEY (run_id, scope)
);
"""
        + liveness.TABLE
    )


def checkpoints_table(seq_type: str) -> str:
    """DDL of the prunes' checkpoints: one row per prune, naming the last event it removed.

    The newest row is the ledger's checkpoint: ``audit verify`` walks the chain from
    its hash. A table of its own, created if missing, so that a ledger written
    before pruning gains it in place and sidecars of any version share the ledger.
    """
    return f"""
CREATE TABLE IF NOT EXISTS audit_checkpoints (
    seq {seq_type} PRIMARY KEY,
    hash TEXT NOT NULL,
    pruned_at TEXT NOT NULL,
    cut_before TEXT NOT NULL,
    events {seq_type} NOT NULL,
    chain INTEGER NOT NULL DEFAULT 0,
    follows {seq_type}
);
"""


# A ledger's checkpoints from before chains gain these columns in place: they are chain 0's,
# each following the checkpoint ``events`` before it (the numbers had no gaps then).
CHECKPOINT_COLUMNS = (
    ("chain", "ALTER TABLE audit_checkpoints ADD COLUMN chain INTEGER NOT NULL DEFAULT 0"),
    ("follows", "ALTER TABLE audit_checkpoints ADD COLUMN follows {seq_type}"),
)


def chains_table(seq_type: str) -> str:
    """DDL of the chains' heads: per chain, the number and hash of its newest event (0 and
    the genesis hash while it has none). Its rows are the ledger's chains: their count is
    fixed when the ledger is created or migrated (``chain_of``)."""
    return f"""
CREATE TABLE IF NOT EXISTS audit_chains (
    chain INTEGER PRIMARY KEY,
    seq {seq_type} NOT NULL,
    hash TEXT NOT NULL
);
"""


# Each chain's events in order; created once the events table has its chain column.
CHAIN_INDEX = "CREATE INDEX IF NOT EXISTS audit_events_chain ON audit_events (chain, seq)"
# The single head of a ledger from before chains: chain 0's head once migrated, then dropped,
# so that a sidecar of an earlier release fails its appends closed rather than writing a
# second chain 0 beside the new one.
OLD_HEAD = "SELECT seq, hash FROM audit_head"
DROP_OLD_HEAD = "DROP TABLE audit_head"
INSERT_CHAIN = "INSERT INTO audit_chains (chain, seq, hash) VALUES (?, ?, ?)"


def chain_rows(count: int, head: tuple[int, str] | None) -> list[tuple[int, int, str]]:
    """The head rows of a ledger of ``count`` chains: chain 0 takes ``head``, the single
    head of a ledger from before chains, whose events are chain 0's history as they are."""
    first = head or (0, GENESIS_HASH)
    return [(0, *first)] + [(chain, 0, GENESIS_HASH) for chain in range(1, count)]


def run_rules_table() -> str:
    """DDL of the rule each run belongs to: that of its first attempt, recorded in the
    transaction that makes the begin durable. Like the fencing tables, never pruned: a
    run keeps its rule after its events are gone."""
    return """
CREATE TABLE IF NOT EXISTS audit_run_rules (
    run_id TEXT PRIMARY KEY,
    rule TEXT NOT NULL
);
"""


def schema_table() -> str:
    """DDL of the schema versions a ledger was brought up to, one row each."""
    return """
CREATE TABLE IF NOT EXISTS audit_schema (
    version INTEGER PRIMARY KEY
);
"""


# What a backend runs after the DDL, with SCHEMA_VERSION, to record the version it reached.
RECORD_VERSION = "INSERT INTO audit_schema (version) VALUES (?) ON CONFLICT DO NOTHING"
SCHEMA_VERSION_QUERY = "SELECT MAX(version) FROM audit_schema"


# Each chain's checkpoint: the last event of it removed by the newest prune.
CHECKPOINT_QUERY = (
    "SELECT chain, seq, hash FROM audit_checkpoints c WHERE seq = "
    "(SELECT MAX(seq) FROM audit_checkpoints o WHERE o.chain = c.chain) ORDER BY chain"
)
# Every prune's checkpoint, oldest first, with how many events it removed, and its chain.
CHECKPOINTS_QUERY = "SELECT seq, hash, events, chain, follows FROM audit_checkpoints ORDER BY seq"
# The chains' heads.
HEADS_QUERY = "SELECT chain, seq, hash FROM audit_chains ORDER BY chain"


# The row's columns by name, and those that hold an event's field under the field's name.
_COLUMN_NAMES = tuple(COLUMNS.split(", "))
_EVENT_COLUMNS = tuple(name for name in _COLUMN_NAMES if name in AuditEvent.__dataclass_fields__)


def event_row(
    seq: int, ts: str, event: AuditEvent, prev: str, digest: str, chain: int = 0
) -> tuple[object, ...]:
    """An event as the row both SQL backends store (in COLUMNS order)."""
    row: dict[str, object] = {name: getattr(event, name) for name in _EVENT_COLUMNS}
    row.update(
        seq=seq,
        ts=ts,
        prev_hash=prev,
        hash=digest,
        chain=chain,
        detail=json.dumps(event.detail, sort_keys=True, separators=(",", ":")),
        # No trace is NULL, as the columns' stand-in for a ledger from before them says.
        trace_id=event.trace_id or None,
        span_id=event.span_id or None,
    )
    return tuple(row[name] for name in _COLUMN_NAMES)


def row_to_event(row: tuple[object, ...] | list[object]) -> StoredEvent:
    """Decode one ``audit_events`` row (in COLUMNS order)."""
    stored = dict(zip(_COLUMN_NAMES, row, strict=True))
    text: dict[str, Any] = {name: str(stored[name]) for name in _EVENT_COLUMNS}
    text.update(
        occurrence=int(text["occurrence"]),
        detail=json.loads(text["detail"]),
        trace_id=str(stored["trace_id"] or ""),
        span_id=str(stored["span_id"] or ""),
    )
    event = AuditEvent(**text)
    return StoredEvent(
        int(str(stored["seq"])),
        str(stored["ts"]),
        event,
        str(stored["prev_hash"]),
        str(stored["hash"]),
        int(str(stored["chain"] or 0)),
    )


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


@dataclass(frozen=True)
class FencedKeys:
    """What a batch must read to fence its intents: unscoped runs, scoped pairs."""

    runs: list[str]
    scoped: list[RunScope]

    @property
    def scoped_runs(self) -> list[str]:
        return sorted({run for run, _ in self.scoped})


def fenced_keys(events: list[AuditEvent]) -> FencedKeys:
    """The (run, scope) pairs whose newest attempt a batch must read, to fence its intents
    (and a delivery's tool calls: the run's newest unscoped attempt)."""
    keys = {key for e in events for key in fencing_keys(e)}
    return FencedKeys(
        runs=sorted(run for run, scope in keys if not scope),
        scoped=sorted((run, scope) for run, scope in keys if scope),
    )


def newest_attempts(
    keys: FencedKeys,
    unscoped: list[tuple[object, object]],
    scoped: list[tuple[object, object, object]],
) -> dict[RunScope, str]:
    """The newest attempt of each (run, scope) a batch fences, from the rows of
    audit_runs (run, attempt) and audit_scopes (run, scope, attempt) it read."""
    newest = {(str(run), ""): str(attempt) for run, attempt in unscoped}
    wanted = set(keys.scoped)
    for run, scope, attempt in scoped:
        if (str(run), str(scope)) in wanted:
            newest[(str(run), str(scope))] = str(attempt)
    return newest


@dataclass
class ChainedBatch:
    """A batch laid onto the chain: the rows to insert, the new newest attempts
    of unscoped runs and of scoped (run, scope) pairs, each event's sequence
    number or refusal, and the chain's new head."""

    seq: int
    head: str
    rows: list[tuple[object, ...]] = field(default_factory=list)
    begun: list[tuple[str, str]] = field(default_factory=list)
    begun_scoped: list[tuple[str, str, str]] = field(default_factory=list)
    results: list[int | LedgerError] = field(default_factory=list)
    # Runs the batch binds to a rule: (run, rule), for audit_run_rules.
    bound: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class EventClock:
    """Where a batch's times come from: ``now``, the ledger's own time when its database
    keeps one (PostgreSQL's), else this process's; never earlier than ``floor``, the
    newest event's time, so that the chain's times never go back."""

    now: str | None = None
    floor: str = ""

    def stamp(self) -> str:
        return max(self.now or now(), self.floor)


def chain(
    events: list[AuditEvent],
    seq: int,
    head: str,
    newest: dict[RunScope, str],
    *,
    run_rules: dict[str, str] | None = None,
    clock: EventClock = EventClock(),
    not_granted: Mapping[int, LedgerError] | None = None,
    chain_id: int = 0,
    numbers: Iterator[int] | None = None,
) -> ChainedBatch:
    """Number, timestamp and hash a batch onto chain ``chain_id`` after (seq, head).

    Each event takes the number after the one before it, or, in a ledger of many chains,
    the next of ``numbers`` (the ledger's sequence, increasing).

    ``newest`` holds the newest attempt of each (run, scope) the batch fences; an
    attempt begun earlier in the same batch counts, as it would had each event
    been written alone. A fenced event (an intent, a step's begin or end, the begin
    of a scoped attempt of a stale delivery) is refused and takes no number. Each
    scope fences alone: a new attempt of one scope, or an unscoped one, leaves the
    attempts of every other scope of the run as they were, but for those that name
    an older delivery of the run.

    ``not_granted`` holds, by position in ``events``, the refusals decided before the chain
    (a send permit the ledger does not grant): those events take no number.

    ``run_rules`` holds the rule of each run the batch begins attempts of, where the
    ledger has bound one: a begin under another rule is refused and changes nothing
    (neither the run's fencing nor its rule); the first begin of a run binds it.
    """
    out = ChainedBatch(seq, head)
    not_granted = not_granted or {}
    for index, event in enumerate(events):
        if index in not_granted:
            out.results.append(not_granted[index])
            continue
        refusal = fenced(event, newest.get)
        if refusal is not None and event.phase != Phase.STEP_END:
            out.results.append(refusal)
            continue
        if refusal is not None:
            # A step's end is what happened: its tool acted. It is recorded as it came,
            # marked, and its attempt is still told it was fenced; later attempts do not
            # replay a fenced end's result (sidecar.core.step_history).
            event = dataclasses.replace(event, detail={**event.detail, FENCED_END: True})
        if event.phase == Phase.ATTEMPT_BEGIN:
            refused = _bind_rule(event, run_rules, out)
            if refused is not None:
                out.results.append(refused)
                continue
            if event.scope:
                out.begun_scoped.append((event.run_id, event.scope, event.attempt_id))
            else:
                out.begun.append((event.run_id, event.attempt_id))
            newest[(event.run_id, event.scope)] = event.attempt_id
        out.seq = out.seq + 1 if numbers is None else next(numbers)
        ts = clock.stamp()
        clock = EventClock(clock.now, ts)
        digest = event_hash(out.seq, ts, event, out.head, chain_id)
        out.rows.append(event_row(out.seq, ts, event, out.head, digest, chain_id))
        out.head = digest
        out.results.append(out.seq if refusal is None else refusal)
    return out


def _bind_rule(
    event: AuditEvent, run_rules: dict[str, str] | None, out: ChainedBatch
) -> LedgerError | None:
    """The refusal of a begin whose run belongs to another rule; a run not bound yet is
    bound to the begin's rule (in ``run_rules``, and for the batch to record)."""
    if run_rules is None:
        return None
    known = event.run_id in run_rules
    refusal = other_rule(event, run_rules)
    if refusal is None and not known:
        out.bound.append((event.run_id, event.rule))
    return refusal
