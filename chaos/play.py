"""One seed's runs, played against real processes: started, killed on schedule, stopped.

A seed's store runs as a process of its own or inside the sidecar; the seed's runs' agents
work while the killer goes through the kill schedule, then every process is stopped with
SIGTERM. A seed with a gateway charge also starts the payments upstream (chaos.upstream),
serves the sidecar's MCP front in front of it, and may have an operator (chaos.operator);
after the sidecar stops, ``actonce audit pending`` lists what is left for a person, and the
upstream's file says what it charged. :class:`Played` is what is left to check: what the
agents were told, the kills made, and where the store and the ledger are.

With ``sidecars`` more than one (PostgreSQL only), that many ``actonce serve`` processes, each
with a data folder and ports of its own, share the seed's ledger and its store (the store's
process, or its PostgreSQL database when the store runs inside each sidecar); the seed fails
when that ledger has a single chain, as one migrated with ``--chains 1`` would.
"""

from __future__ import annotations

import json
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

import psycopg

from chaos.agent import Agent
from chaos.agent_tools import GATEWAY_TIMEOUT_SECONDS
from chaos.check_gateway import GatewayRecord
from chaos.checker import check
from chaos.findings import Findings
from chaos.operator import Operator, settled
from chaos.plan import SeedPlan
from chaos.plan_kills import sidecar_name
from chaos.plan_writes import GATEWAY_TOOL, OpKind
from chaos.processes import (
    HarnessError,
    Killer,
    KillRecord,
    Service,
    clear_stale_faketime,
    seed_ports,
    sidecar_command,
    store_command,
)
from chaos.run_result import RunResult
from chaos.sidecar_api import Api
from chaos.store_snapshot import StoreSnapshot, read_postgres_store, read_sqlite_store
from chaos.upstream import NAME, Upstream
from sidecar.config import embedded_store_file
from sidecar.ledger.base import LedgerReader
from sidecar.ledger.liveness import STALE_SECONDS
from sidecar.ledger.postgres import PostgresLedgerReader
from sidecar.ledger.sqlite import SqliteLedgerReader

# How long the harness waits, once every process has stopped, for the steps still in flight
# to become decidable: a killed sidecar's call, after its deadline (at most a charge's whole
# wait) and its heartbeat's silence.
SETTLE_SECONDS = GATEWAY_TIMEOUT_SECONDS + STALE_SECONDS


@dataclass
class Played:
    """A seed's runs, played: what the agents were told, the kills made, where the data is."""

    plan: SeedPlan
    results: dict[str, RunResult]
    kills: list[KillRecord]
    seed_dir: Path
    ledger_dsn: str | None = None
    store_dsn: str | None = None
    gateway: GatewayRecord | None = None

    @property
    def store_path(self) -> Path:
        if self.plan.topology == "standalone":
            return self.seed_dir / "store" / "store.db"
        return embedded_store_file(self.seed_dir / "sidecar")

    @property
    def ledger_path(self) -> Path:
        return self.seed_dir / "sidecar" / "audit.db"

    def snapshot(self) -> StoreSnapshot:
        """The store's rows, read directly from its database."""
        if self.store_dsn is not None:
            return read_postgres_store(self.store_dsn)
        return read_sqlite_store(self.store_path)

    def ledger(self) -> LedgerReader:
        """A read-only reader of the ledger; the caller closes it."""
        if self.ledger_dsn is not None:
            return PostgresLedgerReader(self.ledger_dsn)
        return SqliteLedgerReader(self.ledger_path)

    def check(self) -> Findings:
        """The checker's verdict on the store and the ledger as they are now."""
        reader = self.ledger()
        try:
            return check(self.plan, self.results, self.snapshot(), reader, self.gateway)
        finally:
            reader.close()


def _folder_of_two_files(folder: Path) -> None:
    """A data folder as the release before made it: the store's file beside the ledger's."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    (folder / "store.db").touch(mode=0o600)


def _skew(offset: str) -> tuple[str, ...]:
    """The prefix that runs a command with its clock ``offset`` off (faketime), or none."""
    if not offset:
        return ()
    clear_stale_faketime()
    return ("faketime", "-f", offset)


def _ledger_flags(seed_dir: Path, ledger_dsn: str | None) -> list[str]:
    if ledger_dsn is not None:
        return ["--audit-dsn", ledger_dsn]
    return ["--audit-db", str(seed_dir / "sidecar" / "audit.db")]


def play(
    plan: SeedPlan, seed_dir: Path, databases: list[str] | None = None, *, port_salt: int = 0
) -> Played:
    """Run the plan's runs against real processes, killing them on schedule, then stop them.

    ``databases`` are the PostgreSQL ledger's and store's DSNs; without them both are SQLite
    files under ``seed_dir``. Raises HarnessError when a process will not start.
    """
    ledger_dsn = databases[0] if databases else None
    store_dsn = databases[1] if databases else None
    services: dict[str, Service] = {}
    store_target: str | None = None
    ports = seed_ports(plan.seed, port_salt, plan.sidecars)
    if plan.sidecars > 1 and not databases:
        raise HarnessError("several sidecars share a PostgreSQL ledger and store only")
    if plan.topology == "twofiles" and not databases:
        _folder_of_two_files(seed_dir / "sidecar")
    if plan.topology == "standalone":
        store = Service("store", [], ports.store, seed_dir / "store.log")
        store.command = store_command(store.port, seed_dir / "store", dsn=store_dsn)
        services["store"] = store
        store_target = store.target
    upstream: Upstream | None = None
    extra: list[str] = []
    if plan.gateway:
        upstream = Upstream(
            seed_dir / "upstream.log",
            ports.upstream,
            slow_handshake=plan.time.slow_handshake,
            slow_handshake_rate=plan.time.slow_handshake_rate,
            seed=plan.seed,
        )
        effects = seed_dir / "effects.json"
        effects.write_text(json.dumps({GATEWAY_TOOL: "TOOL_EFFECT_NON_IDEMPOTENT_WRITE"}))
        extra = [
            "--mcp-upstream", f"{NAME}={upstream.url}",
            "--tool-effects", str(effects),
            "--mcp-upstream-timeout", str(plan.time.upstream_timeout),
        ]  # fmt: skip
    # Skewed clocks only beside a PostgreSQL ledger, whose clock is the server's.
    skewed = ledger_dsn is not None
    if (
        skewed
        and (plan.time.sidecar_skew or plan.time.operator_skew)
        and not shutil.which("faketime")
    ):
        raise HarnessError("faketime is missing: `make faketime` installs it")
    # With several, each sidecar has a data folder of its own; they share the PostgreSQL
    # ledger, and the store (its process, or its PostgreSQL database).
    sidecars: list[Service] = []
    for number, (port, mcp) in enumerate(zip(ports.sidecars, ports.mcps, strict=True)):
        name = sidecar_name(number)
        sidecar = Service(name, [], port, seed_dir / f"{name}.log", needs_serving=False)
        mcp_flags = ["--mcp-listen", f"127.0.0.1:{mcp}"] if upstream is not None else []
        sidecar.command = sidecar_command(
            sidecar.port,
            seed_dir / name,
            store_target=store_target,
            audit_dsn=ledger_dsn,
            store_dsn=None if store_target else store_dsn,
            extra=[*mcp_flags, *extra],
            prefix=_skew(plan.time.sidecar_skew) if skewed else (),
        )
        services[name] = sidecar
        sidecars.append(sidecar)
    ledger = _ledger_flags(seed_dir, ledger_dsn)
    operator: Operator | None = None
    agents: list[Agent] = []
    killer: Killer | None = None
    try:
        if upstream is not None:
            try:
                upstream.start()
            except RuntimeError as exc:
                raise HarnessError(str(exc)) from None
        for service in services.values():
            service.start()
        if plan.sidecars > 1 and ledger_dsn is not None:
            _require_chains(ledger_dsn)  # the first sidecar made the ledger
        if upstream is not None and plan.time.operator:
            charges = {
                run.run_id: (str(op.args["customer"]), int(op.args["cents"]))
                for run in plan.runs
                for op in run.ops()
                if op.kind is OpKind.GATEWAY
            }
            prefix = _skew(plan.time.operator_skew) if skewed else ()
            operator = Operator(ledger, upstream, charges, prefix=prefix)
        killer = Killer(plan.kills, services)
        api = Api([sidecar.target for sidecar in sidecars])
        agents = [
            Agent(
                run,
                api,
                killer,
                seed=plan.seed,
                lost_checkpoint_rate=plan.lost_checkpoint_rate,
                caller_fault_rate=plan.caller_fault_rate,
                gateway=[f"http://127.0.0.1:{mcp}" for mcp in ports.mcps],
                operator=operator,
            )
            for run in plan.runs
        ]
        threads = [threading.Thread(target=agent.run, name=agent.plan.run_id) for agent in agents]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        killer.close()
        api.close()
        if killer.error is not None:
            raise killer.error
    finally:
        if operator is not None:
            operator.close()
        # SIGTERM: the sidecar drains and closes its ledger, as in a rolling restart.
        for service in reversed(services.values()):
            service.stop()
    record: GatewayRecord | None = None
    if upstream is not None:
        try:
            # What is left for a person, listed with the ledger's own clock and nothing
            # running: every step in doubt, none that is done.
            left, flying, waited_for = settled(ledger, SETTLE_SECONDS)
            record = GatewayRecord(
                charged=upstream.charges(),
                decisions=list(operator.decisions) if operator is not None else [],
                left=left,
                flying=flying,
                waited_for=waited_for,
                problems=list(operator.problems) if operator is not None else [],
                refused=operator.refused if operator is not None else 0,
            )
        finally:
            upstream.stop()
    return Played(
        plan=plan,
        results={agent.plan.run_id: agent.result for agent in agents},
        kills=list(killer.done) if killer is not None else [],
        seed_dir=seed_dir,
        ledger_dsn=ledger_dsn,
        store_dsn=store_dsn,
        gateway=record,
    )


def _require_chains(ledger_dsn: str) -> None:
    """Several sidecars are tried on a ledger of many chains, as a new PostgreSQL one is:
    on one chain they would only take turns at its head."""
    with psycopg.connect(ledger_dsn) as conn:
        row = conn.execute("SELECT COUNT(*) FROM audit_chains").fetchone()
    chains = int(row[0]) if row else 0
    if chains <= 1:
        raise HarnessError(f"the ledger has {chains} chain(s): several sidecars need many")
