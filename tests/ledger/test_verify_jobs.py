"""``actonce audit verify --jobs``: the chains of a PostgreSQL ledger walked by several
workers at once, each on its own connection, all in one exported snapshot; the verdict is
the one-by-one walk's (sidecar.ledger.inspect, sidecar.ledger.pgsnapshot)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest

from sidecar.ledger import inspect
from sidecar.ledger.base import AuditEvent, LedgerReader, Phase, StoredEvent
from sidecar.ledger.pgschema import migrate
from sidecar.ledger.pgsnapshot import SharedPostgresSnapshot, SharingReader
from sidecar.ledger.schema import POSTGRES, POSTGRES_CHAINS
from sidecar.ledger.sql import Queries, append, chain_of
from tests.helpers import pgbouncer
from tests.helpers import postgres as pg
from tests.ledger.test_chains import (
    _cli,
    _cut_tail,
    _forge_checkpoint,
    _run,
    _runs_in_distinct_chains,
    _sql,
)

CHAINS = 40  # runs in this many distinct chains: ten for each of four workers


@pytest.fixture
def dsn() -> Iterator[str]:
    made = pg.fresh_database("verify_jobs")
    migrate(made)
    yield made
    pg.drop_database(made)


def _write(dsn: str, events: list[AuditEvent]) -> None:
    """``events`` appended in one transaction, as a sidecar's batch is."""
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        append(cur, Queries(POSTGRES), events, POSTGRES_CHAINS)


def _many_chains(dsn: str, prefix: str = "") -> list[str]:
    runs = _runs_in_distinct_chains(CHAINS)
    _write(dsn, [e for run in runs for e in _run(prefix + run)])
    return runs


def _both(dsn: str) -> tuple[str, str]:
    """What `audit verify` prints with --jobs 1 and with --jobs 4, having asserted that
    both exit alike."""
    one, four = _cli(dsn, "verify", "--jobs", "1"), _cli(dsn, "verify", "--jobs", "4")
    assert one.returncode == four.returncode, (one, four)
    return one.stdout, four.stdout


def test_an_intact_ledger_of_many_chains_verifies_intact_with_four_workers(dsn: str) -> None:
    _many_chains(dsn)
    serial, parallel = _both(dsn)
    assert parallel == serial
    assert parallel.startswith(f"ledger intact: {CHAINS * 3} events"), parallel


@pytest.mark.parametrize("harm", ["cut tail", "forged checkpoint"])
def test_a_broken_chain_is_named_as_the_one_by_one_walk_names_it(dsn: str, harm: str) -> None:
    runs = _many_chains(dsn)
    # A chain late in the order, so that the workers have walked others before it.
    late = max(runs, key=lambda run: chain_of(run, POSTGRES_CHAINS))
    chain = (_cut_tail if harm == "cut tail" else _forge_checkpoint)(dsn, late)
    serial, parallel = _both(dsn)
    assert parallel == serial
    why = "deleted from the end" if harm == "cut tail" else "not recorded by a prune"
    assert parallel.startswith("ledger TAMPERED: first bad event #"), parallel
    assert f"in chain {chain}:" in parallel and why in parallel, parallel


def test_of_two_broken_chains_the_first_in_chain_order_is_named(dsn: str) -> None:
    runs = sorted(_many_chains(dsn), key=lambda run: chain_of(run, POSTGRES_CHAINS))
    # The later chain is cut, the earlier forged: whichever a worker finds first, the
    # verdict names the one the one-by-one walk meets first.
    _cut_tail(dsn, runs[-1])
    forged = _forge_checkpoint(dsn, runs[len(runs) // 2])
    serial, parallel = _both(dsn)
    assert parallel == serial
    assert f"in chain {forged}:" in parallel and "not recorded by a prune" in parallel


def test_a_ledger_appended_to_while_verify_runs_verifies_intact(dsn: str) -> None:
    _many_chains(dsn)
    before = _sql(dsn, "SELECT COUNT(*) FROM audit_events")[0][0]
    stop = threading.Event()
    batches = 0

    def keep_appending() -> None:
        nonlocal batches
        while not stop.is_set():
            _many_chains(dsn, prefix=f"more{batches}-")
            batches += 1

    appender = threading.Thread(target=keep_appending)
    appender.start()
    try:
        outcomes = []
        while batches < 3 and appender.is_alive():  # until batches committed meanwhile
            outcomes.append(_cli(dsn, "verify", "--jobs", "4"))
    finally:
        stop.set()
        appender.join()
    assert batches >= 3, "the appender stopped"
    assert all(done.returncode == 0 for done in outcomes), outcomes
    assert all(done.stdout.startswith("ledger intact:") for done in outcomes), outcomes
    assert _sql(dsn, "SELECT COUNT(*) FROM audit_events")[0][0] > before


class _AppendBetween(SharedPostgresSnapshot):
    """A batch in every chain committed after the first reader shared its snapshot and
    before each other worker opens its own: what a busy ledger does, made certain."""

    def __init__(self, dsn: str, *, adopt: bool) -> None:
        super().__init__(dsn)
        self.dsn, self.adopt, self.appended = dsn, adopt, 0
        self.lock = threading.Lock()
        self.ready = 0
        self.opened = threading.Event()  # every other worker has its reader

    def wait_for_workers(self, _done: int, _total: int) -> None:
        """Shown the progress: holds the first reader's walk, after its first chain, until
        every other worker has a reader, so that they walk chains too."""
        assert self.opened.wait(timeout=60)

    @contextmanager
    def reader(self, snapshot: str) -> Iterator[LedgerReader]:
        with self.lock:
            batch = self.appended
            self.appended += 1
        _many_chains(self.dsn, prefix=f"between{batch}-")
        if self.adopt:
            with super().reader(snapshot) as adopted:
                self._ready()
                yield adopted
            return
        worker = SharingReader(self.dsn)  # a snapshot of its own, taken later
        try:
            with worker.snapshot():
                worker.heads()  # its first statement: the snapshot is taken now
                self._ready()
                yield worker
        finally:
            worker.close()

    def _ready(self) -> None:
        with self.lock:
            self.ready += 1
            if self.ready == 3:
                self.opened.set()


@pytest.mark.parametrize("adopt", [True, False])
def test_the_workers_read_the_first_readers_snapshot(dsn: str, adopt: bool) -> None:
    _many_chains(dsn)
    shared = _AppendBetween(dsn, adopt=adopt)
    reader = SharingReader(dsn)
    try:
        verdict = inspect.verify(reader, shared.wait_for_workers, jobs=4, shared=shared)
    finally:
        reader.close()
    assert shared.appended == 3
    if adopt:  # the ledger as it was when the walk began, whatever came after
        assert verdict.intact and verdict.checked == CHAINS * 3, verdict
    else:  # without the shared snapshot, a chain read later outruns the heads read first
        assert not verdict.intact and "the ledger's head records" in verdict.problem, verdict


def test_the_decisions_are_shown_in_the_order_the_one_by_one_walk_shows_them(dsn: str) -> None:
    runs = _runs_in_distinct_chains(CHAINS)
    decided = [
        AuditEvent(run, f"{run}.a1", "Resolve", Phase.DECISION, rule="triage",
                   write_type="create", derived_id=f"art_{run}", detail={"decision": "landed"})
        for run in runs[::3]
    ]  # fmt: skip
    _write(dsn, [e for run in runs for e in _run(run, landed=False)] + decided)
    shown: dict[int, list[int]] = {}
    for jobs in (1, 4):
        seen: list[StoredEvent] = []
        reader = SharingReader(dsn)
        try:
            verdict = inspect.verify(
                reader, decisions=seen.append, jobs=jobs, shared=SharedPostgresSnapshot(dsn)
            )
        finally:
            reader.close()
        assert verdict.intact, verdict
        shown[jobs] = [e.seq for e in seen if e.event.phase == Phase.DECISION]
    assert shown[4] == shown[1] and len(shown[1]) == len(decided)


@pytest.mark.skipif(not pgbouncer.available(), reason="needs Debian's pgbouncer: make pgbouncer")
def test_verify_with_four_workers_through_pgbouncer_in_transaction_mode(dsn: str) -> None:
    """An operator's DSN is often the fleet's pooler's: the workers' snapshot, exported by
    one transaction and adopted by the others, holds there too, and so does the verdict."""
    runs = _many_chains(dsn)
    with pgbouncer.Pooler(pg.server_dsn()) as pooler:
        pooled = pooler.dsn(dsn)
        intact = _cli(pooled, "verify", "--jobs", "4")
        assert intact.returncode == 0, intact
        assert intact.stdout.startswith(f"ledger intact: {CHAINS * 3} events"), intact
        chain = _cut_tail(dsn, max(runs, key=lambda run: chain_of(run, POSTGRES_CHAINS)))
        direct, through = _cli(dsn, "verify", "--jobs", "4"), _cli(pooled, "verify", "--jobs", "4")
    assert through.returncode == direct.returncode != 0, (direct, through)
    assert through.stdout == direct.stdout
    assert f"in chain {chain}:" in through.stdout and "deleted from the end" in through.stdout
