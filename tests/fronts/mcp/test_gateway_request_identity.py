"""A gateway call repeated with its request identity is that call again, never a second
charge: with real processes (a payments server made with the MCP SDK that counts its
charges in a file, ``actonce serve``, the MCP SDK's own client), a non-idempotent, unkeyed
``payments__charge`` repeated with the same identity in ``_meta``, in the header, or by a
client that gave up on a slow charge, makes one upstream charge, and the repeat gets the
first call's answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from sidecar.ledger.base import Phase
from tests.fronts.mcp.charges import Charges
from tests.fronts.mcp.gateway_support import begin, call, ledger_events, pending, serve_gateway
from tests.harness import sidecar_config

META = "actonce/request_id"
HEADER = "actonce-request-id"


def _one_step_in_the_ledger(config: Any, run_id: str) -> None:
    phases = [e.event.phase for e in ledger_events(config, run_id)]
    assert phases.count(Phase.STEP_BEGIN) == 1, phases
    assert phases.count(Phase.STEP_END) == 1, phases


@pytest.mark.parametrize(
    "identity",
    [{"meta": {META: "charge-ann-1"}}, {"headers": {HEADER: "charge-ann-1"}}],
    ids=["meta", "header"],
)
def test_a_call_repeated_with_its_request_identity_is_answered_and_not_sent_again(
    tmp_path: Path, payments: Charges, identity: dict[str, Any]
) -> None:
    config = sidecar_config(tmp_path / "data")
    sidecar, base = serve_gateway(config, tmp_path, payments.url, "identity")
    args = {"customer": "ann", "cents": 5}
    try:
        attempt = begin(base, "run-identity")
        first = call(base, attempt, "payments__charge", args, **identity)
        assert not first.is_error and first.meta["actonce/outcome"] == "OUTCOME_APPLIED"
        again = call(base, attempt, "payments__charge", args, **identity)
        assert not again.is_error, again
        assert again.meta["actonce/outcome"] == "OUTCOME_ALREADY_APPLIED"
        assert again.meta["actonce/step_id"] == first.meta["actonce/step_id"]
        assert again.structured_content == first.structured_content
    finally:
        sidecar.stop()
    assert payments.lines("charge ann") == ["charge ann 5"]
    _one_step_in_the_ledger(config, "run-identity")


def test_a_client_that_gave_up_on_a_slow_charge_and_repeats_its_identity_charges_once(
    tmp_path: Path, slow_payments: Charges
) -> None:
    config = sidecar_config(tmp_path / "data")
    sidecar, base = serve_gateway(config, tmp_path, slow_payments.url, "gave-up")
    args = {"customer": "bob", "cents": 7}
    identity = {META: "charge-bob-1"}
    try:
        attempt = begin(base, "run-gave-up")
        with pytest.raises(MCPError):  # the client gives up at 1.5 s on a 4 s charge
            call(base, attempt, "payments__charge", args, timeout=1.5, meta=identity)
        # The same identity again: it waits for the call under way, and gets its answer.
        again = call(base, attempt, "payments__charge", args, meta=identity)
        assert not again.is_error, again
        assert again.meta["actonce/outcome"] == "OUTCOME_ALREADY_APPLIED"
        assert again.structured_content["charge_id"] == "ch_bob_7_1"
        # And once more, after it ended: its recorded result.
        third = call(base, attempt, "payments__charge", args, meta=identity)
        assert third.structured_content["charge_id"] == "ch_bob_7_1"
    finally:
        sidecar.stop()
    assert slow_payments.lines("charge bob") == ["charge bob 7"]
    _one_step_in_the_ledger(config, "run-gave-up")
    assert pending(config) == (0, [])
