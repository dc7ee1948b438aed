"""Which steps are in flight: their attempt is live on a sidecar that is alive.

A step whose call is under way on a healthy sidecar has not "never ended": it is in
flight, and no person may decide it yet (``audit resolve`` refuses, ``audit pending``
and the console show it apart). A step's attempt is live while it has not ended, no
newer attempt of its run and scope fenced it, its lease has not passed, and its sidecar
is alive.

Each sidecar says it is alive in the ledger it writes to: a row of its own in
``audit_sidecars``, whose beat it renews every :data:`BEAT_SECONDS` from the ledger's
own clock (the host's for a SQLite file, the server's for PostgreSQL, so that no
sidecar's clock is trusted over another's), and deletes when it closes. A sidecar whose
beat is older than :data:`STALE_SECONDS` is taken for dead: a killed sidecar's steps
become decidable within that bound. The table is outside the hash chain: it says who is
alive now, not what happened; a forged row can only make a person wait (until the
attempt's lease passes or a newer attempt fences it), never make a step run twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from sidecar.ledger.base import Beats, Phase

log = structlog.get_logger()

BEAT_SECONDS = 2.0
STALE_SECONDS = 10.0

# The ledger's own clock, as epoch seconds, in each dialect.
SQLITE_NOW = "((julianday('now') - 2440587.5) * 86400.0)"
POSTGRES_NOW = "extract(epoch from clock_timestamp())"

TABLE = """
CREATE TABLE IF NOT EXISTS audit_sidecars (
    sidecar_id TEXT PRIMARY KEY,
    started DOUBLE PRECISION NOT NULL,
    beat DOUBLE PRECISION NOT NULL
);
"""


@dataclass(frozen=True)
class Clock:
    """A dialect's placeholder and its expression of the ledger's time."""

    now: str
    mark: str


SQLITE_CLOCK = Clock(SQLITE_NOW, "?")
POSTGRES_CLOCK = Clock(POSTGRES_NOW, "%s")


# A beat, or the last goodbye, that takes longer than this is cut: a ledger that stopped
# answering (a frozen PostgreSQL) must hold neither the beats nor the process's exit.
CALL_SECONDS = 2.0


class Heartbeat:
    """One sidecar's row in ``audit_sidecars``, renewed every BEAT_SECONDS by a daemon
    thread of its own from :meth:`start`, and removed at :meth:`stop`. A beat that fails
    is logged, not fatal: the sidecar's steps only become decidable sooner."""

    def __init__(
        self,
        sidecar_id: str,
        connect: Callable[[], Any],
        clock: Clock,
        bound: Callable[[Any], contextlib.AbstractContextManager[None]] | None = None,
    ) -> None:
        self.sidecar_id = sidecar_id
        self._connect = connect
        self._clock = clock
        self._bound = bound or (lambda _conn: contextlib.nullcontext())
        self._conn: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="ledger-heartbeat", daemon=True)
        self._thread.start()

    async def stop(self, seconds: float = CALL_SECONDS + 1) -> None:
        """Stop beating and say so, within ``seconds``: the sidecar's steps are decidable
        at once. A daemon thread: one stuck on a ledger that stopped answering holds
        nothing at exit."""
        self._stop.set()
        if self._thread is not None:
            # Bounded: the join returns after ``seconds`` whatever the thread does.
            await asyncio.to_thread(self._thread.join, seconds)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._try("heartbeat_failed", self.beat)
            self._stop.wait(BEAT_SECONDS)
        self._try("heartbeat_not_removed", self.gone)
        self.close()

    def _try(self, failed: str, call: Callable[[], None]) -> None:
        try:
            call()
        except Exception as exc:
            log.warning(failed, error=str(exc))

    def beat(self) -> None:
        mark, now = self._clock.mark, self._clock.now
        self._execute(
            f"INSERT INTO audit_sidecars (sidecar_id, started, beat) VALUES ({mark}, {now}, {now}) "
            f"ON CONFLICT (sidecar_id) DO UPDATE SET beat = {now}",
            (self.sidecar_id,),
        )

    def gone(self) -> None:
        self._execute(
            f"DELETE FROM audit_sidecars WHERE sidecar_id = {self._clock.mark}", (self.sidecar_id,)
        )

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None

    def _execute(self, statement: str, params: tuple[object, ...]) -> None:
        try:
            if self._conn is None:
                self._conn = self._connect()
            with self._bound(self._conn):
                self._conn.execute(statement, params)
                commit = getattr(self._conn, "commit", None)
                if commit is not None:
                    commit()
        except Exception:
            self.close()  # a new connection next time
            raise


def sqlite_heartbeat(sidecar_id: str, path: Path) -> Heartbeat:
    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(
            path, isolation_level=None, timeout=CALL_SECONDS, check_same_thread=False
        )
        # A lost beat costs nothing: the next one comes in seconds.
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute(TABLE)
        return conn

    return Heartbeat(sidecar_id, connect, SQLITE_CLOCK)


def postgres_heartbeat(sidecar_id: str, dsn: str) -> Heartbeat:
    from sidecar.ops import pgbounds

    watchdog = pgbounds.Watchdog("heartbeat")

    def connect() -> Any:

        conn = pgbounds.connect(dsn, connect_timeout=CALL_SECONDS, autocommit=True)
        # Created with the schema; a writer role may not run DDL, even IF NOT EXISTS.
        with watchdog.bound(conn, CALL_SECONDS):
            found = conn.execute("SELECT to_regclass('audit_sidecars')").fetchone()
            if found is None or found[0] is None:
                conn.execute(TABLE)
        return conn

    return Heartbeat(
        sidecar_id, connect, POSTGRES_CLOCK, bound=lambda conn: watchdog.bound(conn, CALL_SECONDS)
    )


def ledger_heartbeat(sidecar_id: str, beats: Beats) -> Heartbeat:
    """A heartbeat on a PostgreSQL ledger's own connections (bounded there): a sidecar opens
    no other for it."""
    return Heartbeat(sidecar_id, lambda: beats, POSTGRES_CLOCK)


def open_heartbeat(
    sidecar_id: str, audit_path: Path, audit_dsn: str | None, beats: Beats | None = None
) -> Heartbeat:
    """The heartbeat of the sidecar ``sidecar_id`` in the ledger its settings name, through
    ``beats`` when its ledger lends them."""
    if beats is not None:
        return ledger_heartbeat(sidecar_id, beats)
    if audit_dsn:
        return postgres_heartbeat(sidecar_id, audit_dsn)
    return sqlite_heartbeat(sidecar_id, audit_path)


# -- reading ------------------------------------------------------------------------------


@dataclass
class AttemptLife:
    """What the ledger says of one attempt's life: enough to tell whether it is live."""

    attempt_id: str
    seq: int
    scope: str
    sidecar: str
    lease_deadline: str = ""
    ended: bool = False
    fenced_by: str = ""
    delivery: str = ""
    later_begins: list[tuple[int, str]] = field(default_factory=list)


def lives(rows: Iterable[tuple[int, str, str, str, str]]) -> dict[str, AttemptLife]:
    """Each attempt's life, from one run's begin, end and lease events (``seq,
    attempt_id, scope, phase, detail``) oldest first."""
    found: dict[str, AttemptLife] = {}
    newest: dict[str, str] = {}  # by scope: the newest begin
    for seq, attempt_id, scope, phase, detail_text in rows:
        detail: Mapping[str, Any] = json.loads(detail_text or "{}")
        if phase == Phase.ATTEMPT_BEGIN:
            earlier = newest.get(scope)
            if earlier is not None and earlier in found:
                found[earlier].fenced_by = attempt_id
            newest[scope] = attempt_id
            found[attempt_id] = AttemptLife(
                attempt_id,
                seq,
                scope,
                str(detail.get("sidecar", "")),
                str(detail.get("lease_deadline", "")),
                delivery=str(detail.get("delivery_attempt_id", "")),
            )
        elif attempt_id in found and phase == Phase.ATTEMPT_END:
            found[attempt_id].ended = True
        elif attempt_id in found and phase == Phase.LEASE:
            found[attempt_id].lease_deadline = str(detail.get("lease_deadline", ""))
    deliveries = newest.get("")
    for life in found.values():
        if life.delivery and deliveries and deliveries != life.delivery and not life.fenced_by:
            life.fenced_by = deliveries  # a newer delivery of the run fences its tool calls
    return found


def why_not_live(life: AttemptLife | None, alive: set[str], now: float | None = None) -> str:
    """ "" when the attempt is live; else why it is not (ended, fenced, ...)."""
    if life is None or not life.sidecar:
        return "its attempt is not known to be live"
    if life.ended:
        return "its attempt ended"
    if life.fenced_by:
        return f"a newer attempt ({life.fenced_by}) fenced its attempt"
    if life.lease_deadline and _passed(life.lease_deadline, now):
        return f"its attempt's lease passed at {life.lease_deadline}"
    if life.sidecar not in alive:
        return f"its sidecar {life.sidecar} has not been heard from for {STALE_SECONDS:g} s"
    return ""


def _passed(deadline: str, now: float | None) -> bool:
    try:
        stamp = datetime.fromisoformat(deadline)
    except ValueError:
        return True
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return stamp.timestamp() <= (time.time() if now is None else now)


def alive_query(clock: Clock, count: int) -> str:
    """The sidecars among ``count`` ids whose beat is recent, by the ledger's clock
    (placeholders written ``?``, as every operator's query is)."""
    marks = ", ".join("?" * count)
    return (
        f"SELECT sidecar_id FROM audit_sidecars WHERE sidecar_id IN ({marks}) "
        f"AND beat > {clock.now} - {STALE_SECONDS}"
    )


def in_flight_note(life: AttemptLife) -> str:
    """Why an operator must wait, and when the step can be decided."""
    lease = f", its lease passes ({life.lease_deadline})" if life.lease_deadline else ""
    return (
        f"its call is in flight: attempt {life.attempt_id} is live on sidecar {life.sidecar}. "
        f"It can be decided once the attempt ends, a newer attempt of the run fences it{lease}, "
        f"or its sidecar stops (within {STALE_SECONDS:g} s of its last heartbeat)"
    )
