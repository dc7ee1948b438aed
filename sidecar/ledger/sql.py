"""The audit ledger's SQL, each statement written once for SQLite and PostgreSQL, and the
one way a batch is appended on either: :func:`append`.

A statement is written here with ``?`` placeholders; :class:`Queries` puts it in one
database's words (its placeholder, the lock an append takes on its chains' head rows, where
numbers come from: :class:`~sidecar.ledger.schema.Dialect`). Phases are named by
:class:`~sidecar.ledger.base.Phase`, never spelled again in SQL. :func:`append` locks the
batch's chains (``chain_of``), reads what fences, binds and permits its events, and lays
them onto their chains (:func:`chain`: numbers, times, hashes, rows); :class:`SqlLedger`
and :class:`SqlLedgerReader` hold what the sidecar's ledger and ``actonce audit``'s reader
ask of it the same way on both. The tables themselves are :mod:`sidecar.ledger.schema`'s.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, Protocol, TypeVar

from sidecar.ledger import permits
from sidecar.ledger.base import (
    FENCED_END,
    GENESIS_HASH,
    AuditEvent,
    Checkpoint,
    GroupCommitLedger,
    LedgerError,
    Phase,
    RunScope,
    RunSummary,
    StoredEvent,
    event_hash,
    fenced,
    fencing_keys,
    other_rule,
)
from sidecar.ledger.schema import (
    CHECKPOINTS_QUERY,
    COLUMNS,
    HEADS_QUERY,
    OLD_HEAD,
    Connection,
    Dialect,
)

__all__ = [
    "RUN_SUMMARY",
    "ChainedBatch",
    "EventClock",
    "FencedKeys",
    "Queries",
    "SqlLedger",
    "SqlLedgerReader",
    "append",
    "chain",
    "chain_of",
    "event_row",
    "fenced_keys",
    "marks",
    "newest_attempts",
    "now",
    "phase",
    "row_to_event",
    "run_summary",
]


# A run's summary, as `audit runs` and the console's runs page show it.
RUN_SUMMARY = "run_id, MAX(rule), COUNT(DISTINCT attempt_id), COUNT(*), MIN(ts), MAX(ts)"


def run_summary(row: Sequence[Any]) -> RunSummary:
    """A run's summary from a row of ``SELECT {RUN_SUMMARY}``."""
    return RunSummary(str(row[0]), str(row[1]), int(row[2]), int(row[3]), str(row[4]), str(row[5]))


def phase(name: str) -> str:
    """A phase as an SQL literal: ``f"phase = {phase(Phase.INTENT)}"``.

    A literal, not a parameter: the planner then matches the statement to the index
    on (phase, run_id, seq) as it did when the names were written out.
    """
    return f"'{name}'"


def marks(count: int) -> str:
    """``count`` placeholders, comma-separated, written ``?`` like every statement here."""
    return ", ".join("?" * count)


class Queries:
    """The ledger's statements in one dialect's words."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self.heads = HEADS_QUERY
        self.chain_count = "SELECT COUNT(*) FROM audit_chains"
        self.set_head = self.sql("UPDATE audit_chains SET seq = ?, hash = ? WHERE chain = ?")
        self.insert_event = self.sql(
            f"INSERT INTO audit_events ({COLUMNS}) VALUES ({marks(len(COLUMNS.split(',')))})"
        )
        self.begin_run = self.sql(
            "INSERT INTO audit_runs (run_id, attempt_id) VALUES (?, ?) "
            "ON CONFLICT (run_id) DO UPDATE SET attempt_id = excluded.attempt_id"
        )
        self.bind_run = self.sql(
            "INSERT INTO audit_run_rules (run_id, rule) VALUES (?, ?) ON CONFLICT DO NOTHING"
        )
        self.begin_scope = self.sql(
            "INSERT INTO audit_scopes (run_id, scope, attempt_id) VALUES (?, ?, ?) "
            "ON CONFLICT (run_id, scope) DO UPDATE SET attempt_id = excluded.attempt_id"
        )
        if dialect.guarded:  # the same rows, each with the rule its begin claims
            self.bind_run = self.sql("SELECT audit_bind_run(?, ?)")
            self.begin_run = self.sql("SELECT audit_fence_run(?, ?, ?)")
            self.begin_scope = self.sql("SELECT audit_fence_scope(?, ?, ?, ?)")
        self.events_for = self.events_of(1)
        self.first_attempt = self.sql(
            f"SELECT {COLUMNS} FROM audit_events WHERE run_id = ? AND scope = ? "
            f"AND phase = {phase(Phase.ATTEMPT_BEGIN)} ORDER BY seq LIMIT 1"
        )
        # An operator's decision on a step since an attempt began it: that attempt's
        # permit is refused (sidecar.ledger.permits).
        self.decided_since_begin = self.sql(
            f"SELECT 1 FROM audit_events WHERE derived_id = ? AND phase = {phase(Phase.DECISION)} "
            "AND seq > (SELECT COALESCE(MAX(seq), 0) FROM audit_events WHERE derived_id = ? "
            f"AND attempt_id = ? AND phase = {phase(Phase.STEP_BEGIN)}) LIMIT 1"
        )
        self.runs = f"SELECT {RUN_SUMMARY} FROM audit_events GROUP BY run_id ORDER BY MAX(seq) DESC"
        self.count = "SELECT COUNT(*) FROM audit_events"

    def sql(self, text: str) -> str:
        """A statement written with ``?`` placeholders, in this dialect's."""
        return text.replace("?", self.dialect.placeholder)

    def lock_heads(self, chains: list[int]) -> tuple[str, Sequence[object]]:
        """The heads of ``chains``, in the chains' order, each with what a batch stamps its
        events from: the chain's newest event's time, and the database's clock
        (sidecar.ledger.sql.EventClock); locked, where the dialect says, until commit."""
        params: list[object] = [chains]
        where = "chain = ANY(?)"
        if not self.dialect.array_parameter:
            where, params = f"chain IN ({marks(len(chains))})", list(chains)
        query = (
            "SELECT chain, seq, hash, (SELECT e.ts FROM audit_events e WHERE e.seq = c.seq), "
            f"{self.dialect.clock} FROM audit_chains c WHERE {where} "
            f"ORDER BY chain{self.dialect.head_lock}"
        )
        return self.sql(query), params

    def events_of(self, ids: int, columns: str = COLUMNS) -> str:
        """The events of ``ids`` derived ids, in order, ``columns`` of them."""
        return self.sql(
            f"SELECT {columns} FROM audit_events WHERE derived_id IN ({marks(ids)}) ORDER BY seq"
        )

    def events(
        self, columns: str, *, of_run: bool, limit: bool = False, of_chain: bool = False
    ) -> str:
        """Events after a sequence number (``of_run``: of one run; ``of_chain``: of one
        chain), in order, ``columns`` of them; parameters ``[run_id,] [chain,] after[,
        limit]``."""
        where = ("run_id = ? AND " if of_run else "") + ("chain = ? AND " if of_chain else "")
        where += "seq > ?"
        text = f"SELECT {columns} FROM audit_events WHERE {where} ORDER BY seq"
        return self.sql(text + (" LIMIT ?" if limit else ""))

    def of_runs(self, runs: list[str]) -> tuple[str, Sequence[object]]:
        """``run_id`` among ``runs``: the WHERE clause and its parameters."""
        if self.dialect.array_parameter:
            return "run_id = ANY(?)", [runs]
        return f"run_id IN ({marks(len(runs))})", runs

    def run_rules(self, runs: list[str]) -> tuple[str, Sequence[object]]:
        """The rule each of ``runs`` belongs to, one statement: as bound, or, for a run begun
        before runs were bound (by an earlier release), as its first begin says. Rows in
        order: a run's first row is its rule."""
        where, params = self.of_runs(runs)
        query = (
            "SELECT run_id, rule FROM ("
            f"SELECT run_id, rule, 0 AS seq FROM audit_run_rules WHERE {where} UNION ALL "
            f"SELECT e.run_id, e.rule, e.seq FROM audit_events e WHERE {where} "
            f"AND e.phase = {phase(Phase.ATTEMPT_BEGIN)} AND NOT EXISTS "
            "(SELECT 1 FROM audit_run_rules b WHERE b.run_id = e.run_id)) AS found ORDER BY seq"
        )
        return self.sql(query), [*params, *params]

    def newest_attempts(self, runs: list[str], *, scoped: bool) -> tuple[str, Sequence[object]]:
        """The newest attempt of ``runs``' unscoped attempts, or of their scopes: the
        statement and its parameters."""
        where, params = self.of_runs(runs)
        if scoped:
            query = f"SELECT run_id, scope, attempt_id FROM audit_scopes WHERE {where}"
        else:
            query = f"SELECT run_id, attempt_id FROM audit_runs WHERE {where}"
        return self.sql(query), params


class Cursor(Protocol):
    """What :func:`append` needs of a connection or cursor inside its transaction."""

    def execute(self, query: str, params: Sequence[Any] = (), /) -> Any: ...

    def executemany(self, query: str, params: Sequence[Sequence[Any]], /) -> Any: ...


def append(
    db: Cursor, sql: Queries, events: list[AuditEvent], chains: int = 1
) -> list[int | LedgerError]:
    """Lay ``events`` onto their chains (a ledger of ``chains``) inside the caller's
    transaction: per event, its sequence number, or the error that refused that event
    alone (a fenced intent)."""
    # Each chain's head is a row of its own, read (and, where the dialect says, locked)
    # inside the transaction: it lets `audit verify` tell a chain whose last events were
    # deleted from one that simply ends there. Everything read below concerns the batch's
    # runs, each of which appends to one chain only: its lock serializes them.
    if not events:
        return []
    by_chain: dict[int, list[int]] = {}
    for index, event in enumerate(events):
        by_chain.setdefault(chain_of(event.run_id, chains), []).append(index)
    query, params = sql.lock_heads(sorted(by_chain))
    heads = {int(row[0]): row for row in db.execute(query, params).fetchall()}
    if len(heads) != len(by_chain):
        raise LedgerError(
            f"the ledger has no head for chain {min(set(by_chain) - set(heads))}: it was "
            "made with fewer chains than this sidecar was told (run `actonce audit migrate`)"
        )
    clock = ledger_clock(None, next(iter(heads.values()))[4])
    # One statement per table for the newest attempts the batch fences, not one per
    # intent: each statement hands the interpreter back and forth with the event loop.
    keys = fenced_keys(events)
    unscoped: list[tuple[object, object]] = []
    scoped: list[tuple[object, object, object]] = []
    if keys.runs:
        query, params = sql.newest_attempts(keys.runs, scoped=False)
        unscoped = [(run, attempt) for run, attempt in db.execute(query, params).fetchall()]
    if keys.scoped:
        query, params = sql.newest_attempts(keys.scoped_runs, scoped=True)
        scoped = [(r, s, a) for r, s, a in db.execute(query, params).fetchall()]
    run_rules = _run_rules(db, sql, events)
    events, refused = _permits(db, sql, events, clock)
    newest = newest_attempts(keys, unscoped, scoped)
    numbers = _numbers(db, sql, len(events)) if chains > 1 else None
    results: list[int | LedgerError] = [0] * len(events)
    rows: list[tuple[object, ...]] = []
    bound: list[tuple[str, ...]] = []
    begun: list[tuple[str, ...]] = []
    begun_scoped: list[tuple[str, ...]] = []
    moved: list[tuple[int, str, int]] = []
    for chain_id, indexes in sorted(by_chain.items()):
        head = heads[chain_id]
        batch = chain(
            [events[i] for i in indexes],
            int(head[1]),
            str(head[2]),
            newest,
            run_rules=run_rules,
            clock=EventClock(clock.now, str(head[3] or "")),
            not_granted={n: refused[i] for n, i in enumerate(indexes) if i in refused},
            chain_id=chain_id,
            numbers=numbers,
        )
        for i, result in zip(indexes, batch.results, strict=True):
            results[i] = result
        rows += batch.rows
        bound += batch.bound
        begun += batch.begun
        begun_scoped += batch.begun_scoped
        if batch.rows:
            moved.append((batch.seq, batch.head, chain_id))
    if sql.dialect.guarded:  # chain() left each begun run's rule in run_rules
        begun = [(*row, run_rules[row[0]]) for row in begun]
        begun_scoped = [(*row, run_rules[row[0]]) for row in begun_scoped]
    if bound:
        db.executemany(sql.bind_run, bound)
    if begun:
        db.executemany(sql.begin_run, begun)
    if begun_scoped:
        db.executemany(sql.begin_scope, begun_scoped)
    if rows:
        db.executemany(sql.insert_event, rows)
        db.executemany(sql.set_head, moved)
    return results


def _numbers(db: Cursor, sql: Queries, count: int) -> Iterator[int]:
    """``count`` numbers from the ledger's sequence, increasing: taken while the batch's
    chains are locked, so each chain's numbers increase in the order its events commit."""
    assert sql.dialect.numbers is not None, "a ledger of many chains numbers from a sequence"
    rows = db.execute(sql.dialect.numbers, (count,)).fetchall()
    return iter(sorted(int(row[0]) for row in rows))


def ledger_clock(newest_ts: object, database_now: object) -> EventClock:
    """The batch's clock from its head row: the database's time when it keeps one."""
    when = None
    if isinstance(database_now, datetime):
        when = database_now.astimezone(UTC).isoformat(timespec="microseconds")
    return EventClock(when, str(newest_ts or ""))


def _permits(
    db: Cursor, sql: Queries, events: list[AuditEvent], clock: EventClock
) -> tuple[list[AuditEvent], dict[int, LedgerError]]:
    """The batch with each send permit granted (its deadline set by the ledger's clock), and
    the refusals of those not granted, by position: read in the batch's transaction, after
    the head's lock, so that no decision is appended meanwhile (sidecar.ledger.permits)."""
    if not any(e.phase == Phase.STEP_PERMIT for e in events):
        return events, {}
    now = permits.parse_time(clock.now or "") or datetime.now(UTC)
    judged = list(events)
    refused: dict[int, LedgerError] = {}
    for index, event in enumerate(events):
        if event.phase != Phase.STEP_PERMIT:
            continue
        params = (event.derived_id, event.derived_id, event.attempt_id)
        decided = db.execute(sql.decided_since_begin, params).fetchone() is not None
        granted = permits.grant(event, now, decided=decided)
        if isinstance(granted, LedgerError):
            refused[index] = granted
        else:
            judged[index] = granted
    return judged, refused


def _run_rules(db: Cursor, sql: Queries, events: list[AuditEvent]) -> dict[str, str]:
    """The rule of each run whose attempts ``events`` begin, where one is bound: read in the
    batch's transaction, after the head's lock, so that no other batch binds it meanwhile."""
    runs = sorted({e.run_id for e in events if e.phase == Phase.ATTEMPT_BEGIN})
    if not runs:
        return {}
    query, params = sql.run_rules(runs)
    rules: dict[str, str] = {}
    for run, rule in db.execute(query, params).fetchall():
        rules.setdefault(str(run), str(rule))
    return rules


class SqlLedger(GroupCommitLedger):
    """The sidecar's ledger on SQL: its reads written once; a backend supplies ``_read``
    and the transaction each batch is written in (``_write_batch``)."""

    def __init__(self, dialect: Dialect, *, append_timeout_seconds: float | None = None) -> None:
        super().__init__(append_timeout_seconds=append_timeout_seconds)
        self._sql = Queries(dialect)
        self._chains = 1  # a backend whose ledger records more sets them

    def append_in(self, db: Cursor, events: Sequence[AuditEvent]) -> list[int | LedgerError]:
        """Append ``events`` in the transaction open on ``db``: durable with that
        transaction's commit. Per event, its number or its refusal. Each backend's batches
        are appended so, and an embedded store sharing a SQLite ledger's file appends a
        write's audit in its own transaction so (sidecar.upstream.inprocess)."""
        return append(db, self._sql, list(events), self._chains)

    def _read(self, query: str, params: tuple[object, ...]) -> list[tuple[Any, ...]]:
        """Rows of a read, in a worker thread; LedgerError when the ledger does not answer."""
        raise NotImplementedError

    async def events_for(self, derived_id: str) -> list[StoredEvent]:
        rows = await asyncio.to_thread(self._read, self._sql.events_for, (derived_id,))
        return [row_to_event(row) for row in rows]

    async def first_attempt(self, run_id: str, scope: str) -> AuditEvent | None:
        rows = await asyncio.to_thread(self._read, self._sql.first_attempt, (run_id, scope))
        return row_to_event(rows[0]).event if rows else None


def newest_head(heads: dict[int, tuple[int, str]]) -> tuple[int, str]:
    """The newest of the chains' heads: the ledger's newest event's number and hash."""
    return max(heads.values(), default=(0, GENESIS_HASH))


def checkpoint_of(row: Sequence[Any]) -> Checkpoint:
    """A checkpoint from a row of CHECKPOINTS_QUERY."""
    seq, hash_, events, chain, follows = row
    return Checkpoint(
        int(seq), str(hash_), int(events), int(chain), None if follows is None else int(follows)
    )


_C = TypeVar("_C", bound=Connection)


class SqlLedgerReader(Generic[_C]):
    """What ``actonce audit`` reads of a ledger, the same way on both databases; a backend
    opens the connection and streams the events (``events``)."""

    def __init__(self, conn: _C, dialect: Dialect, columns: str) -> None:
        self._conn = conn
        self._sql = Queries(dialect)
        # The columns a ledger no sidecar has migrated yet can answer.
        self._columns = columns

    def _events_query(
        self, run_id: str | None, after: int, chain: int | None
    ) -> tuple[str, tuple[object, ...]]:
        query = self._sql.events(
            self._columns, of_run=run_id is not None, of_chain=chain is not None
        )
        params = (run_id,) if run_id is not None else ()
        return query, (*params, *((chain,) if chain is not None else ()), after)

    def events(
        self, *, run_id: str | None = None, after: int = 0, chain: int | None = None
    ) -> Iterator[StoredEvent]:
        query, params = self._events_query(run_id, after, chain)
        for row in self._conn.execute(query, params):
            yield row_to_event(row)

    def runs(self) -> list[RunSummary]:
        return [run_summary(row) for row in self._conn.execute(self._sql.runs).fetchall()]

    def count(self) -> int:
        row = self._conn.execute(self._sql.count).fetchone()
        return int(row[0]) if row else 0

    def heads(self) -> dict[int, tuple[int, str]]:
        # A ledger no sidecar has opened since chains came has its one head, chain 0's.
        if not self._has_table("audit_chains"):
            row = self._conn.execute(OLD_HEAD).fetchone()
            return {0: (int(row[0]), str(row[1])) if row else (0, GENESIS_HASH)}
        rows = self._conn.execute(self._sql.heads).fetchall()
        return {int(chain): (int(seq), str(hash_)) for chain, seq, hash_ in rows}

    def head(self) -> tuple[int, str]:
        return newest_head(self.heads())

    def checkpoint(self, chain: int = 0) -> tuple[int, str]:
        # A ledger no sidecar has opened since pruning came has no checkpoints table,
        # and was never pruned.
        marks = [mark for mark in self.checkpoints() if mark.chain == chain]
        return (marks[-1].seq, marks[-1].hash) if marks else (0, GENESIS_HASH)

    def checkpoints(self) -> list[Checkpoint]:
        if not self._has_checkpoints():
            return []
        query = CHECKPOINTS_QUERY
        if not self._has_table("audit_chains"):  # nor the checkpoints' chains
            query = "SELECT seq, hash, events, 0, NULL FROM audit_checkpoints ORDER BY seq"
        rows = self._conn.execute(query).fetchall()
        return [checkpoint_of(row) for row in rows]

    def first_seq(self, chain: int | None = None) -> int | None:
        if chain is None:
            row = self._conn.execute("SELECT MIN(seq) FROM audit_events").fetchone()
        else:
            query = self._sql.sql("SELECT MIN(seq) FROM audit_events WHERE chain = ?")
            row = self._conn.execute(query, (chain,)).fetchone()
        return int(row[0]) if row and row[0] is not None else None

    def _has_checkpoints(self) -> bool:
        """Whether the ledger has its checkpoints table; without touching it, which on
        PostgreSQL would end the snapshot's transaction when it is missing."""
        return self._has_table("audit_checkpoints")

    def _has_table(self, name: str) -> bool:
        """Whether the ledger has table ``name``, without touching it."""
        raise NotImplementedError


# -- a batch laid onto its chain --------------------------------------------------------


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
