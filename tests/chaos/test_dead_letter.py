"""A run refused AUDIT_PERSISTENCE_FAILED is dead-lettered and delivered again, as a client
and a person do with it: never repeated as a retryable call, never taken for a violation of
the contract, and what it wrote lands once."""

from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import replace
from pathlib import Path

from chaos.agent import Agent
from chaos.plan import make_plan
from chaos.plan_writes import OpKind
from chaos.play import Played
from chaos.processes import Killer, Service, seed_ports, sidecar_command
from chaos.sidecar_api import Api
from sidecar.config import embedded_store_file


def _hold_the_ledger(path: Path, seconds: float, held: threading.Event) -> None:
    """Another process's writer on the ledger's file: every append waits behind it."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    try:
        conn.execute("BEGIN IMMEDIATE")
        held.set()
        time.sleep(seconds)
        conn.execute("ROLLBACK")
    finally:
        conn.close()


def test_a_run_refused_audit_persistence_failed_is_delivered_again(tmp_path: Path) -> None:
    whole = make_plan(3, topology="embedded", max_kills=0, caller_faults=False)
    run = next(r for r in whole.runs if not any(o.kind is OpKind.GATEWAY for o in r.ops()))
    plan = replace(whole, runs=(run,))
    port = seed_ports(plan.seed, int(time.time()) % 997).sidecar
    data = tmp_path / "sidecar"
    sidecar = Service("sidecar", [], port, tmp_path / "sidecar.log", needs_serving=False)
    # The ledger's bound, short: an append that waits past it fails closed.
    sidecar.command = sidecar_command(port, data, extra=["--audit-busy-timeout-ms", "200"])
    sidecar.start()
    api = Api(sidecar.target)
    killer = Killer((), {"sidecar": sidecar})
    try:
        held = threading.Event()
        holder = threading.Thread(
            target=_hold_the_ledger, args=(data / "audit.db", 2.5, held), daemon=True
        )
        holder.start()
        assert held.wait(10)
        agent = Agent(run, api, killer, seed=plan.seed, lost_checkpoint_rate=0.0)
        result = agent.run()
        holder.join()
    finally:
        killer.close()
        api.close()
        sidecar.stop()
    assert result.failures["AUDIT_PERSISTENCE_FAILED"] >= 1
    assert result.dead_lettered == result.failures["AUDIT_PERSISTENCE_FAILED"]
    assert result.finished and result.violations == []
    played = Played(plan=plan, results={run.run_id: result}, kills=[], seed_dir=tmp_path)
    assert played.store_path == embedded_store_file(data)
    found = played.check()
    assert (found.duplicates, found.losses, found.violations) == (0, 0, [])
