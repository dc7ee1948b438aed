"""A SQLite ledger's decisions, signed with an operator key the serving sidecar never holds.

Through the command line (`audit resolve --operator-key`, `audit verify --operator-key`) on
real ledger files: a signed decision names its key as who decided and verifies; a decision
appended without the key once decisions are signed, or signed with another secret under
the key's id, is reported as no operator's; a ledger whose decisions all predate keys still
verifies.
"""

from __future__ import annotations

import contextlib
import io
import secrets
from pathlib import Path

import pytest

from sidecar.cli import main
from sidecar.ledger.operator import SqliteOperatorLedger
from sidecar.ledger.operator_keys import OperatorKey, load_key
from sidecar.ledger.pending import Decision
from sidecar.ledger.sqlite import SqliteLedgerReader
from tests.ledger.support import LedgerPlace
from tests.ledger.test_retention import begin, step_in_doubt


def _audit(db: Path, *args: str) -> tuple[int, str, str]:
    """`actonce audit ARGS --audit-db DB` in this process, through the CLI's entry point."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(["audit", *args, "--audit-db", str(db)])
            code = 0
        except SystemExit as exit_:
            code = int(exit_.code or 0)
    return code, out.getvalue(), err.getvalue()


def _key(path: Path) -> Path:
    path.write_text(secrets.token_hex(32) + "\n")
    path.chmod(0o600)
    return path


def _charges(tmp_path: Path, *steps: str) -> Path:
    """A ledger whose charges ``steps`` are in doubt, as a sidecar left them."""
    place = LedgerPlace(tmp_path / "audit.db", None)
    place.append(begin("pay-1", "p1"), *(step_in_doubt("pay-1", "p1", step) for step in steps))
    assert place.db is not None
    return place.db


def _decisions(db: Path) -> list[dict[str, object]]:
    reader = SqliteLedgerReader(db)
    try:
        return [s.event.detail for s in reader.events() if s.event.phase == "decision"]
    finally:
        reader.close()


def test_a_decision_is_signed_by_the_operator_key_and_verifies(tmp_path: Path) -> None:
    db = _charges(tmp_path, "stp_a")
    key = _key(tmp_path / "operator.key")
    code, out, err = _audit(db, "resolve", "stp_a", "--did-not-run", "--by", "alice",
                            "--reason", "no charge at the PSP", "--operator-key", str(key))  # fmt: skip
    assert code == 0, err
    key_id = load_key(key).id
    (detail,) = _decisions(db)
    # Who decided is the key, which the sidecar does not hold; the typed name is a note.
    assert detail["by"] == detail["operator_key"] == key_id and detail["by_note"] == "alice"
    assert f"by {key_id}" in out and str(key) not in out + err
    code, out, _err = _audit(db, "verify", "--operator-key", str(key))
    assert code == 0, out
    assert "decisions: 1 signed with the operator key given" in out


def test_verify_reports_a_decision_no_operator_made(tmp_path: Path) -> None:
    db = _charges(tmp_path, "stp_a", "stp_b", "stp_c")
    key = _key(tmp_path / "operator.key")
    code, _out, err = _audit(db, "resolve", "stp_a", "--did-not-run", "--reason", "checked",
                             "--operator-key", str(key))  # fmt: skip
    assert code == 0, err
    # Whoever can write the file (the serving sidecar, say) appends a decision without the
    # key: it is recorded, with a warning, and verify says no operator made it.
    code, _out, err = _audit(db, "resolve", "stp_b", "--did-not-run", "--by", "alice@corp",
                             "--reason", "trust me")  # fmt: skip
    assert code == 0 and "recorded unsigned" in err, err
    code, out, _err = _audit(db, "verify", "--operator-key", str(key))
    assert code == 1 and "ledger intact" in out, out
    assert "decision NOT AN OPERATOR'S: event #6: unsigned" in out
    # Without the key given, verify still catches the unsigned one.
    code, out, _err = _audit(db, "verify")
    assert code == 1 and "event #6: unsigned" in out, out


def test_a_signature_made_with_another_secret_under_the_keys_id_is_caught(
    tmp_path: Path,
) -> None:
    db = _charges(tmp_path, "stp_a")
    key = load_key(_key(tmp_path / "operator.key"))
    forger = OperatorKey(key.id, secrets.token_bytes(32))  # the id is public; the key is not
    ledger = SqliteOperatorLedger(db, operator_key=forger)
    try:
        ledger.resolve("stp_a", Decision.DID_NOT_RUN, by=key.id, reason="forged")
    finally:
        ledger.close()
    code, out, _err = _audit(db, "verify", "--operator-key", str(tmp_path / "operator.key"))
    assert code == 1, out
    assert f"event #3: its signature is not that of operator key {key.id}" in out


def test_decisions_made_before_keys_still_verify(tmp_path: Path) -> None:
    db = _charges(tmp_path, "stp_a")
    code, _out, err = _audit(db, "resolve", "stp_a", "--did-not-run", "--by", "dana",
                             "--reason", "before keys")  # fmt: skip
    assert code == 0, err
    code, out, _err = _audit(db, "verify")
    assert code == 0, out
    assert "1 unsigned, recorded before decisions were signed" in out


def test_a_decision_without_a_key_nor_a_name_is_refused(tmp_path: Path) -> None:
    db = _charges(tmp_path, "stp_a")
    code, _out, err = _audit(db, "resolve", "stp_a", "--did-not-run", "--reason", "r")
    assert code == 1 and "--operator-key FILE" in err, err
    assert _decisions(db) == []


@pytest.mark.parametrize(
    ("text", "mode", "says"),
    [("short", 0o600, "fewer than 32"), (secrets.token_hex(32), 0o644, "chmod 600")],
    # A random key must not name the test: every pytest-xdist worker collects the same ids.
    ids=["short", "readable-by-others"],
)
def test_a_key_file_that_is_no_key_is_refused(
    tmp_path: Path, text: str, mode: int, says: str
) -> None:
    db = _charges(tmp_path, "stp_a")
    key = tmp_path / "operator.key"
    key.write_text(text)
    key.chmod(mode)
    code, _out, err = _audit(db, "resolve", "stp_a", "--did-not-run", "--reason", "r",
                             "--operator-key", str(key))  # fmt: skip
    assert code == 2 and says in err and str(key) in err, err
    assert _decisions(db) == []
