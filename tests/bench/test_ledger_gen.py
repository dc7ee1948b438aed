"""The bench's ledger generator writes ledgers that `actonce audit verify` accepts."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from bench import ledger_gen
from sidecar.ledger import inspect
from sidecar.ledger.sqlite import SqliteLedgerReader


def _verify(path: Path) -> inspect.Verdict:
    reader = SqliteLedgerReader(path)
    try:
        return inspect.verify(reader)
    finally:
        reader.close()


def test_generated_ledger_verifies_and_grows_on_its_head(tmp_path: Path) -> None:
    path = tmp_path / "audit.db"
    first = ledger_gen.generate(path, 600)
    more = ledger_gen.generate(path, 300)
    verdict = _verify(path)
    assert verdict.intact, verdict
    assert verdict.checked == first + more >= 900


def test_an_edit_of_a_generated_event_shows(tmp_path: Path) -> None:
    # The generator's events are chained with the ledger's own hash: editing one breaks it.
    path = tmp_path / "audit.db"
    ledger_gen.generate(path, 300)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE audit_events SET outcome = 'OUTCOME_SKIPPED' WHERE seq = 200")
    verdict = _verify(path)
    assert not verdict.intact
    assert verdict.first_bad == 200
