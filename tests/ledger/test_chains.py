"""A PostgreSQL ledger of many chains: runs spread over them, each chain verifies on its own,
a follower misses no event a chain commits late, prune goes chain by chain, and a ledger
of one chain migrates in place (sidecar.ledger.sql.chain_of)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from sidecar.ledger import inspect
from sidecar.ledger.base import GENESIS_HASH, AuditEvent, Phase
from sidecar.ledger.operator import PendingTracker, PostgresOperatorLedger
from sidecar.ledger.pgschema import migrate
from sidecar.ledger.postgres import PostgresLedgerReader
from sidecar.ledger.schema import POSTGRES, POSTGRES_CHAINS
from sidecar.ledger.sql import Queries, append, chain_of
from tests.helpers import postgres as pg
from tests.ledger.support import LedgerPlace, audit_cli
from tests.ledger.test_upgrade import RELEASE, _load


@pytest.fixture
def dsn() -> Iterator[str]:
    made = pg.fresh_database("chains")
    migrate(made)
    yield made
    pg.drop_database(made)


def _runs_in_distinct_chains(count: int) -> list[str]:
    """``count`` run ids, each hashed to a chain of its own."""
    runs: dict[int, str] = {}
    n = 0
    while len(runs) < count:
        run = f"run-{n}"
        runs.setdefault(chain_of(run, POSTGRES_CHAINS), run)
        n += 1
    return list(runs.values())


def _run(run: str, *, landed: bool = True) -> list[AuditEvent]:
    """A run's first attempt and a write (without its outcome unless ``landed``)."""
    attempt = f"{run}.a1"
    events = [
        AuditEvent(run, attempt, "BeginAttempt", Phase.ATTEMPT_BEGIN, rule="triage"),
        AuditEvent(run, attempt, "Create", Phase.INTENT, rule="triage", write_type="create",
                   derived_id=f"art_{run}", occurrence=0),
    ]  # fmt: skip
    if landed:
        events.append(
            AuditEvent(run, attempt, "Create", Phase.OUTCOME, rule="triage", write_type="create",
                       derived_id=f"art_{run}", occurrence=0, outcome="OUTCOME_APPLIED")
        )  # fmt: skip
    return events


def _sql(dsn: str, statement: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return list(cur.fetchall()) if cur.description else []


def _verify(dsn: str, *exports: Path) -> inspect.Verdict:
    return LedgerPlace(None, dsn).verify(*exports)


def _cli(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    return audit_cli(["audit", *args, "--audit-dsn", dsn])


def test_runs_spread_over_chains_and_each_chain_links_to_itself(dsn: str) -> None:
    runs = _runs_in_distinct_chains(5)
    LedgerPlace(None, dsn).append(*[e for run in runs for e in _run(run)])
    rows = _sql(dsn, "SELECT chain, run_id, prev_hash, hash FROM audit_events ORDER BY seq")
    assert {chain for chain, *_ in rows} == {chain_of(run, POSTGRES_CHAINS) for run in runs}
    last: dict[int, str] = {}
    for chain, run, prev, digest in rows:
        assert chain == chain_of(run, POSTGRES_CHAINS)
        assert prev == last.get(chain, GENESIS_HASH)  # linked within its chain alone
        last[chain] = digest
    heads = dict(_sql(dsn, "SELECT chain, hash FROM audit_chains"))
    assert len(heads) == POSTGRES_CHAINS
    assert all(heads[chain] == digest for chain, digest in last.items())
    verdict = _verify(dsn)
    assert verdict.intact and verdict.checked == 15, verdict


def test_a_follower_misses_no_event_a_chain_commits_after_a_later_number(dsn: str) -> None:
    early, late = _runs_in_distinct_chains(2)
    LedgerPlace(None, dsn).append()  # the sidecar's schema, nothing else
    operator = PostgresOperatorLedger(dsn)
    tracker = PendingTracker(operator)
    try:
        assert tracker.undecided() == []
        sql = Queries(POSTGRES)
        with psycopg.connect(dsn) as first, psycopg.connect(dsn) as second:
            # The first writer takes its number and holds its transaction open; the second
            # takes a later number, in another chain, and commits first.
            with first.cursor() as cur:
                taken = append(cur, sql, _run(early, landed=False), POSTGRES_CHAINS)
            with second.cursor() as cur:
                later = append(cur, sql, _run(late), POSTGRES_CHAINS)
            second.commit()
            assert max(n for n in taken if isinstance(n, int)) < min(
                n for n in later if isinstance(n, int)
            )
            assert tracker.undecided() == []  # the late run's write landed: nothing pending
            newest_seen = operator.head()[0]
            first.commit()
        # Following the ledger by its one newest number would never see the first batch.
        assert operator.ids_since(newest_seen, chain_of(early, POSTGRES_CHAINS)) == []
        assert [item.id for item in tracker.undecided()] == [f"art_{early}"]
    finally:
        operator.close()
    assert _verify(dsn).intact


def _cut_tail(dsn: str, run: str) -> int:
    """The last event of ``run``'s chain deleted (not the ledger's newest): its chain."""
    cut = chain_of(run, POSTGRES_CHAINS)
    seq = _sql(dsn, "SELECT MAX(seq) FROM audit_events WHERE chain = %s", (cut,))[0][0]
    _sql(dsn, "DELETE FROM audit_events WHERE seq = %s", (seq,))
    return cut


def _forge_checkpoint(dsn: str, run: str) -> int:
    """A checkpoint no prune recorded in ``run``'s chain, its first two events still there."""
    forged = chain_of(run, POSTGRES_CHAINS)
    seq, digest = _sql(
        dsn, "SELECT seq, hash FROM audit_events WHERE chain = %s ORDER BY seq LIMIT 1 OFFSET 1",
        (forged,),
    )[0]  # fmt: skip
    _sql(
        dsn,
        "INSERT INTO audit_checkpoints (seq, hash, pruned_at, cut_before, events, chain, follows) "
        "VALUES (%s, %s, '', '', 2, %s, 0)",
        (seq, digest, forged),
    )
    return forged


def test_verify_catches_a_cut_tail_in_any_chain(dsn: str) -> None:
    runs = _runs_in_distinct_chains(3)
    LedgerPlace(None, dsn).append(*[e for run in runs for e in _run(run)])
    cut = _cut_tail(dsn, runs[0])  # not the ledger's newest event
    verdict = _verify(dsn)
    assert not verdict.intact
    assert f"in chain {cut}:" in verdict.problem and "deleted from the end" in verdict.problem


def test_verify_catches_a_forged_checkpoint_in_any_chain(dsn: str) -> None:
    runs = _runs_in_distinct_chains(3)
    LedgerPlace(None, dsn).append(*[e for run in runs for e in _run(run)])
    forged = _forge_checkpoint(dsn, runs[1])
    verdict = _verify(dsn)
    assert not verdict.intact
    assert f"in chain {forged}:" in verdict.problem and "not recorded by a prune" in (
        verdict.problem
    )


def test_prune_goes_chain_by_chain_and_a_pending_run_holds_back_its_chain_alone(
    dsn: str, tmp_path: Path
) -> None:
    kept, pruned, also = _runs_in_distinct_chains(3)
    LedgerPlace(None, dsn).append(*_run(kept, landed=False), *_run(pruned), *_run(also))
    export = tmp_path / "old.jsonl"
    done = _cli(dsn, "prune", "--before", "0h", "--export", str(export))
    assert done.returncode == 3, done  # something pending was kept, as `audit pending` says
    assert f"run {kept} has" in done.stdout
    left = {str(run) for (run,) in _sql(dsn, "SELECT DISTINCT run_id FROM audit_events")}
    assert left == {kept}
    marks = _sql(dsn, "SELECT chain, events, follows FROM audit_checkpoints ORDER BY chain")
    assert sorted(chain for chain, *_ in marks) == sorted(
        chain_of(run, POSTGRES_CHAINS) for run in (pruned, also)
    )
    assert all(events == 3 and follows == 0 for _, events, follows in marks)
    assert _verify(dsn).intact
    assert _verify(dsn, export).checked == 8  # the exports and the ledger as one
    # New events go on in a pruned chain after its checkpoint.
    LedgerPlace(None, dsn).append(*_run(pruned)[2:])
    assert _verify(dsn, export).intact


def test_a_ledger_of_one_chain_migrates_in_place_to_many(tmp_path: Path) -> None:
    place = _load("postgres", tmp_path)
    assert place.dsn is not None
    try:
        before = _sql(place.dsn, "SELECT seq, hash FROM audit_events ORDER BY seq")
        state = migrate(place.dsn)  # `actonce audit migrate`
        assert state.chains == POSTGRES_CHAINS
        assert _sql(place.dsn, "SELECT to_regclass('audit_head')") == [(None,)]
        # Its events are chain 0's history, as they were.
        assert _sql(place.dsn, "SELECT seq, hash FROM audit_events ORDER BY seq") == before
        assert _sql(place.dsn, "SELECT DISTINCT chain FROM audit_events") == [(0,)]
        runs = _runs_in_distinct_chains(4)
        place.append(*[e for run in runs for e in _run(run)])
        numbers = [seq for (seq,) in _sql(place.dsn, "SELECT seq FROM audit_events")]
        assert min(numbers[len(before) :]) > max(seq for seq, _ in before)
        export = tmp_path / "export.jsonl"
        export.write_text("\n".join(RELEASE["export"]) + "\n")
        verdict = _verify(place.dsn, export)
        assert verdict.intact, verdict
        # Migrating again keeps the chains it has.
        assert migrate(place.dsn, chains=4).chains == POSTGRES_CHAINS
    finally:
        pg.drop_database(place.dsn)


def test_a_ledger_keeps_the_chain_count_it_was_made_with(tmp_path: Path) -> None:
    made = pg.fresh_database("chains")
    try:
        assert migrate(made, chains=3).chains == 3
        runs = _runs_in_distinct_chains(6)
        LedgerPlace(None, made).append(*[e for run in runs for e in _run(run)])
        assert {c for (c,) in _sql(made, "SELECT DISTINCT chain FROM audit_events")} <= {0, 1, 2}
        reader = PostgresLedgerReader(made)
        try:
            assert sorted(reader.heads()) == [0, 1, 2]
        finally:
            reader.close()
        assert _verify(made).intact
    finally:
        pg.drop_database(made)
