"""The exactly-once gateway in front of a real MCP server (payments), with a real
``actonce serve`` process that is killed mid-call."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sidecar.config import Config
from sidecar.ledger.audit_command import open_reader
from tests.conftest import MakeConfig
from tests.fronts.mcp.clients import begin_over_http, call, list_tools
from tests.fronts.mcp.upstream import Payments
from tests.harness import ServerProcess, free_port, sidecar_config, spawn_sidecar


@pytest.fixture
def payments() -> Iterator[Payments]:
    upstream = Payments().start()
    try:
        yield upstream
    finally:
        upstream.stop()


def serve(
    config: Config, tmp_path: Path, payments: Payments, effects: dict[str, str], name: str
) -> tuple[ServerProcess, str]:
    effects_file = tmp_path / "effects.json"
    effects_file.write_text(json.dumps(effects))
    headers = tmp_path / "payments.headers"
    headers.write_text("Authorization: Bearer test-token\n")
    port = free_port()
    process = spawn_sidecar(
        config, tmp_path / f"{name}.log",
        "--mcp-listen", f"127.0.0.1:{port}",
        "--mcp-upstream", f"payments={payments.url}",
        "--mcp-upstream-headers", f"payments={headers}",
        "--tool-effects", str(effects_file),
    )  # fmt: skip
    return process, f"http://127.0.0.1:{port}"


def test_charges_run_once_across_retries_and_a_kill_leaves_one_in_doubt(
    make_config: MakeConfig, tmp_path: Path, payments: Payments
) -> None:
    config = make_config(tmp_path / "data")
    effects = {
        "payments__charge": "TOOL_EFFECT_NON_IDEMPOTENT_WRITE",
        "payments__balance": "TOOL_EFFECT_READ_ONLY",
    }
    sidecar, base = serve(config, tmp_path, payments, effects, "first")
    try:
        listed = {tool.name: tool for tool in list_tools(base + "/mcp")}
        assert {"payments__charge", "payments__balance"} <= set(listed)
        charges = [
            {"customer": "ann", "cents": 500},
            {"customer": "bob", "cents": 700},
            {"customer": "cy", "cents": 900},
        ]
        # Attempt 1 makes the first two charges, then its third is held at the upstream
        # while the sidecar is killed.
        first = begin_over_http(base, "run-pay", rule="billing")
        answers = call(base + "/mcp", first, *[("payments__charge", c) for c in charges[:2]])
        assert [a.structured_content["charge_id"] for a in answers] == [
            "ch_ann:500_1",
            "ch_bob:700_1",
        ]
        payments.hold.set()
        held = threading.Thread(
            target=lambda: _ignore(call, base + "/mcp", first, ("payments__charge", charges[2])),
            daemon=True,
        )
        held.start()
        assert payments.held.wait(30)
        sidecar.process.kill()
        sidecar.process.wait(10)
        payments.hold.clear()
        payments.release.set()
    finally:
        sidecar.stop()
    # Retried twice, on a new sidecar each time, the calls in another order.
    for retry in ("second", "third"):
        sidecar, base = serve(config, tmp_path, payments, effects, retry)
        try:
            attempt = begin_over_http(base, "run-pay", rule="billing")
            third, second, first_again, balance = call(
                base + "/mcp", attempt,
                ("payments__charge", charges[2]),
                ("payments__charge", charges[1]),
                ("payments__charge", charges[0]),
                ("payments__balance", {"customer": "ann"}),
            )  # fmt: skip
            assert third.is_error
            assert third.structured_content["reason"] == "IN_DOUBT"
            assert third.structured_content["failure_class"] == "UNKNOWN"
            assert second.structured_content["charge_id"] == "ch_bob:700_1"
            assert first_again.structured_content["charge_id"] == "ch_ann:500_1"
            assert first_again.meta["actonce/outcome"] == "OUTCOME_ALREADY_APPLIED"
            assert balance.structured_content["cents"] == 100
        finally:
            sidecar.stop()
    assert payments.runs == {"ann:500": 1, "bob:700": 1, "cy:900": 1}
    assert payments.balance_reads == 2  # read-only: called every time
    # The killed sidecar's call was sent under a permit: it becomes a person's to decide
    # once its sidecar is silent and the permit's deadline (--mcp-upstream-timeout, 30 s)
    # has passed by the ledger's clock, not before.
    deadline = time.monotonic() + 90
    while True:
        pending = subprocess.run(
            [sys.executable, "-m", "sidecar.cli", "audit", "pending", "--json",
             *_ledger_flags(config)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        if pending.returncode != 0 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert pending.returncode == 3, pending.stderr
    tools = [json.loads(line).get("tool") for line in pending.stdout.splitlines() if line.strip()]
    assert "payments__charge" in tools


def test_a_tool_missing_from_the_effects_file_is_non_idempotent_whatever_its_hint(
    tmp_path: Path, payments: Payments
) -> None:
    config = sidecar_config(tmp_path / "data")
    sidecar, base = serve(config, tmp_path, payments, {}, "first")
    try:
        listed = {tool.name: tool for tool in list_tools(base + "/mcp")}
        assert listed["payments__charge"].annotations.idempotent_hint is True  # shown as given
        assert "TOOL_EFFECT_NON_IDEMPOTENT_WRITE" in (listed["payments__charge"].description or "")
        attempt = begin_over_http(base, "run-hint", rule="billing")
        payments.hold.set()
        held = threading.Thread(
            target=lambda: _ignore(
                call, base + "/mcp", attempt, ("payments__charge", {"customer": "dee", "cents": 1})
            ),
            daemon=True,
        )
        held.start()
        assert payments.held.wait(30)
        sidecar.process.kill()
        sidecar.process.wait(10)
        payments.hold.clear()
        payments.release.set()
    finally:
        sidecar.stop()
    sidecar, base = serve(config, tmp_path, payments, {}, "second")
    try:
        attempt = begin_over_http(base, "run-hint", rule="billing")
        again = call(base + "/mcp", attempt, ("payments__charge", {"customer": "dee", "cents": 1}))[
            0
        ]
        assert again.is_error and again.structured_content["reason"] == "IN_DOUBT"
        # The step is named, as ErrorInfo's metadata names it over gRPC: what a harness parks.
        said = again.structured_content["metadata"]
        assert said["tool"] == "payments__charge" and said["step_id"].startswith("stp_")
    finally:
        sidecar.stop()
    assert payments.runs["dee:1"] == 1


def test_an_upstream_that_is_down_is_retryable_and_begins_nothing(tmp_path: Path) -> None:
    config = sidecar_config(tmp_path / "data")
    down = Payments()  # bound, never served: connections are refused
    down.socket.close()
    sidecar, base = serve(config, tmp_path, down, {}, "down")
    try:
        attempt = begin_over_http(base, "run-down", rule="billing")
        charge = ("payments__charge", {"customer": "x", "cents": 1})
        answer = call(base + "/mcp", attempt, charge)[0]
        assert answer.is_error
        assert answer.structured_content["reason"] == "UPSTREAM_UNAVAILABLE"
        assert answer.structured_content["failure_class"] == "RETRYABLE"
    finally:
        sidecar.stop()
    reader = open_reader({"audit_dsn": None, "audit_db": config.audit_path})
    try:
        rpcs = [stored.event.rpc for stored in reader.events(run_id="run-down")]
    finally:
        reader.close()
    assert "BeginAttempt" in rpcs and "BeginStep" not in rpcs  # nothing begun: not in doubt


def _ignore(function: object, *args: object) -> None:
    # The sidecar is killed under this call: whatever it raises is expected.
    with contextlib.suppress(BaseException):
        function(*args)  # type: ignore[operator]


def _ledger_flags(config: Config) -> list[str]:
    if config.audit_dsn:
        return ["--audit-dsn", config.audit_dsn]
    return ["--audit-db", str(config.audit_path)]
