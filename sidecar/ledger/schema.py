"""The ledger's tables, shared by its SQL backends: their columns, their DDL and its
migrations, and the few words of SQL in which the two databases differ (:class:`Dialect`).

Both backends store the same row for an event, so that ``actonce audit`` reads and verifies
either the same way; only the dialect's types differ. What a batch's append writes into these
tables (its chain, numbers, hashes and rows) is :mod:`sidecar.ledger.sql`'s.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sidecar.ledger import liveness
from sidecar.ledger.base import GENESIS_HASH

# The chains of a PostgreSQL ledger created or migrated without ``--chains``: enough that
# the runs a fleet appends to at one moment seldom share one (8 runs at once make 28 pairs:
# 0.22 pairs on one chain expected among 128 chains, 1.75 among 16; a shared chain is a
# batch waiting on another), few enough that verify's walk per chain stays cheap (a query
# per chain) and the heads stay one small table.
POSTGRES_CHAINS = 128
# The most a ledger may have: each append locks its chains' rows, and verify walks each.
MAX_CHAINS = 1024


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


class Connection(Protocol):
    def execute(self, query: str, params: Sequence[Any] = (), /) -> Any: ...


@dataclass(frozen=True, slots=True)
class Dialect:
    """The words of SQL in which the ledger's databases differ."""

    placeholder: str
    head_lock: str  # what an append adds to its read of its chains' heads, to hold them
    # How a ledger of many chains numbers a batch's events, ``?`` of them: one sequence
    # shared by the chains. None where a ledger has one chain (SQLite).
    numbers: str | None
    columns: str  # the statement that names a ``{table}``'s columns
    # A list goes as one array parameter: one statement for any number of runs, which the
    # driver prepares once, rather than one per count.
    array_parameter: bool
    # The database's own clock, read with the head: the one time every sidecar sharing the
    # ledger stamps its events with. SQLite has none apart from its writer's: a ledger file
    # lives on one host, whose clock each process writing it reads.
    clock: str = "NULL"
    # Fencing rows and runs' rules are written through the ledger's functions, which check
    # the run's rule (sidecar.ledger.pgschema.GUARDS): a writer role may not write them.
    guarded: bool = False


# SQLite's BEGIN IMMEDIATE already holds the whole file for the writer.
SQLITE = Dialect(
    placeholder="?",
    head_lock="",
    numbers=None,
    columns="SELECT name FROM pragma_table_info('{table}')",
    array_parameter=False,
)
# Batches from several sidecars serialize on the head rows of the chains they append to,
# locked in the chains' order so that two batches never wait on each other in a circle.
POSTGRES = Dialect(
    placeholder="%s",
    head_lock=" FOR UPDATE",
    numbers="SELECT nextval('audit_events_seq') FROM generate_series(1, %s)",
    columns="SELECT column_name FROM information_schema.columns "
    "WHERE table_schema = current_schema() AND table_name = '{table}'",
    array_parameter=True,
    clock="clock_timestamp()",
    guarded=True,
)


def present_columns(db: Connection, dialect: Dialect, table: str = "audit_events") -> set[str]:
    """The columns ``table`` has: a ledger not yet migrated lacks the newest."""
    query = dialect.columns.format(table=table)
    return {str(row[0]) for row in db.execute(query).fetchall()}


def add_columns(db: Connection, dialect: Dialect, seq_type: str) -> None:
    """Give a ledger written before a column came each column it lacks, in place, and the
    index on events' chains; the caller holds the lock that keeps two sidecars from both
    adding one. Earlier sidecars name their columns, so the defaults fill them."""
    for table, added in (
        ("audit_events", ADDED_COLUMNS),
        ("audit_checkpoints", CHECKPOINT_COLUMNS),
    ):
        present = present_columns(db, dialect, table)
        for name, statement, *_ in added:
            if name not in present:
                db.execute(statement.format(seq_type=seq_type))
    db.execute(CHAIN_INDEX)
