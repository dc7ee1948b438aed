"""An attempt's counts on the MCP front: one gateway call is one write, made now or found
made, whatever steps the sidecar brackets it with (begin, end)."""

from __future__ import annotations

from pathlib import Path

from tests.fronts.mcp.charges import Charges
from tests.fronts.mcp.gateway_support import begin, call, end_attempt, serve_gateway
from tests.harness import sidecar_config

CHARGE = {"customer": "ann", "cents": 5}


def test_one_gateway_call_counts_as_one_write_made_then_one_found(
    tmp_path: Path, payments: Charges
) -> None:
    sidecar, base = serve_gateway(sidecar_config(tmp_path / "data"), tmp_path, payments.url, "n")
    try:
        first = begin(base, "run-count")
        made = call(base, first, "payments__charge", CHARGE)
        assert made.meta["actonce/outcome"] == "OUTCOME_APPLIED"
        assert end_attempt(base, first) == {
            "applied": 1,
            "already_applied": 0,
            "skipped": 0,
            "failed": 0,
        }
        # The run redelivered: the call is answered from the ledger, one write found made.
        retry = begin(base, "run-count")
        found = call(base, retry, "payments__charge", CHARGE)
        assert found.meta["actonce/outcome"] == "OUTCOME_ALREADY_APPLIED"
        assert end_attempt(base, retry) == {
            "applied": 0,
            "already_applied": 1,
            "skipped": 0,
            "failed": 0,
        }
    finally:
        sidecar.stop()
    assert payments.lines("charge ann") == ["charge ann 5"]
