"""`audit show`, `audit pending` and `audit verify` scale with what they read, not with the
ledger's size: their statements go through the ledger's indexes (EXPLAIN on both backends),
and verify of the whole chain streams in constant memory."""

from __future__ import annotations

import io
import sqlite3
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from sidecar.ledger import inspect, schema, sql
from sidecar.ledger.audit_command import open_reader
from sidecar.ledger.base import GENESIS_HASH, AuditEvent, Phase
from sidecar.ledger.operator import SqliteOperatorLedger
from sidecar.ledger.pgschema import ensure_schema
from sidecar.ledger.sqlite import connect
from tests.helpers import postgres as pg


def runs(first: int, count: int) -> Iterator[AuditEvent]:
    """Runs as the sidecar records them: writes, steps begun and ended, a step in doubt, a
    write without an outcome, one that failed UNKNOWN."""
    for n in range(first, first + count):
        run, attempt = f"run-{n:06d}", f"att-{n:06d}"
        yield AuditEvent(run, attempt, "BeginAttempt", Phase.ATTEMPT_BEGIN, rule="triage")
        for i in range(3):
            for step in (Phase.INTENT, Phase.OUTCOME):
                yield AuditEvent(run, attempt, "Create", step, write_type="create",
                                 derived_id=f"art_{n}_{i}", occurrence=0,
                                 outcome="OUTCOME_APPLIED" if step == Phase.OUTCOME else "")  # fmt: skip
        detail = {"tool": "charge_card", "effect": "NON_IDEMPOTENT_WRITE"}
        yield AuditEvent(run, attempt, "BeginStep", Phase.STEP_BEGIN, write_type="step",
                         derived_id=f"stp_{n}", detail=detail)  # fmt: skip
        if n % 50:
            yield AuditEvent(run, attempt, "EndStep", Phase.STEP_END, write_type="step",
                             derived_id=f"stp_{n}", detail={"result_json": "{}"})  # fmt: skip
        if n % 70 == 0:
            yield AuditEvent(run, attempt, "Create", Phase.INTENT, write_type="create",
                             derived_id=f"art_{n}_lost", occurrence=0)  # fmt: skip
        if n % 90 == 0:
            yield AuditEvent(run, attempt, "Edit", Phase.OUTCOME, write_type="edit",
                             derived_id=f"art_{n}_x", reason="UNAVAILABLE",
                             failure_class="UNKNOWN")  # fmt: skip
        yield AuditEvent(run, attempt, "EndAttempt", Phase.ATTEMPT_END)


def fill(db: Any, placeholder: str, events: Iterator[AuditEvent]) -> int:
    """Lay ``events`` onto the chain of an empty ledger with the ledger's own rows, in one
    transaction (``db`` is a DB-API connection); the count written."""
    batch = sql.chain(list(events), 0, GENESIS_HASH, {})
    marks = ", ".join([placeholder] * len(schema.COLUMNS.split(",")))
    cur = db.cursor()
    cur.executemany(f"INSERT INTO audit_events ({schema.COLUMNS}) VALUES ({marks})", batch.rows)
    cur.execute(f"UPDATE audit_chains SET seq = {placeholder}, hash = {placeholder} "
                "WHERE chain = 0", (batch.seq, batch.head))  # fmt: skip
    db.commit()
    return batch.seq


def traced_statements(path: Path) -> dict[str, list[str]]:
    """Every statement `audit show`, `audit pending` (all, and one run's) and `audit verify`
    run on the ledger file, as SQLite ran them (parameters in place)."""
    found: dict[str, list[str]] = {}

    reader = open_reader({"audit_db": path, "audit_dsn": None})
    conn = reader._conn  # type: ignore[attr-defined]
    for command in ("show", "verify"):
        found[command] = []
        conn.set_trace_callback(found[command].append)
        if command == "show":
            inspect.show_run(reader, "run-000007", io.StringIO())
        else:
            assert inspect.verify(reader).intact
    reader.close()
    operator = SqliteOperatorLedger(path, read_only=True)
    found["pending"] = []
    operator._conn.set_trace_callback(found["pending"].append)
    assert operator.pending()
    assert operator.pending(run_id="run-000050")
    operator.close()
    return {command: [s for s in statements if s.lstrip().upper().startswith("SELECT")]
            for command, statements in found.items()}  # fmt: skip


@pytest.fixture
def ledger_file(tmp_path: Path) -> Path:
    path = tmp_path / "audit.db"
    conn = connect(path, busy_timeout_ms=1000)
    conn.execute("BEGIN")
    fill(conn, "?", runs(0, 300))
    conn.close()
    return path


def test_show_pending_and_verify_read_sqlite_through_indexes(ledger_file: Path) -> None:
    statements = traced_statements(ledger_file)
    lite = sqlite3.connect(ledger_file)
    for command, texts in statements.items():
        assert texts, command
        for text in texts:
            plan = [str(row[3]) for row in lite.execute("EXPLAIN QUERY PLAN " + text)]
            where = f"{command}: {' '.join(text.split())[:160]} -> {plan}"
            for line in plan:
                if "audit_events" in line or line.startswith(("SCAN b", "SEARCH b",
                                                              "SCAN o", "SEARCH o")):  # fmt: skip
                    # No full pass over the events but verify's walk (a SEARCH from its
                    # checkpoint); a scan is of the partial index of UNKNOWN failures.
                    if line.startswith("SCAN"):
                        assert "audit_events_unknown" in line, where
                    # A lookup per event read (a correlated subquery) narrows by more than a
                    # phase: by its id, or its run.
                    if "(phase=?)" in line:
                        assert line.startswith("SEARCH b"), where
    joined = {command: "\n".join(texts) for command, texts in statements.items()}
    show_plan = [str(r[3]) for text in statements["show"]
                 for r in lite.execute("EXPLAIN QUERY PLAN " + text)]  # fmt: skip
    assert any("audit_events_run (run_id=? AND seq>?)" in line for line in show_plan), show_plan
    assert "WHERE seq > 0 ORDER BY seq" in joined["verify"]
    lite.close()


@pytest.fixture
def pg_ledger(ledger_file: Path) -> Iterator[str]:
    dsn = pg.fresh_database("scaling")
    ensure_schema(dsn)
    with psycopg.connect(dsn) as conn:
        fill(conn, "%s", runs(0, 300))
    yield dsn
    pg.drop_database(dsn)


def test_show_pending_and_verify_read_postgres_through_indexes(
    ledger_file: Path, pg_ledger: str
) -> None:
    # The same statements (the SQL is written once for both), planned by PostgreSQL with
    # sequential scans priced out: any left has no index to go through.
    statements = traced_statements(ledger_file)
    with psycopg.connect(pg_ledger, autocommit=True) as conn:
        conn.execute("ANALYZE audit_events")
        conn.execute("SET enable_seqscan = off")
        for command, texts in statements.items():
            for text in texts:
                if "audit_events" not in text or "pragma_" in text:
                    continue  # the head, the checkpoint, SQLite's catalogue: one row each
                plan = "\n".join(str(r[0]) for r in conn.execute("EXPLAIN " + text))
                assert "Seq Scan on audit_events" not in plan, f"{command}: {text}\n{plan}"
                if command == "show":
                    assert "Index Cond: ((run_id = " in plan and "audit_events_run" in plan, plan


def _verify_peak(reader_values: dict[str, Any]) -> int:
    reader = open_reader(reader_values)
    try:
        tracemalloc.start()
        verdict = inspect.verify(reader)
        _now, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    finally:
        reader.close()
    assert verdict.intact
    return peak


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_verify_of_the_whole_chain_streams_in_constant_memory(backend: str, tmp_path: Path) -> None:
    peaks = []
    for size in (100, 400):  # runs: about 1,000 and 4,000 events
        if backend == "postgres":
            dsn = pg.fresh_database("streams")
            ensure_schema(dsn)
            with psycopg.connect(dsn) as conn:
                fill(conn, "%s", runs(0, size))
            try:
                peaks.append(_verify_peak({"audit_dsn": dsn, "audit_db": None}))
            finally:
                pg.drop_database(dsn)
        else:
            path = tmp_path / f"audit-{size}.db"
            lite = connect(path, busy_timeout_ms=1000)
            lite.execute("BEGIN")
            fill(lite, "?", runs(0, size))
            lite.close()
            peaks.append(_verify_peak({"audit_db": path, "audit_dsn": None}))
    # Four times the events, about the same peak: no event outlives its turn in the walk
    # (holding them all would take some 4 MB more).
    small, large = peaks
    assert large < small * 1.25 + 256 * 1024, peaks
