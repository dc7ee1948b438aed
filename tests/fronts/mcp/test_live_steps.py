"""A step whose call is in flight on a live sidecar is not in doubt: ``audit pending`` does
not list it, ``audit resolve`` refuses it saying when it can be decided, and once its
sidecar is killed it becomes decidable within the bound the README states. On SQLite, and
on PostgreSQL with a second sidecar sharing the ledger."""

from __future__ import annotations

import json
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

from sidecar.config import Config
from sidecar.ledger import liveness, permits
from sidecar.ledger.base import Phase
from tests.conftest import MakeConfig
from tests.console.scenario import start_console
from tests.fronts.mcp.conftest import StartCharges
from tests.fronts.mcp.gateway_support import (
    begin,
    call_in_background,
    ledger_events,
    ledger_flags,
    pending,
    serve_gateway,
)
from tests.harness import spawn_sidecar
from tests.server.processes import run_cli


def test_a_step_in_flight_is_not_pending_nor_decidable_until_its_sidecar_dies(
    make_config: MakeConfig, tmp_path: Path, backend: str, start_charges: StartCharges
) -> None:
    upstream = start_charges(charge_seconds=60)
    config = make_config(tmp_path / "a")
    other = None
    if backend == "postgres":
        # A second sidecar on the same ledger, serving as usual meanwhile.
        other = spawn_sidecar(
            make_config(tmp_path / "b", audit_dsn=config.audit_dsn), tmp_path / "b.log"
        )
    sidecar, base = serve_gateway(config, tmp_path, upstream.url, "a")
    try:
        attempt = begin(base, "run-live")
        call_in_background(base, attempt, "payments__charge", {"customer": "liv", "cents": 4})
        upstream.wait_for("charge liv")
        step_id = next(
            e.event.derived_id
            for e in ledger_events(config, "run-live")
            if e.event.phase == Phase.STEP_BEGIN
        )
        # In flight on a live sidecar: not pending, not decidable.
        code, items = pending(config)
        assert (code, items) == (0, [])
        flying = run_cli("audit", "pending", "--in-flight", "--json", *ledger_flags(config))
        listed = [json.loads(line) for line in flying.stdout.splitlines() if line.strip()]
        assert [i["id"] for i in listed] == [step_id] and listed[0]["kind"] == "step_in_flight"
        refused = run_cli(
            "audit",
            "resolve",
            step_id,
            "--did-not-run",
            "--by",
            "ops",
            "--reason",
            "looked",
            *ledger_flags(config),
        )
        assert refused.returncode == 1
        assert "cannot be decided yet" in refused.stderr and "in flight" in refused.stderr
        assert "within 10 s of its last heartbeat" in refused.stderr
        # The console shows it apart, as in flight.
        console = start_console(config, tmp_path)
        try:
            with urllib.request.urlopen(f"{console.url}/api/pending", timeout=10) as answer:
                shown = json.load(answer)
        finally:
            console.stop()
        assert shown["pending"] == [] and [i["id"] for i in shown["in_flight"]] == [step_id]
        # Killed: decidable once its sidecar is silent and its call's deadline (the permit's,
        # by the ledger's clock) has passed, whichever comes later; within that bound, and
        # not before it: a call whose sidecar died may still be acting upstream until then.
        deadline = _permit_deadline(config, step_id)
        sidecar.process.kill()
        sidecar.process.wait(10)
        killed = time.monotonic()
        bound = max(liveness.STALE_SECONDS, (deadline - datetime.now(UTC)).total_seconds())
        while pending(config)[0] != 3:
            assert time.monotonic() - killed < bound + 3, "never decidable"
            time.sleep(0.25)
        assert datetime.now(UTC) >= deadline
        code, items = pending(config)
        assert code == 3 and [i["id"] for i in items] == [step_id]
        decided = run_cli(
            "audit",
            "resolve",
            step_id,
            "--did-not-run",
            "--by",
            "ops",
            "--reason",
            "the provider has no such charge",
            *ledger_flags(config),
        )
        assert decided.returncode == 0, decided.stderr
    finally:
        sidecar.stop()
        upstream.kill()
        if other is not None:
            other.stop()


def _permit_deadline(config: Config, step_id: str) -> datetime:
    """When the step's permitted call is over at the latest, by the ledger's clock."""
    for stored in ledger_events(config, "run-live"):
        event = stored.event
        if event.phase == Phase.STEP_PERMIT and event.derived_id == step_id:
            deadline = permits.parse_time(str(event.detail[permits.DEADLINE]))
            assert deadline is not None
            return deadline
    raise AssertionError(f"no permit for {step_id}")
