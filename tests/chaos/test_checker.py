"""The checker is not vacuous: a seed played for real passes, and the same data, tampered with
by hand the way a bug would leave it, is caught."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from chaos.plan import make_plan
from chaos.plan_writes import Effect
from chaos.play import Played, play
from chaos.run_result import Execution

# A seed whose plan makes every kind of write (creates, proposals, edits, threads, notices,
# sends, steps; edits of object members, nested members and array elements), in two runs.
SEED = 92


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Played]:
    seed_dir = tmp_path_factory.mktemp("chaos") / "seed"
    seed_dir.mkdir()
    yield play(make_plan(SEED, topology="embedded", max_kills=0, caller_faults=False), seed_dir)


@pytest.fixture
def tampered(played: Played, tmp_path: Path) -> Iterator[Played]:
    """A copy of the played seed's files, free to be tampered with."""
    copy = tmp_path / "seed"
    (copy / "sidecar").mkdir(parents=True)
    # A data folder of one file, or of two made before the store joined the ledger's file.
    for name in {played.store_path.name, played.ledger_path.name}:
        source = sqlite3.connect(played.seed_dir / "sidecar" / name)
        target = sqlite3.connect(copy / "sidecar" / name)
        source.backup(target)
        source.close()
        target.close()
    yield replace(played, seed_dir=copy)


def _store(played: Played) -> sqlite3.Connection:
    return sqlite3.connect(played.store_path, isolation_level=None)


def test_a_clean_seed_has_no_findings(played: Played) -> None:
    assert all(run.finished for run in played.results.values())
    found = played.check()
    assert (found.duplicates, found.losses, found.violations) == (0, 0, [])


def test_an_artifact_stored_twice_is_a_duplicate(tampered: Played) -> None:
    with _store(tampered) as db:
        db.execute(
            "INSERT INTO artifacts (id, kind, version, data_json, archived) "
            "SELECT 'art_twin', kind, version, data_json, archived FROM artifacts LIMIT 1"
        )
    found = tampered.check()
    assert found.duplicates == 1
    # It also reached the store with no audited intent, and no planned write has its id.
    assert any("art_twin is in the store with no audited intent" in v for v in found.violations)
    assert any("art_twin is in the store but no planned write" in v for v in found.violations)


def test_a_message_missing_from_the_store_is_a_loss(tampered: Played) -> None:
    with _store(tampered) as db:
        (message_id,) = db.execute(
            "SELECT id FROM messages WHERE kind = 'notice' ORDER BY id LIMIT 1"
        ).fetchone()
        db.execute("DELETE FROM messages WHERE id = ?", (message_id,))
    found = tampered.check()
    assert found.losses >= 1
    assert any(f"acknowledged Notice {message_id}" in v for v in found.violations)


def test_a_sent_message_without_its_turn_request_is_a_loss(tampered: Played) -> None:
    with _store(tampered) as db:
        db.execute("DELETE FROM turn_requests WHERE n = (SELECT MIN(n) FROM turn_requests)")
    found = tampered.check()
    assert found.losses == 1
    assert any("has 0 turn requests" in v for v in found.violations)


def test_an_edit_whose_value_is_gone_is_a_loss(tampered: Played) -> None:
    with _store(tampered) as db:
        row = db.execute(
            'SELECT id, data_json FROM artifacts WHERE data_json LIKE \'%"fields":{"%\' LIMIT 1'
        ).fetchone()
        data = json.loads(row[1])
        data["fields"] = {}
        db.execute("UPDATE artifacts SET data_json = ? WHERE id = ?", (json.dumps(data), row[0]))
    found = tampered.check()
    assert found.losses == 1
    assert any(f"artifact {row[0]} holds" in v for v in found.violations)


def test_an_acknowledged_write_without_its_audit_outcome_is_caught(tampered: Played) -> None:
    ledger = sqlite3.connect(tampered.ledger_path, isolation_level=None)
    try:
        (seq, derived) = ledger.execute(
            "SELECT seq, derived_id FROM audit_events WHERE phase = 'outcome' AND rpc = 'Create' "
            "ORDER BY seq LIMIT 1"
        ).fetchone()
        ledger.execute("DELETE FROM audit_events WHERE seq = ?", (seq,))
    finally:
        ledger.close()
    found = tampered.check()
    assert any(f"{derived}" in v and "no durable audit outcome" in v for v in found.violations)
    assert any(f"ledger chain broken at event {seq}" in v for v in found.violations)


def test_a_non_idempotent_tool_run_twice_is_a_duplicate(played: Played) -> None:
    run = next(iter(played.results.values()))
    twice = [Execution(run.run_id, "stp_x", "charge_card", Effect.NON_IDEMPOTENT_WRITE)] * 2
    doctored = replace(
        played,
        results={**played.results, run.run_id: replace(run, executions=[*run.executions, *twice])},
    )
    assert doctored.check().duplicates == 1


def test_an_array_element_inserted_instead_of_replaced_is_caught(tampered: Played) -> None:
    with _store(tampered) as db:
        row = db.execute("SELECT id, data_json FROM artifacts ORDER BY id LIMIT 1").fetchone()
        data = json.loads(row[1])
        data["list"].insert(0, data["list"][0])
        db.execute("UPDATE artifacts SET data_json = ? WHERE id = ?", (json.dumps(data), row[0]))
    found = tampered.check()
    assert found.losses == 1
    assert any(f"artifact {row[0]} holds" in v for v in found.violations)


def test_an_answer_naming_an_id_the_model_does_not_give_is_caught(played: Played) -> None:
    run = next(r for r in played.results.values() if any(a.rpc == "Create" for a in r.acks))
    ack = next(a for a in run.acks if a.rpc == "Create")
    doctored = replace(
        played,
        results={
            **played.results,
            run.run_id: replace(run, acks=[*run.acks, replace(ack, id="art_other")]),
        },
    )
    found = doctored.check()
    assert any(
        f"op {ack.op_index} (Create)" in v and "answered art_other" in v for v in found.violations
    )
