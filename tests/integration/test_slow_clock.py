"""No writer's clock decides what a prune removes.

A sidecar whose clock runs two hours slow (libfaketime) shares a PostgreSQL ledger and ends a
run with a non-idempotent step. `actonce audit prune --before 1h`, seconds later, must not
remove that run: the ledger stamps each event with the database's own clock, and the prune
counts back from it. Its redelivery's BeginStep is then answered from the ledger
(OUTCOME_ALREADY_APPLIED with the recorded result), so the charge does not run twice.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc
from actonce_api.v1 import types_pb2

from sidecar.cli import main
from sidecar.ledger.audit_command import open_reader
from tests.harness import ServerProcess, begin, sidecar_config, spawn_sidecar
from tests.helpers import postgres as pg

SLOW = ("faketime", "-f", "-2h")


@pytest.fixture
def slow_sidecar(tmp_path: Path) -> Iterator[tuple[ServerProcess, str]]:
    assert shutil.which("faketime"), "faketime is missing: `make faketime` installs it"
    dsn = pg.fresh_database("slow")
    config = sidecar_config(tmp_path / "data", audit_dsn=dsn)
    running = spawn_sidecar(config, tmp_path / "slow.log", prefix=SLOW)
    try:
        yield running, dsn
    finally:
        running.stop()
        pg.drop_database(dsn)


def _charge(stub: pb_grpc.RunActionsServiceStub, attempt: str) -> pb.BeginStepResponse:
    request = pb.BeginStepRequest(attempt_id=attempt, tool="charge_card", args_json='{"eur":42}',
                                  effect=types_pb2.TOOL_EFFECT_NON_IDEMPOTENT_WRITE)  # fmt: skip
    return stub.BeginStep(request, timeout=10)


def _prune(dsn: str, export: Path) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            main(["audit", "prune", "--before", "1h", "--export", str(export), "--audit-dsn", dsn])
            code = 0
        except SystemExit as exit_:
            code = int(exit_.code or 0)
    return code, out.getvalue()


def test_a_prune_soon_after_a_slow_clocks_run_keeps_it_and_the_charge_runs_once(
    slow_sidecar: tuple[ServerProcess, str], tmp_path: Path
) -> None:
    running, dsn = slow_sidecar
    with grpc.insecure_channel(running.target) as channel:
        stub = pb_grpc.RunActionsServiceStub(channel)
        attempt = begin(stub, "pay-1", "billing", "cp-1")
        began = _charge(stub, attempt)
        assert began.outcome == types_pb2.OUTCOME_APPLIED  # the agent charges the card...
        result = json.dumps({"charge": "ch_1"})
        stub.EndStep(pb.EndStepRequest(attempt_id=attempt, step_id=began.step_id,
                                       result_json=result))  # fmt: skip
        stub.EndAttempt(pb.EndAttemptRequest(attempt_id=attempt))

        # The events carry the ledger's time, not the sidecar's two hours behind.
        reader = open_reader({"audit_dsn": dsn})
        try:
            stamps = [datetime.fromisoformat(e.ts) for e in reader.events(run_id="pay-1")]
        finally:
            reader.close()
        assert stamps and all(abs(datetime.now(UTC) - ts) < timedelta(minutes=5) for ts in stamps)

        code, said = _prune(dsn, tmp_path / "night.jsonl")
        assert code == 0, said
        assert "nothing to prune" in said

        # ...and the queue redelivers the run: the charge is answered from the ledger.
        again = _charge(stub, begin(stub, "pay-1", "billing", "cp-1"))
        assert again.outcome == types_pb2.OUTCOME_ALREADY_APPLIED
        assert json.loads(again.result_json) == {"charge": "ch_1"}
