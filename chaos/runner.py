"""One seed from start to verdict, and many seeds on a few worker processes.

A seed gets fresh databases and folders, is played against real processes (chaos.play), and
the store's database and the ledger it leaves are handed to the checker (chaos.checker); its
numbers and verdict are a :class:`SeedResult`. What a seed leaves behind is deleted unless it
failed or ``keep`` is set, and a failed seed's plan, runs and kills are written beside it for
its reader.
"""

from __future__ import annotations

import json
import multiprocessing
import random
import shutil
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path

from chaos.plan import make_plan
from chaos.plan_kills import FREEZE
from chaos.plan_writes import OpKind
from chaos.play import Played, play
from chaos.processes import HarnessError
from chaos.run_result import RunResult
from tests.helpers.postgres import drop_database, fresh_database


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
