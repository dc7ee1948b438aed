"""One logical call, one upstream effect, whatever the client, the connection or the
sidecar does: the gateway with real processes (the payments server counts in a file what
it did) and the MCP SDK's own client, which times out and is called again as real
clients are."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from mcp.shared.exceptions import MCPError

from sidecar.ledger.base import Phase
from tests.fronts.mcp.charges import Charges
from tests.fronts.mcp.gateway_support import (
    begin,
    call,
    error_of,
    ledger_events,
    pending,
    serve_gateway,
)
from tests.harness import sidecar_config
from tests.helpers.cutting_proxy import cutting_proxy


def test_a_call_the_upstream_acted_on_before_the_connection_dropped_is_sent_not_unsent(
    tmp_path: Path, payments: Charges
) -> None:
    config = sidecar_config(tmp_path / "data")
    with cutting_proxy(payments.port, answer_marker=b'"result"') as proxy:
        sidecar, base = serve_gateway(config, tmp_path, proxy.url, "cut")
        try:
            attempt = begin(base, "run-cut")
            proxy.armed.set()
            first = call(base, attempt, "payments__charge", {"customer": "ann", "cents": 5})
            assert proxy.cuts == 1
            # The upstream charged; the caller is told it may have acted, never "not sent".
            assert error_of(first) == ("UPSTREAM_FAILED", "UNKNOWN")
            assert payments.lines("charge ann") == ["charge ann 5"]
            # The same call again, in the same attempt: that call repeated, in doubt.
            again = call(base, attempt, "payments__charge", {"customer": "ann", "cents": 5})
            assert error_of(again) == ("IN_DOUBT", "UNKNOWN")
            # The run retried: in doubt too, and still one charge.
            retry = begin(base, "run-cut")
            third = call(base, retry, "payments__charge", {"customer": "ann", "cents": 5})
            assert error_of(third) == ("IN_DOUBT", "UNKNOWN")
        finally:
            sidecar.stop()
    assert len(payments.lines("charge ann")) == 1
    phases = [e.event.phase for e in ledger_events(config, "run-cut")]
    assert Phase.STEP_FAILED in phases and Phase.STEP_END not in phases


def test_a_client_whose_timeout_is_shorter_than_the_tool_repeats_into_one_charge(
    tmp_path: Path, slow_payments: Charges
) -> None:
    config = sidecar_config(tmp_path / "data")
    sidecar, base = serve_gateway(config, tmp_path, slow_payments.url, "slow")
    try:
        attempt = begin(base, "run-slow")
        with pytest.raises(MCPError):
            call(base, attempt, "payments__charge", {"customer": "bob", "cents": 7}, timeout=2)
        # The client gave up after 2 s and calls again: it waits for the first call.
        again = call(base, attempt, "payments__charge", {"customer": "bob", "cents": 7})
        assert not again.is_error, again
        assert again.structured_content["charge_id"] == "ch_bob_7_1"
        assert again.meta["actonce/outcome"] == "OUTCOME_ALREADY_APPLIED"
        # Answered: an identical call from now on is a charge of its own.
        second = call(base, attempt, "payments__charge", {"customer": "bob", "cents": 7})
        assert second.structured_content["charge_id"] == "ch_bob_7_2"
        assert second.meta["actonce/outcome"] == "OUTCOME_APPLIED"
    finally:
        sidecar.stop()
    assert len(slow_payments.lines("charge bob")) == 2
    code, items = pending(config)
    assert code == 0 and items == []


def test_a_call_slower_than_the_gateways_timeout_is_upstream_failed_and_in_doubt(
    tmp_path: Path, slow_payments: Charges
) -> None:
    config = sidecar_config(tmp_path / "data")
    sidecar, base = serve_gateway(
        config, tmp_path, slow_payments.url, "timeout", "--mcp-upstream-timeout", "1"
    )
    try:
        attempt = begin(base, "run-timeout")
        first = call(base, attempt, "payments__charge", {"customer": "cy", "cents": 9})
        assert error_of(first) == ("UPSTREAM_FAILED", "UNKNOWN")
        again = call(base, attempt, "payments__charge", {"customer": "cy", "cents": 9})
        assert error_of(again) == ("IN_DOUBT", "UNKNOWN")
        assert sidecar.drain() == 0  # stopped: its attempt is no longer live
    finally:
        sidecar.stop()
    assert len(slow_payments.lines("charge cy")) == 1
    code, items = pending(config)
    assert code == 3 and [i["tool"] for i in items] == ["payments__charge"]
    assert "sent, and no answer came back" in items[0]["why"]


def test_an_upstream_that_refuses_the_connection_is_not_sent_and_the_step_is_aborted(
    tmp_path: Path, payments: Charges
) -> None:
    config = sidecar_config(tmp_path / "data")
    sidecar, base = serve_gateway(config, tmp_path, payments.url, "refused")
    try:
        attempt = begin(base, "run-refused")
        listed = call(base, attempt, "payments__balance", {"customer": "dee"})
        assert not listed.is_error
        payments.kill()  # listed once, now down: its connections are refused
        down = call(base, attempt, "payments__charge", {"customer": "dee", "cents": 1})
        assert error_of(down) == ("UPSTREAM_UNAVAILABLE", "RETRYABLE")
        message = down.structured_content["message"]
        assert "'payments'" in message and "ConnectError" in message
        assert "TaskGroup" not in message
        payments.start()
        again = call(base, attempt, "payments__charge", {"customer": "dee", "cents": 1})
        assert not again.is_error and again.meta["actonce/outcome"] == "OUTCOME_APPLIED"
    finally:
        sidecar.stop()
    assert len(payments.lines("charge dee")) == 1
    phases = [e.event.phase for e in ledger_events(config, "run-refused")]
    assert Phase.STEP_ABORT in phases


def test_an_upstream_killed_mid_call_leaves_the_step_begun_and_upstream_failed(
    tmp_path: Path, slow_payments: Charges
) -> None:
    config = sidecar_config(tmp_path / "data")
    sidecar, base = serve_gateway(config, tmp_path, slow_payments.url, "killed")
    try:
        attempt = begin(base, "run-killed")

        # The charge is made, then the upstream dies before it answers.
        def kill_once_charged() -> None:
            slow_payments.wait_for("charge eve")
            slow_payments.kill()

        killer = threading.Thread(target=kill_once_charged)
        killer.start()
        first = call(base, attempt, "payments__charge", {"customer": "eve", "cents": 3})
        killer.join(30)
        assert error_of(first) == ("UPSTREAM_FAILED", "UNKNOWN")
        assert sidecar.drain() == 0
    finally:
        sidecar.stop()
    assert len(slow_payments.lines("charge eve")) == 1
    code, items = pending(config)
    assert code == 3 and items[0]["tool"] == "payments__charge"


def test_a_caller_cut_off_while_the_upstream_works_still_gets_the_step_ended(
    tmp_path: Path, slow_payments: Charges
) -> None:
    config = sidecar_config(tmp_path / "data")
    sidecar, base = serve_gateway(config, tmp_path, slow_payments.url, "cutoff")
    try:
        attempt = begin(base, "run-cutoff")
        with pytest.raises(MCPError):
            call(base, attempt, "payments__charge", {"customer": "fay", "cents": 2}, timeout=1)
        slow_payments.wait_for("charge fay")
        # The call went on without its caller: the step ends, and the retried run replays it.
        deadline = time.monotonic() + 20
        while not any(e.event.phase == Phase.STEP_END for e in ledger_events(config, "run-cutoff")):
            assert time.monotonic() < deadline, "the step never ended"
            time.sleep(0.1)
        retry = begin(base, "run-cutoff")
        replayed = call(base, retry, "payments__charge", {"customer": "fay", "cents": 2})
        assert not replayed.is_error
        assert replayed.meta["actonce/outcome"] == "OUTCOME_ALREADY_APPLIED"
        assert replayed.structured_content["charge_id"] == "ch_fay_2_1"
    finally:
        sidecar.stop()
    assert len(slow_payments.lines("charge fay")) == 1
    assert pending(config) == (0, [])
