"""What the gateway leaves in the ledger, and what a retried run finds there: keyed tools
sent again with their key after a killed sidecar, tool errors that are not results, a
read-only tool audited as run, an upstream that is down still listed, and names that a
model cannot multiply into metric series."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from sidecar.ledger.base import Phase
from tests.fronts.mcp.charges import Charges
from tests.fronts.mcp.clients import ATTEMPT_HEADER, list_tools
from tests.fronts.mcp.conftest import StartCharges
from tests.fronts.mcp.gateway_support import (
    begin,
    call,
    call_in_background,
    error_of,
    ledger_events,
    pending,
    serve_gateway,
)
from tests.harness import free_port, sidecar_config


def _kill_mid_call(
    sidecar: Any,
    base: str,
    attempt: str,
    upstream: Charges,
    tool: str,
    args: dict[str, Any],
    acted: str,
) -> None:
    """Call ``tool``; once the upstream has acted (a line ``acted`` in its log), SIGKILL the
    sidecar under the call."""
    held = call_in_background(base, attempt, tool, args)
    upstream.wait_for(acted)
    sidecar.process.kill()
    sidecar.process.wait(10)
    held.join(30)


@pytest.mark.parametrize(
    ("tool", "line"),
    [("payments__charge_keyed", "keyed "), ("payments__charge_meta", "meta ")],
)
def test_a_keyed_charge_cut_off_by_a_killed_sidecar_is_sent_again_with_its_key(
    tmp_path: Path, start_charges: StartCharges, tool: str, line: str
) -> None:
    upstream = start_charges("keyed", charge_seconds=4)
    config = sidecar_config(tmp_path / "data")
    args = {"customer": "ann", "cents": 12}
    try:
        sidecar, base = serve_gateway(config, tmp_path, upstream.url, "first")
        try:
            _kill_mid_call(sidecar, base, begin(base, "run-keyed"), upstream, tool, args, line)
        finally:
            sidecar.stop()
        # The run retried on a new sidecar: the step is sent again, with the same key,
        # and the upstream answers the charge it made the first time.
        sidecar, base = serve_gateway(config, tmp_path, upstream.url, "second")
        try:
            again = call(base, begin(base, "run-keyed"), tool, args)
            assert not again.is_error, again
            assert again.structured_content["again"] is True
            assert again.structured_content["charge_id"] == f"ch_{again.meta['actonce/step_id']}"
        finally:
            sidecar.stop()
        assert len(upstream.lines(line)) == 1
        assert pending(config) == (0, [])
    finally:
        upstream.kill()


def test_a_plain_charge_cut_off_by_a_killed_sidecar_is_in_doubt_on_the_retry(
    tmp_path: Path, slow_payments: Charges
) -> None:
    config = sidecar_config(tmp_path / "data")
    args = {"customer": "bo", "cents": 3}
    sidecar, base = serve_gateway(config, tmp_path, slow_payments.url, "first")
    try:
        attempt = begin(base, "run-plain")
        _kill_mid_call(sidecar, base, attempt, slow_payments, "payments__charge", args, "charge bo")
    finally:
        sidecar.stop()
    sidecar, base = serve_gateway(config, tmp_path, slow_payments.url, "second")
    try:
        again = call(base, begin(base, "run-plain"), "payments__charge", args)
        assert error_of(again) == ("IN_DOUBT", "UNKNOWN")
    finally:
        sidecar.stop()
    assert len(slow_payments.lines("charge bo")) == 1


def test_the_model_cannot_give_a_keyed_tools_key_and_never_sees_it(
    tmp_path: Path, payments: Charges
) -> None:
    config = sidecar_config(tmp_path / "data")
    sidecar, base = serve_gateway(config, tmp_path, payments.url, "listing")
    try:
        listed = {tool.name: tool for tool in list_tools(base + "/mcp")}
        keyed = listed["payments__charge_keyed"]
        assert "idempotency_key" not in keyed.input_schema["properties"]
        assert "idempotency_key" not in keyed.input_schema.get("required", [])
        given = call(
            base,
            begin(base, "run-key"),
            "payments__charge_keyed",
            {"customer": "x", "cents": 1, "idempotency_key": "mine"},
        )
        assert error_of(given) == ("INVALID_ARGUMENT", "REFUSED")
    finally:
        sidecar.stop()
    assert payments.lines("keyed") == []


def test_a_transient_error_of_an_idempotent_tool_is_called_again_on_the_retry(
    tmp_path: Path, payments: Charges
) -> None:
    config = sidecar_config(tmp_path / "data")
    sidecar, base = serve_gateway(config, tmp_path, payments.url, "busy")
    args = {"ticket": "T-1", "status": "done"}
    try:
        busy = call(base, begin(base, "run-busy"), "payments__set_status", args)
        assert busy.is_error and busy.meta["actonce/outcome"] == "tool_error"
        # The retried run: the error was no result, so the tool is called again, and lands.
        landed = call(base, begin(base, "run-busy"), "payments__set_status", args)
        assert not landed.is_error and landed.meta["actonce/outcome"] == "OUTCOME_APPLIED"
        # A third try replays the result that landed: the upstream is not called again.
        replayed = call(base, begin(base, "run-busy"), "payments__set_status", args)
        assert replayed.meta["actonce/outcome"] == "OUTCOME_ALREADY_APPLIED"
    finally:
        sidecar.stop()
    assert payments.lines("busy") == ["busy T-1"]
    assert payments.lines("status") == ["status T-1 done"]
    phases = [e.event.phase for e in ledger_events(config, "run-busy")]
    assert phases.count(Phase.STEP_FAILED) == 1 and phases.count(Phase.STEP_END) == 1


def test_an_error_of_a_non_idempotent_tool_is_in_doubt_with_its_text_for_the_operator(
    tmp_path: Path, payments: Charges
) -> None:
    config = sidecar_config(tmp_path / "data")
    sidecar, base = serve_gateway(config, tmp_path, payments.url, "declined")
    try:
        declined = call(base, begin(base, "run-refund"), "payments__refund", {"customer": "y"})
        assert declined.is_error and declined.meta["actonce/outcome"] == "tool_error"
        again = call(base, begin(base, "run-refund"), "payments__refund", {"customer": "y"})
        assert error_of(again) == ("IN_DOUBT", "UNKNOWN")
        assert "card declined" in again.structured_content["message"]
        assert sidecar.drain() == 0
    finally:
        sidecar.stop()
    assert payments.lines("declined") == ["declined y"]
    code, items = pending(config)
    assert code == 3 and "card declined" in items[0]["why"]


def test_an_error_declared_to_mean_nothing_happened_lets_the_retry_send_it(
    tmp_path: Path, payments: Charges
) -> None:
    config = sidecar_config(tmp_path / "data")
    sidecar, base = serve_gateway(config, tmp_path, payments.url, "mail")
    try:
        full = call(base, begin(base, "run-mail"), "payments__send_mail", {"to": "z@x"})
        assert full.is_error
        sent = call(base, begin(base, "run-mail"), "payments__send_mail", {"to": "z@x"})
        assert not sent.is_error and '"sent": "z@x"' in sent.content[0].text
    finally:
        sidecar.stop()
    assert payments.lines("mail") == ["mail z@x"]
    assert pending(config) == (0, [])
    phases = [e.event.phase for e in ledger_events(config, "run-mail")]
    assert Phase.STEP_ABORT in phases


def test_a_read_only_tool_run_again_is_audited_as_run(tmp_path: Path, payments: Charges) -> None:
    config = sidecar_config(tmp_path / "data")
    sidecar, base = serve_gateway(config, tmp_path, payments.url, "reads")
    try:
        for _ in range(2):
            read = call(base, begin(base, "run-read"), "payments__balance", {"customer": "q"})
            assert read.meta["actonce/outcome"] == "OUTCOME_APPLIED"
    finally:
        sidecar.stop()
    assert len(payments.lines("balance q")) == 2
    begins = [
        e.event.outcome
        for e in ledger_events(config, "run-read")
        if e.event.rpc == "BeginStep" and e.event.phase == Phase.OUTCOME
    ]
    assert begins == ["OUTCOME_APPLIED", "OUTCOME_APPLIED"]


def test_an_upstream_that_is_down_stays_listed_and_says_why_it_cannot_be_called(
    tmp_path: Path, payments: Charges
) -> None:
    config = sidecar_config(tmp_path / "data")
    sidecar, base = serve_gateway(config, tmp_path, payments.url, "down")
    try:
        before = {tool.name for tool in list_tools(base + "/mcp")}
        assert "payments__charge" in before
        payments.kill()
        after = {tool.name for tool in list_tools(base + "/mcp")}
        assert after == before
        down = call(
            base, begin(base, "run-down"), "payments__charge", {"customer": "n", "cents": 1}
        )
        assert error_of(down) == ("UPSTREAM_UNAVAILABLE", "RETRYABLE")
        message = down.structured_content["message"]
        assert "'payments'" in message and "ConnectError" in message and "TaskGroup" not in message
    finally:
        sidecar.stop()


def test_made_up_tool_names_add_no_metric_series_and_no_span_names(
    tmp_path: Path, payments: Charges
) -> None:
    config = sidecar_config(tmp_path / "data")
    metrics_port = free_port()
    sidecar, base = serve_gateway(
        config, tmp_path, payments.url, "names", "--metrics-listen", f"127.0.0.1:{metrics_port}"
    )
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    try:
        attempt = begin(base, "run-names")
        call(base, attempt, "payments__balance", {"customer": "m"})
        asyncio.run(_many_made_up_calls(base, attempt, 10))
        before = _series(httpx2.get(url).text)
        asyncio.run(_many_made_up_calls(base, attempt, 1000))
        after = _series(httpx2.get(url).text)
    finally:
        sidecar.stop()
    rpcs = {
        label.split('"')[1] for series in after for label in series.split(",") if 'rpc="' in label
    }
    assert "payments__balance" in rpcs and "unlisted" in rpcs
    assert not any(name.startswith(("made_up", "payments__made_up")) for name in rpcs), rpcs
    # A thousand more made-up names: the same series, counted higher, and nothing new.
    assert after - before == set(), sorted(after - before)


def _series(scraped: str) -> set[str]:
    return {
        line.rsplit(" ", 1)[0]
        for line in scraped.splitlines()
        if line and not line.startswith("#") and "_bucket{" not in line
    }


async def _many_made_up_calls(base: str, attempt: str, count: int) -> None:
    async with (
        httpx2.AsyncClient(headers={ATTEMPT_HEADER: attempt}, timeout=60) as http,
        Client(streamable_http_client(f"{base}/mcp", http_client=http), cache=None) as client,
    ):
        for i in range(count):
            name = f"made_up_{i}" if i % 2 else f"payments__made_up_{i}"
            result = await client.call_tool(name, {})
            assert result.is_error
