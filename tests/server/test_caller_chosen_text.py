"""Caller-chosen text on its way to an operator: a run id or a rule with a control character,
or too long, is refused at BeginAttempt; one already in a ledger (recorded before that rule)
is shown escaped by every ``actonce audit`` command and by the console's pages.

The ledger is written through the sidecar's own ledger, as an older sidecar wrote it; the
commands run as real processes, and their raw output is read as a terminal would get it.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from starlette.testclient import TestClient

from sidecar.console.app import create_app
from sidecar.console.chain import ChainWatch
from sidecar.ledger.base import AuditEvent, Phase
from sidecar.ledger.operator import open_operator_ledger
from tests.harness import refusal, sidecar_config, start_sidecar
from tests.ledger.support import LedgerPlace
from tests.server.processes import run_cli

# Erase the line, go up one, erase that too, and say what the operator wants to hear.
ERASING = "run-\x1b[2K\x1b[1A\x1b[2K\rnothing pending"
# OSC 52: put "evil" on the clipboard, then a right-to-left override.
CLIPBOARD = "triage\x1b]52;c;ZXZpbA==\x07\u202e"
TOOL = "charge\x1b[8m"  # concealed text from here on


def _legacy_ledger(db: Path) -> None:
    """An in-doubt step of a run whose id and rule carry terminal sequences."""

    def event(phase: str, **fields: object) -> AuditEvent:
        return AuditEvent(ERASING, "att-1", "BeginStep", phase, rule=CLIPBOARD, checkpoint="c",
                          write_type="step", derived_id="stp_doubt", occurrence=0,
                          digest="d" * 64, **fields)  # type: ignore[arg-type]  # fmt: skip

    detail = {"tool": TOOL, "effect": "NON_IDEMPOTENT_WRITE"}
    LedgerPlace(db, None).append(
        AuditEvent(
            ERASING, "att-1", "BeginAttempt", Phase.ATTEMPT_BEGIN, rule=CLIPBOARD, checkpoint="c"
        ),
        event(Phase.STEP_BEGIN, detail=detail),
        event(Phase.OUTCOME, outcome="OUTCOME_APPLIED", detail=detail),
    )


def _shown_escaped(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "\\x1b[2K\\x1b[1A\\x1b[2K\\x0dnothing pending" in text
    assert "\\x1b]52;c;ZXZpbA==\\x07\\u202e" in text


def test_every_audit_command_shows_caller_chosen_text_escaped(tmp_path: Path) -> None:
    db = tmp_path / "audit.db"
    _legacy_ledger(db)
    ledger = ["--audit-db", str(db)]
    pending = run_cli("audit", "pending", *ledger)
    assert pending.returncode == 3, pending.stderr  # something needs a person
    _shown_escaped(pending.stdout)
    (line, why) = pending.stdout.splitlines()
    assert line.split("  ")[1] == "step_in_doubt" and "id=stp_doubt" in line
    assert "\\x1b[8m" in line and why.startswith("    why: ")
    listed = run_cli("audit", "list", *ledger)
    assert listed.returncode == 0, listed.stderr
    _shown_escaped(listed.stdout)
    shown = run_cli("audit", "show", ERASING, *ledger)  # its lines name the rule, not the run
    assert shown.returncode == 0, shown.stderr
    assert "\x1b" not in shown.stdout and "\\x1b]52;c;ZXZpbA==\\x07\\u202e" in shown.stdout
    # Machines get JSON, which escapes them its own way.
    as_json = run_cli("audit", "pending", "--json", *ledger)
    assert "\x1b" not in as_json.stdout and "\\u001b[2K" in as_json.stdout
    missing = run_cli("audit", "show", "run-\x1b]52;c;eA==\x07", *ledger)
    assert missing.returncode == 1 and "\x1b" not in missing.stderr


def test_the_consoles_pages_show_caller_chosen_text_escaped(tmp_path: Path) -> None:
    db = tmp_path / "audit.db"
    _legacy_ledger(db)
    ledger = open_operator_ledger(db, None)
    chain = ChainWatch(lambda: (_ for _ in ()).throw(RuntimeError("not checked here")))
    try:
        app = create_app(ledger, token=None, chain=chain)
        with TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 5000)) as page:
            for path in ("/", "/pending"):
                answer = page.get(path)
                assert answer.status_code == 200
                _shown_escaped(answer.text)
    finally:
        ledger.close()


@pytest.mark.parametrize(
    ("run_id", "rule", "field"),
    [
        (ERASING, "triage", "run_id"),
        ("run-1", CLIPBOARD, "rule"),
        ("run-\x9b2K", "triage", "run_id"),  # C1's one-byte CSI
        ("r" * 513, "triage", "run_id"),
        ("run-1", "r" * 257, "rule"),
        ("run-1", "é" * 129, "rule"),  # 258 bytes of UTF-8
    ],
)
def test_begin_attempt_refuses_run_ids_and_rules_no_operator_could_be_shown(
    tmp_path: Path, run_id: str, rule: str, field: str
) -> None:
    running = start_sidecar(sidecar_config(tmp_path / "data"))
    try:
        with pytest.raises(grpc.RpcError) as refused:
            running.stub.BeginAttempt(
                pb.BeginAttemptRequest(run_id=run_id, rule=rule, checkpoint="cp")
            )
        found = refusal(refused.value)
        assert (found.code, found.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
        assert field in str(refused.value.details())
        assert running.audit() == []
        # At the bounds, and with any printable character, it begins.
        running.stub.BeginAttempt(
            pb.BeginAttemptRequest(run_id="r" * 512, rule="é" * 128, checkpoint="cp")
        )
    finally:
        running.stop()
