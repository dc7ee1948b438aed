"""A ledger made by the release before schema versions keeps working after an upgrade.

`data/ledger-release-0.1.json` holds a ledger as that release left it, on either database:
its DDL, its rows (a run with an ended step, a scoped attempt, one prune) and the prune's
export. Opened by this release, it verifies as it did, gains what this schema adds, and
its runs keep the rules their first attempts began under.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import psycopg
import pytest

from sidecar.ledger import pgschema
from sidecar.ledger.audit_command import open_reader
from sidecar.ledger.pgschema import SCHEMA_VERSION, connect, schema_version
from tests.faults.support import wait_for
from tests.harness import refusal, sidecar_config, start_sidecar
from tests.helpers import postgres as pg
from tests.ledger.support import LedgerPlace

RELEASE = json.loads((Path(__file__).parent / "data" / "ledger-release-0.1.json").read_text())


def _load(backend: str, tmp_path: Path) -> LedgerPlace:
    tables: dict[str, Any] = RELEASE["tables"]
    if backend == "sqlite":
        db = tmp_path / "audit.db"
        with sqlite3.connect(db) as lite:
            lite.executescript(RELEASE["sqlite_schema"])
            lite.execute("DELETE FROM audit_head")
            for name, table in tables.items():
                marks = ", ".join("?" * len(table["columns"]))
                lite.executemany(f"INSERT INTO {name} VALUES ({marks})", table["rows"])
        return LedgerPlace(db, None)
    dsn = pg.fresh_database("upgrade")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(RELEASE["postgres_schema"])
        conn.execute("DELETE FROM audit_head")
        for name, table in tables.items():
            columns = ", ".join(table["columns"])
            marks = ", ".join(["%s"] * len(table["columns"]))
            rows = [[True, *row[1:]] if name == "audit_head" else row for row in table["rows"]]
            with conn.cursor() as cur:
                cur.executemany(f"INSERT INTO {name} ({columns}) VALUES ({marks})", rows)
    return LedgerPlace(None, dsn)


@pytest.fixture(params=["sqlite", "postgres"])
def released(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LedgerPlace]:
    place = _load(str(request.param), tmp_path)
    (tmp_path / "export.jsonl").write_text("\n".join(RELEASE["export"]) + "\n")
    yield place
    if place.dsn:
        pg.drop_database(place.dsn)


def test_a_ledger_of_the_release_before_verifies_upgrades_and_keeps_its_runs_rules(
    released: LedgerPlace, tmp_path: Path
) -> None:
    export = tmp_path / "export.jsonl"
    assert released.verify().intact
    assert released.verify(export).checked == 7
    config = sidecar_config(tmp_path / "data", audit_db=released.db, audit_dsn=released.dsn)
    running = start_sidecar(config)  # opens the ledger, and brings its schema up to date
    try:
        if released.dsn:
            with connect(released.dsn) as conn:
                assert schema_version(conn) == SCHEMA_VERSION
        # The run began under "payments" before runs were bound: its first begin says so.
        with pytest.raises(grpc.RpcError) as caught:
            running.begin("pay-7781", rule="chat")
        assert refusal(caught.value).metadata["run_rule"] == "payments"
        running.begin("pay-7781", rule="payments")
        running.begin("new-run", rule="chat")
    finally:
        running.stop()
    verdict = released.verify(export)
    assert verdict.intact and verdict.checked == 9, verdict
    reader = open_reader({"audit_db": released.db, "audit_dsn": released.dsn})
    try:
        assert [e.event.rule for e in reader.events(run_id="pay-7781")][-1] == "payments"
    finally:
        reader.close()


def test_a_sidecar_that_finds_the_ledger_brought_up_once_it_holds_the_lock_changes_nothing(
    tmp_path: Path,
) -> None:
    """A fleet rolled out onto a ledger of an older schema: every sidecar finds it behind and
    waits for the schema's lock. The first brings it up and appends; the next, once it holds
    the lock, must not run the upgrade's DDL again, which waits on that append's lock on the
    events table (and, with the first sidecar wanting more, deadlocked one of them)."""
    place = _load("postgres", tmp_path)
    assert place.dsn is not None
    dsn = place.dsn
    try:
        with psycopg.connect(dsn) as first:
            first.execute("SELECT pg_advisory_lock(%s)", (pgschema._SCHEMA_LOCK,))
            first.commit()
            opened: dict[str, Any] = {}

            def open_second() -> None:
                try:
                    opened["state"] = pgschema.ensure_schema(dsn)
                except Exception as exc:
                    opened["error"] = exc

            second = threading.Thread(target=open_second)
            second.start()
            assert wait_for(lambda: _waits_for_an_advisory_lock(first), timeout=30)
            pgschema._create(first)  # the first sidecar brings it up, under the lock it holds
            first.commit()
            with psycopg.connect(dsn) as appending:
                appending.execute("LOCK TABLE audit_events IN ROW EXCLUSIVE MODE")
                first.execute("SELECT pg_advisory_unlock(%s)", (pgschema._SCHEMA_LOCK,))
                first.commit()
                # While the first sidecar's append holds the events table, the second opens.
                second.join(timeout=60)
                assert not second.is_alive(), "the second sidecar waits on the events table"
                appending.rollback()
        assert "error" not in opened, opened
        assert opened["state"].version == SCHEMA_VERSION
    finally:
        pg.drop_database(dsn)


def _waits_for_an_advisory_lock(conn: psycopg.Connection[Any]) -> bool:
    row = conn.execute(
        "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
    ).fetchone()
    conn.commit()
    return bool(row and row[0])


def test_a_ledger_the_search_path_finds_in_a_later_schema_is_found_current() -> None:
    """PostgreSQL's default search path puts the role's own schema first: a ledger in
    ``public`` beside an empty schema of the role's name is the ledger, current, and opening it
    makes no second one there."""
    dsn = pg.fresh_database("search_path")
    try:
        pgschema.migrate(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            role = conn.execute("SELECT current_user").fetchone()
            assert role is not None
            conn.execute(f'CREATE SCHEMA "{role[0]}"')
        assert pgschema.ensure_schema(dsn).version == SCHEMA_VERSION
        with psycopg.connect(dsn, autocommit=True) as conn:
            made = conn.execute(
                "SELECT COUNT(*) FROM pg_tables WHERE schemaname = current_user"
            ).fetchone()
        assert made == (0,)
    finally:
        pg.drop_database(dsn)
