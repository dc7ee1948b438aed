"""One seed from start to verdict, and many seeds on a few worker processes.

A seed gets fresh databases and folders, starts the store (as a process of its own, or inside
the sidecar) and the sidecar, runs its runs' agents while the killer works through the kill
schedule, stops every process with SIGTERM, and hands the store's database and the ledger to
the checker. A seed with a gateway charge also starts the payments upstream (chaos.upstream),
serves the sidecar's MCP front in front of it, and may have an operator (chaos.operator);
after the sidecar stops, ``actonce audit pending`` lists what is left for a person, and the
upstream's file says what it charged. What a seed leaves behind is deleted unless it failed
or ``keep`` is set.

With ``sidecars`` more than one (PostgreSQL only), that many ``actonce serve`` processes, each
with a data folder and ports of its own, share the seed's ledger and its store (the store's
process, or its PostgreSQL database when the store runs inside each sidecar); the seed fails
when that ledger has a single chain, as one migrated with ``--chains 1`` would.
"""

from __future__ import annotations

import json
import multiprocessing
import random
import shutil
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psycopg

from chaos.agent import Agent
from chaos.agent_tools import GATEWAY_TIMEOUT_SECONDS
from chaos.check_gateway import GatewayRecord
from chaos.checker import check
from chaos.findings import Findings
from chaos.operator import Operator, settled
from chaos.plan import SeedPlan, make_plan
from chaos.plan_kills import FREEZE, sidecar_name
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
from tests.helpers.postgres import drop_database, fresh_database

# How long the harness waits, once every process has stopped, for the steps still in flight
# to become decidable: a killed sidecar's call, after its deadline (at most a charge's whole
# wait) and its heartbeat's silence.
SETTLE_SECONDS = GATEWAY_TIMEOUT_SECONDS + STALE_SECONDS


@dataclass
class SeedResult:
    """One seed's numbers and verdict."""

    seed: int
    backend: str
    topology: str = ""
    sidecars: int = 1
    # How many of them an attempt began on.
    sidecars_used: int = 0
    runs: int = 0
    attempts: int = 0
    writes: int = 0
    acks: int = 0
    sidecar_kills: int = 0
    store_kills: int = 0
    checkpoints_lost: int = 0
    in_doubt: int = 0
    # Faults of time: freezes of the sidecar (SIGSTOP, SIGCONT), those longer than the
    # silence after which its calls may be decided, gateway charges and the slow ones among
    # them, the operator's decisions and the ones the ledger refused, and whether a clock
    # was skewed (PostgreSQL only).
    freezes: int = 0
    long_freezes: int = 0
    gateway_charges: int = 0
    slow_charges: int = 0
    decisions: int = 0
    refused_decisions: int = 0
    skewed: int = 0
    # Deliveries dead-lettered on AUDIT_PERSISTENCE_FAILED, and the steps still in flight
    # once every process had stopped, that the harness waited for before its last listing.
    dead_lettered: int = 0
    settle_waits: int = 0
    # Caller faults by kind (sidecar_api.CallerFault), beside the process kills.
    caller_faults: dict[str, int] = field(default_factory=dict)
    duplicates: int = 0
    losses: int = 0
    violations: list[str] = field(default_factory=list)
    error: str = ""
    seconds: float = 0.0
    workdir: str = ""
    kept: list[str] = field(default_factory=list)  # the databases left for a reader

    @property
    def ok(self) -> bool:
        return not (self.duplicates or self.losses or self.violations or self.error)


def run_seed(
    seed: int,
    backend: str,
    workdir: Path,
    *,
    pg_server: str | None = None,
    topology: str | None = None,
    keep: bool = False,
    port_salt: int = 0,
    sidecars: int = 1,
) -> SeedResult:
    """Run one seed and check it; never raises (a harness failure is the result's error)."""
    started = time.monotonic()
    plan = make_plan(seed, topology=topology, sidecars=sidecars)
    result = SeedResult(
        seed=seed,
        backend=backend,
        topology=plan.topology,
        runs=len(plan.runs),
        writes=plan.writes,
        sidecars=sidecars,
    )
    seed_dir = workdir / f"{backend}-{seed}"
    shutil.rmtree(seed_dir, ignore_errors=True)
    seed_dir.mkdir(parents=True)
    result.workdir = str(seed_dir)
    databases: list[str] = []
    played: Played | None = None
    try:
        if backend == "postgres":
            if pg_server is None:
                raise HarnessError("the postgres backend needs a server")
            databases = [
                fresh_database("chaos_ledger", server=pg_server),
                fresh_database("chaos_store", server=pg_server),
            ]
            operator_skewed = plan.gateway and plan.time.operator and plan.time.operator_skew
            result.skewed = int(bool(plan.time.sidecar_skew or operator_skewed))
        played = play(plan, seed_dir, databases, port_salt=port_salt)
        _tally(result, played)
        findings = played.check()
        result.duplicates = findings.duplicates
        result.losses = findings.losses
        result.violations.extend(findings.violations)
    except HarnessError as exc:
        result.error = str(exc)
    except Exception:  # a bug of the harness: reported with the seed, never swallowed
        result.error = traceback.format_exc()
    result.seconds = time.monotonic() - started
    if not result.ok or keep:
        # What to replay: the plan is a function of the seed, written out for reading; and
        # what each run went through, failures by reason included.
        (seed_dir / "plan.json").write_text(json.dumps(asdict(plan), indent=1, default=str))
        if played is not None:
            (seed_dir / "runs.json").write_text(
                json.dumps([_said(r) for r in played.results.values()], indent=1, default=str)
            )
            (seed_dir / "kills.json").write_text(
                json.dumps([asdict(k) for k in played.kills], indent=1, default=str)
            )
    if result.ok and not keep:
        shutil.rmtree(seed_dir, ignore_errors=True)
        for dsn in databases:
            if pg_server is not None:
                drop_database(dsn, server=pg_server)
    elif databases:
        result.kept = databases  # a note for the reader, not a finding: a replay keeps them
    return result


def _said(run: RunResult) -> dict[str, object]:
    """A run's result for a reader (asdict would count a Counter's items as its keys)."""
    return {
        "run_id": run.run_id,
        "finished": run.finished,
        "in_doubt_step": run.in_doubt_step,
        "attempts": run.attempts,
        "failures": dict(run.failures),
        "caller_faults": dict(run.caller_faults),
        "gateway_step": run.gateway_step,
        "gateway_trail": run.trail,
        "violations": run.violations,
        "on_sidecars": run.on_sidecars,
    }


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


def _tally(result: SeedResult, played: Played) -> None:
    for run in played.results.values():
        result.attempts += run.attempts
        result.acks += len(run.acks)
        result.checkpoints_lost += run.checkpoints_lost
        result.in_doubt += bool(run.in_doubt_step)
        result.dead_lettered += run.dead_lettered
        for kind, count in run.caller_faults.items():
            result.caller_faults[kind] = result.caller_faults.get(kind, 0) + count
    result.sidecars_used = len({n for run in played.results.values() for n in run.on_sidecars})
    kills = [k for k in played.kills if k.action != FREEZE]
    result.sidecar_kills = sum(1 for k in kills if k.target.startswith("sidecar") and k.was_running)
    result.store_kills = sum(1 for k in kills if k.target == "store" and k.was_running)
    freezes = [k for k in played.kills if k.action == FREEZE and k.was_running]
    result.freezes = len(freezes)
    result.long_freezes = sum(1 for k in freezes if k.seconds > 10.0)
    charges = [op for run in played.plan.runs for op in run.ops() if op.kind is OpKind.GATEWAY]
    result.gateway_charges = len(charges)
    limit = min(played.plan.time.upstream_timeout, played.plan.time.lease_seconds or 1e9)
    result.slow_charges = sum(1 for op in charges if float(op.args["seconds"]) > limit)
    if played.gateway is not None:
        result.decisions = len(played.gateway.decisions)
        result.refused_decisions = played.gateway.refused
        result.settle_waits = played.gateway.waited_for


def run_seeds(
    seeds: Iterable[int],
    backend: str,
    workdir: Path,
    *,
    jobs: int,
    pg_server: str | None = None,
    topology: str | None = None,
    keep: bool = False,
    progress: Callable[[SeedResult], None] | None = None,
    sidecars: int = 1,
) -> Iterator[SeedResult]:
    """Run seeds on ``jobs`` worker processes; results as they finish."""
    seeds = list(seeds)
    salt = random.randrange(1 << 16)  # this invocation's port blocks (processes.seed_ports)
    if jobs <= 1:
        for seed in seeds:
            done = run_seed(
                seed,
                backend,
                workdir,
                pg_server=pg_server,
                topology=topology,
                keep=keep,
                port_salt=salt,
                sidecars=sidecars,
            )
            if progress is not None:
                progress(done)
            yield done
        return
    # spawn, not fork: a forked child would inherit gRPC's threads in an unknown state.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(jobs, mp_context=context) as pool:
        futures = [
            pool.submit(
                run_seed,
                seed,
                backend,
                workdir,
                pg_server=pg_server,
                topology=topology,
                keep=keep,
                port_salt=salt,
                sidecars=sidecars,
            )
            for seed in seeds
        ]
        for future in as_completed(futures):
            done = future.result()
            if progress is not None:
                progress(done)
            yield done
