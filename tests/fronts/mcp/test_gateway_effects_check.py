"""An effects file is checked against what its upstream lists, with real processes: a
payments server made with the MCP SDK that counts its charges in a file, ``actonce serve``
in front of it, and the MCP SDK's own client.

A key the upstream's listing does not take (a misspelt argument, a ``_meta`` key the tool
does not declare) would reach no one: the tool is called unkeyed, so that a charge cut off
by a killed sidecar is in doubt, never sent again, and the operator is told at listing (a
WARNING naming the tool and the key, the metric, the MCP front's readiness detail). So is
an entry naming a tool the upstream does not list.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.fronts.mcp.conftest import StartCharges
from tests.fronts.mcp.gateway_support import (
    EFFECTS,
    begin,
    call,
    error_of,
    kill_mid_call,
    serve_gateway,
)
from tests.harness import free_port, sidecar_config

WRITE = "TOOL_EFFECT_NON_IDEMPOTENT_WRITE"
MISSPELT: dict[str, Any] = {
    **EFFECTS,
    # The tool's argument is idempotency_key: a key argument that reaches no one.
    "payments__charge_optional_key": {
        "effect": WRITE,
        "idempotency_key": {"argument": "idempotency_ky"},
    },
    # The tool declares payments/idempotency_key among its _meta keys, not this one.
    "payments__charge_meta": {"effect": WRITE, "idempotency_key": {"meta": "payments/key"}},
    # No such tool upstream.
    "payments__refnud": WRITE,
}


def _log_records(path: Path) -> list[dict[str, Any]]:
    records = []
    for line in path.read_text().splitlines():
        if line.startswith("{"):
            records.append(json.loads(line))
    return records


def _metric(port: int, upstream: str, problem: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    series = f'actonce_gateway_effects_findings{{problem="{problem}",upstream="{upstream}"}} '
    for line in text.splitlines():
        if line.startswith(series):
            return float(line.removeprefix(series))
    raise AssertionError(f"no {series.strip()} in the metrics")


def test_entries_the_upstreams_listing_contradicts_are_reported_when_it_is_listed(
    tmp_path: Path, start_charges: StartCharges
) -> None:
    upstream = start_charges()
    config = sidecar_config(tmp_path / "data")
    metrics = free_port()
    sidecar, base = serve_gateway(
        config, tmp_path, upstream.url, "listed", "--metrics-listen", f"127.0.0.1:{metrics}",
        effects_file=MISSPELT,
    )  # fmt: skip
    try:
        readiness = httpx2.get(f"{base}/readiness", timeout=30)
        assert readiness.status_code == 200
        detail = readiness.json()["detail"]
        assert len(detail) == 3, detail
        [argument] = [line for line in detail if line.startswith("payments__charge_optional_key")]
        assert "'idempotency_ky'" in argument and "called unkeyed" in argument
        [meta] = [line for line in detail if line.startswith("payments__charge_meta")]
        assert "'payments/key'" in meta and "called unkeyed" in meta
        [unlisted] = [line for line in detail if line.startswith("payments__refnud")]
        assert "lists no tool 'refnud'" in unlisted
        for problem in ("key_argument_not_in_schema", "key_meta_not_declared", "tool_not_listed"):
            assert _metric(metrics, "payments", problem) == 1.0
        # Listed again (a model's tools/list): nothing new, nothing logged twice.
        assert not call(
            base, begin(base, "run-list"), "payments__balance", {"customer": "a"}
        ).is_error
    finally:
        sidecar.stop()
    warned = [r for r in _log_records(tmp_path / "listed.log")
              if r.get("event") == "mcp_effects_file_contradicted"]  # fmt: skip
    assert {(r["tool"], r["problem"], r["level"]) for r in warned} == {
        ("payments__charge_optional_key", "key_argument_not_in_schema", "warning"),
        ("payments__charge_meta", "key_meta_not_declared", "warning"),
        ("payments__refnud", "tool_not_listed", "warning"),
    }
    assert len(warned) == 3
    assert any("idempotency_ky" in r["detail"] for r in warned)


@pytest.mark.parametrize(
    ("tool", "acted"),
    [("payments__charge_optional_key", "optkey - ann"), ("payments__charge_meta", "meta ")],
)
def test_a_misspelt_key_makes_a_charge_cut_off_by_a_killed_sidecar_in_doubt_not_sent_again(
    tmp_path: Path, start_charges: StartCharges, tool: str, acted: str
) -> None:
    upstream = start_charges("typo", charge_seconds=4)
    config = sidecar_config(tmp_path / "data")
    args = {"customer": "ann", "cents": 12}
    sidecar, base = serve_gateway(config, tmp_path, upstream.url, "first", effects_file=MISSPELT)
    try:
        kill_mid_call(sidecar, base, begin(base, "run-typo"), upstream, tool, args, acted)
    finally:
        sidecar.stop()
    # The run retried on a new sidecar: the key reached no one, so the charge may have been
    # made without one; it is in doubt, and not sent again.
    sidecar, base = serve_gateway(config, tmp_path, upstream.url, "second", effects_file=MISSPELT)
    try:
        again = call(base, begin(base, "run-typo"), tool, args)
        assert error_of(again) == ("IN_DOUBT", "UNKNOWN")
    finally:
        sidecar.stop()
    assert len(upstream.lines(acted)) == 1
