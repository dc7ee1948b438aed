"""The operator's queries on both ledger backends: what is pending, decisions, runs by page."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest

from sidecar.assembly.pending_metrics import PendingCollector
from sidecar.ledger.base import AuditEvent, LedgerError, Phase
from sidecar.ledger.operator import (
    OperatorLedger,
    PendingTracker,
    PostgresOperatorLedger,
    RunFilter,
    SqliteOperatorLedger,
    open_operator_ledger,
)
from sidecar.ledger.pending import Decision, DecisionRefused, Kind
from tests.harness import sidecar_config
from tests.helpers import postgres as pg
from tests.helpers.locks import ledger_locked
from tests.ledger.support import LedgerPlace


class Ledgers(LedgerPlace):
    def operator(self, *, read_only: bool = False) -> OperatorLedger:
        return open_operator_ledger(self.db, self.dsn, read_only=read_only)


@pytest.fixture(params=["sqlite", "postgres"])
def ledgers(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Ledgers]:
    if request.param == "postgres":
        dsn = pg.fresh_database("ledger")
        made = Ledgers(None, dsn)
        made.append()  # creates the schema
        yield made
        pg.drop_database(dsn)
    else:
        made = Ledgers(tmp_path / "audit.db", None)
        made.append()
        yield made


def begin(run: str, attempt: str, rule: str = "triage") -> AuditEvent:
    return AuditEvent(run, attempt, "BeginAttempt", Phase.ATTEMPT_BEGIN, rule=rule, checkpoint="c")


def event(run: str, attempt: str, phase: str, derived: str, **fields: object) -> AuditEvent:
    rpc = str(fields.pop("rpc", "BeginStep" if derived.startswith("stp") else "Create"))
    write_type = "step" if derived.startswith("stp") else "create"
    return AuditEvent(run, attempt, rpc, phase, rule="triage", checkpoint="c",
                      write_type=write_type, derived_id=derived, occurrence=0,
                      digest="d" * 64, **fields)  # type: ignore[arg-type]  # fmt: skip


def step_begin(
    run: str, attempt: str, step: str, effect: str = "NON_IDEMPOTENT_WRITE"
) -> list[AuditEvent]:
    detail = {"tool": "charge_card", "effect": effect}
    return [
        event(run, attempt, Phase.STEP_BEGIN, step, detail=detail),
        event(run, attempt, Phase.OUTCOME, step, outcome="OUTCOME_APPLIED", detail=detail),
    ]


def test_pending_lists_each_kind_newest_first_and_nothing_settled(ledgers: Ledgers) -> None:
    ledgers.append(
        begin("run-a", "a1"),
        *step_begin("run-a", "a1", "stp_doubt"),
        *step_begin("run-a", "a1", "stp_read", effect="READ_ONLY"),  # read-only: run again
        *step_begin("run-a", "a1", "stp_ended"),
        event(
            "run-a", "a1", Phase.STEP_END, "stp_ended", rpc="EndStep", detail={"result_json": "{}"}
        ),
        event("run-a", "a1", Phase.INTENT, "art_open"),  # the sidecar died here
        event("run-a", "a1", Phase.INTENT, "art_retried"),
        begin("run-a", "a2"),
        event("run-a", "a2", Phase.INTENT, "art_retried"),
        event("run-a", "a2", Phase.OUTCOME, "art_retried", outcome="OUTCOME_ALREADY_APPLIED"),
        event("run-a", "a2", Phase.INTENT, "art_unknown"),
        event(
            "run-a",
            "a2",
            Phase.OUTCOME,
            "art_unknown",
            reason="AUDIT_PERSISTENCE_FAILED",
            failure_class="UNKNOWN",
        ),
        event("run-a", "a2", Phase.INTENT, "art_refused"),
        event(
            "run-a", "a2", Phase.OUTCOME, "art_refused", reason="NOT_FOUND", failure_class="REFUSED"
        ),
    )
    ledger = ledgers.operator(read_only=True)
    try:
        items = ledger.pending()
        assert [(i.id, i.kind) for i in items] == [
            ("art_unknown", Kind.WRITE_FAILED_UNKNOWN),
            ("art_open", Kind.WRITE_WITHOUT_OUTCOME),
            ("stp_doubt", Kind.STEP_IN_DOUBT),
        ]
        step = items[-1]
        assert (step.run_id, step.rule, step.attempt_id, step.tool) == (
            "run-a",
            "triage",
            "a1",
            "charge_card",
        )
        # Each says the command that decides it, with the id it takes.
        assert [i.why.rsplit("then decide with ", 1)[-1] for i in items[:2]] == [
            "`actonce audit resolve art_unknown --landed|--not-landed`",
            "`actonce audit resolve art_open --landed|--not-landed`",
        ]
        assert step.why.endswith("`actonce audit resolve stp_doubt --ran|--did-not-run`")
        assert [i.id for i in ledger.pending(run_id="run-a")] == [i.id for i in items]
        assert ledger.pending(run_id="run-other") == []
    finally:
        ledger.close()


def test_a_decision_settles_an_item_once_and_the_chain_stays_intact(ledgers: Ledgers) -> None:
    ledgers.append(begin("run-b", "b1"), *step_begin("run-b", "b1", "stp_x"),
                   event("run-b", "b1", Phase.INTENT, "art_y"))  # fmt: skip
    ledger = ledgers.operator()
    try:
        with pytest.raises(DecisionRefused, match="is a write"):
            ledger.resolve("art_y", Decision.RAN, by="al", reason="r", result_json="{}")
        with pytest.raises(DecisionRefused, match="is a step"):
            ledger.resolve("stp_x", Decision.LANDED, by="al", reason="r")
        with pytest.raises(DecisionRefused, match="authenticated operator"):
            ledger.resolve("stp_x", Decision.DID_NOT_RUN, by="", reason="r")
        stored = ledger.resolve("stp_x", Decision.DID_NOT_RUN, by="al", reason="no charge")
        assert stored.event.phase == "decision" and stored.event.run_id == "run-b"
        assert stored.event.detail["decision"] == "did_not_run"
        ledger.resolve("art_y", Decision.NOT_LANDED, by="al", reason="not in the store")
        with pytest.raises(DecisionRefused, match=f"already decided: event #{stored.seq}"):
            ledger.resolve("stp_x", Decision.RAN, by="bo", reason="r", result_json="{}")
        assert ledger.pending() == []
    finally:
        ledger.close()
    # Run again after "did not run", and interrupted again: in doubt again, decided anew.
    ledgers.append(begin("run-b", "b2"), *step_begin("run-b", "b2", "stp_x"))
    ledger = ledgers.operator()
    try:
        assert [(i.id, i.attempt_id) for i in ledger.pending()] == [("stp_x", "b2")]
        ledger.resolve("stp_x", Decision.RAN, by="al", reason="charged", result_json='{"ok":true}')
        assert ledger.pending() == []
    finally:
        ledger.close()
    # A later attempt begins it and gets the decided result: still nothing pending.
    ledgers.append(begin("run-b", "b3"), *step_begin("run-b", "b3", "stp_x"))
    ledger = ledgers.operator()
    try:
        assert ledger.pending() == []
    finally:
        ledger.close()
    assert ledgers.verify().intact


def test_two_operators_deciding_at_once_record_one_decision(ledgers: Ledgers) -> None:
    ledgers.append(begin("run-c", "c1"), *step_begin("run-c", "c1", "stp_z"))
    outcomes: list[str] = []
    barrier = threading.Barrier(4)

    def decide(who: int) -> None:
        ledger = ledgers.operator()
        try:
            barrier.wait()
            ledger.resolve("stp_z", Decision.DID_NOT_RUN, by=f"op{who}", reason="r")
            outcomes.append("recorded")
        except DecisionRefused:
            outcomes.append("refused")
        finally:
            ledger.close()

    threads = [threading.Thread(target=decide, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(outcomes) == ["recorded", "refused", "refused", "refused"]
    assert ledgers.verify().intact


def test_runs_page_in_sql_with_filters_and_counts(ledgers: Ledgers) -> None:
    events: list[AuditEvent] = []
    for n in range(7):
        run = f"run-{n}"
        events.append(begin(run, f"{run}/1", rule="pager" if n % 2 else "triage"))
        events.append(event(run, f"{run}/1", Phase.INTENT, f"art_{n}"))
        outcome = "OUTCOME_ALREADY_APPLIED" if n == 3 else "OUTCOME_APPLIED"
        events.append(event(run, f"{run}/1", Phase.OUTCOME, f"art_{n}", outcome=outcome))
    events.append(event("run-5", "run-5/1", Phase.INTENT, "art_x"))
    events.append(
        event(
            "run-5", "run-5/1", Phase.OUTCOME, "art_x", reason="NOT_FOUND", failure_class="REFUSED"
        )
    )
    ledgers.append(*events)
    ledger = ledgers.operator()
    try:
        first = ledger.runs_page(RunFilter(), limit=3)
        assert [r.run_id for r in first.runs] == ["run-6", "run-5", "run-4"] and first.more
        last = ledger.runs_page(RunFilter(), offset=6, limit=3)
        assert [r.run_id for r in last.runs] == ["run-0"] and not last.more
        five = ledger.runs_page(RunFilter(run_id="n-5")).runs
        assert [(r.run_id, r.writes) for r in five] == [("run-5", {"applied": 1, "failed": 1})]
        assert [r.run_id for r in ledger.runs_page(RunFilter(rule="pager")).runs] == [
            "run-5",
            "run-3",
            "run-1",
        ]
        assert [r.run_id for r in ledger.runs_page(RunFilter(outcome="already_applied")).runs] == [
            "run-3"
        ]
        assert [r.run_id for r in ledger.runs_page(RunFilter(outcome="failed")).runs] == ["run-5"]
        pending_only = ledger.runs_page(RunFilter(pending_only=True), pending_runs={"run-2": 1})
        assert [(r.run_id, r.pending) for r in pending_only.runs] == [("run-2", 1)]
        assert ledger.runs_page(RunFilter(run_id="%")).runs == []  # LIKE's wildcards are literal
        assert ledger.runs_page(RunFilter(since="2999-01-01")).runs == []
        assert len(ledger.run_events("run-5")) == 5
        assert [e.seq for e in ledger.run_events("run-5", after=0, limit=2)] == [
            e.seq for e in ledger.run_events("run-5")[:2]
        ]
        assert ledger.run_count() == 7
    finally:
        ledger.close()


def test_the_gauge_counts_pending_items_by_kind(ledgers: Ledgers) -> None:
    collector = PendingCollector(ledgers.operator, max_age=0)

    def counts() -> dict[str, float]:
        family = next(iter(collector.collect()))
        return {s.labels["kind"]: s.value for s in family.samples}

    assert counts() == {k.value: 0 for k in Kind}
    ledgers.append(begin("run-g", "g1"), *step_begin("run-g", "g1", "stp_g"))
    assert counts()["step_in_doubt"] == 1
    ledger = ledgers.operator()
    try:
        ledger.resolve("stp_g", Decision.DID_NOT_RUN, by="al", reason="r")
    finally:
        ledger.close()
    assert counts()["step_in_doubt"] == 0


def test_the_tracker_follows_the_ledger_from_new_events_alone(ledgers: Ledgers) -> None:
    ledger = ledgers.operator()
    tracker = PendingTracker(ledger)
    try:
        assert tracker.items() == []
        ledgers.append(begin("run-t", "t1"), *step_begin("run-t", "t1", "stp_t"),
                       event("run-t", "t1", Phase.INTENT, "art_t"))  # fmt: skip
        assert [i.id for i in tracker.items()] == ["art_t", "stp_t"]
        ledgers.append(event("run-t", "t1", Phase.OUTCOME, "art_t", outcome="OUTCOME_APPLIED"))
        assert [i.id for i in tracker.items()] == ["stp_t"]
        ledger.resolve("stp_t", Decision.DID_NOT_RUN, by="al", reason="r")
        assert tracker.items() == ledger.pending() == []
        ledgers.append(begin("run-t", "t2"), *step_begin("run-t", "t2", "stp_t"))
        assert tracker.items() == ledger.pending() != []
    finally:
        ledger.close()


def test_a_decision_on_a_locked_ledger_fails_in_bounded_time_and_records_nothing(
    ledgers: Ledgers,
) -> None:
    ledgers.append(begin("run-l", "l1"), *step_begin("run-l", "l1", "stp_l"))
    if ledgers.dsn:
        ledger: OperatorLedger = PostgresOperatorLedger(ledgers.dsn, lock_timeout_ms=200)
    else:
        assert ledgers.db is not None
        ledger = SqliteOperatorLedger(ledgers.db, busy_timeout_ms=200)
    config = sidecar_config(ledgers.db.parent if ledgers.db else Path("."), audit_dsn=ledgers.dsn)
    if ledgers.db:
        config = replace(config, audit_db=ledgers.db)
    try:
        with ledger_locked(config), pytest.raises(LedgerError, match="not recorded"):
            ledger.resolve("stp_l", Decision.DID_NOT_RUN, by="al", reason="r")
        assert [i.id for i in ledger.pending()] == ["stp_l"]
        ledger.resolve("stp_l", Decision.DID_NOT_RUN, by="al", reason="r")  # unlocked: recorded
        assert ledger.pending() == []
    finally:
        ledger.close()


def test_the_postgres_queries_reconnect_after_their_connection_is_cut() -> None:
    dsn = pg.fresh_database("ledger")
    try:
        Ledgers(None, dsn).append(begin("run-r", "r1"), *step_begin("run-r", "r1", "stp_r"))
        ledger = PostgresOperatorLedger(dsn)
        try:
            assert [i.id for i in ledger.pending()] == ["stp_r"]
            with psycopg.connect(dsn, autocommit=True) as admin:
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            with pytest.raises(LedgerError):
                ledger.pending()  # the query in flight on the cut connection fails
            assert [i.id for i in ledger.pending()] == ["stp_r"]  # the next one reconnects
        finally:
            ledger.close()
    finally:
        pg.drop_database(dsn)
