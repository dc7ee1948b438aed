"""`make bench`: every ghz scenario against every target, alternated in one run, then the report.

Targets (each a real server process pinned to one core, ghz pinned to the other):

- ``store`` / ``store-postgres``: the reference store called directly (``actonce store``, on
  SQLite or on PostgreSQL);
- ``sqlite-before``: ``actonce serve`` as it was before the latest speed work (commit
  ``BEFORE_REF``, or ``--before-ref``), run from that commit's ``sidecar/`` package; ghz reads
  the protos from a descriptor set for it, since an old enough commit cannot resolve a method
  by reflection;
- ``sqlite-unaudited`` / ``postgres-unaudited``: the sidecar with audit off
  (``bench/serve.py --unaudited``, a benchmark-only switch the ``actonce`` command lacks);
- ``sqlite-audited`` / ``postgres-audited``: ``actonce serve`` itself, the ledger and the
  store on SQLite files, or both on PostgreSQL;
- ``floor``: ``grpc.health.v1.Health/Check`` on the audited SQLite sidecar, a call that does
  nothing: the most any RPC of that process can do.

Scenarios are the ghz config files in bench/ghz/ (see bench/setup.py to run one by hand).
The run has parts, each a function that fills the Plan and that ``--parts`` selects:

- ``saturation``: every scenario at concurrency 32 on every target (above);
- ``c1``: concurrency 1, what an agent making one write after another feels: Notice, Create
  and Edit against Health/Check on the same process, each SQLite sidecar target, three
  alternated rounds, the scenarios' order rotated too; the report gives the p50 and p99
  each write adds over the floor;
- ``half-rate`` (below);
- ``growth``: calls/s and p99 of Notice with 1 to 100,000 live attempts, and on an empty
  ledger against a large one made by bench/ledger_gen.py (bench/growth.py);
- ``tracing``: calls/s and p99 of Notice and Create with OpenTelemetry traces off, sampled
  at 10 % and at 100 %, exported to a local OTLP receiver (bench/tracing_bench.py).

Targets alternate round by round, in a rotated order, so that the machine's drift falls on
all of them alike; the report gives medians. A last phase runs Notice at half the audited
sidecar's saturating rate on the sidecar and on the store alone, for the latency it adds.
Writes bench/out/report.json, report.md and the plots (see bench/report.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import google.protobuf
import grpc

from bench import contended, goals, growth, measuring, peers, profile, report, setup, tracing_bench
from bench.measuring import (
    ALL_TARGETS,
    C1_SCENARIOS,
    C1_TARGETS,
    EXPECTED_REFUSALS,
    EXTRA_TARGETS,
    FLOOR_SCENARIOS,
    PARTS,
    SIDECAR_SCENARIOS,
    SMOKE_TARGETS,
    STORE_EXPECTED,
    STORE_SCENARIOS,
    Measured,
    Plan,
    config_for,
    measure,
    prepare,
    start_target,
)
from bench.processes import (
    LOAD_CORE,
    OUT,
    SERVER_CORE,
    Target,
    ghz_binary,
    pin,
    postgres_dsns,
)


def run_target(ghz: Path, plan: Plan, target: Target) -> None:
    """Every scenario of one target, once."""
    env = prepare(target)
    scenarios = {"store": STORE_SCENARIOS, "floor": FLOOR_SCENARIOS}.get(
        target.kind, SIDECAR_SCENARIOS
    )
    warm = measure(ghz, "notice", target, env, seconds=plan.warmup_seconds)
    # Create and its storm run by count: the storm must replay exactly what create made.
    total = max(plan.min_total, round(warm.rps * plan.seconds))

    def record(scenario: str, result: Measured, name: str = target.name) -> None:
        plan.results.setdefault(scenario, {}).setdefault(name, []).append(result)

    for scenario in scenarios:
        if scenario != "storm":
            # New ids for the store's writes: only the storm replays the ones made before.
            env["BENCH_NONCE"] = secrets.token_hex(6)
        if scenario == "create":
            record(scenario, measure(ghz, "create", target, env, total=total))
        elif scenario == "storm":
            if target.kind == "sidecar":
                env.update(setup.retry(target.address, env["BENCH_RUN_ID"]))
            result = measure(ghz, "storm", target, env, total=total)
            record(scenario, result)
            if target.kind == "sidecar":
                counts = setup.end_attempt(target.address, env["BENCH_ATTEMPT_ID"])
                plan.storms.setdefault(target.name, []).append(
                    {"requests": total, "applied": counts.applied,
                     "already_applied": counts.already_applied, "failed": counts.failed}
                )  # fmt: skip
                # A live attempt for the scenarios after the storm.
                env.update(setup.retry(target.address, env["BENCH_RUN_ID"]))
        else:
            record(scenario, measure(ghz, scenario, target, env, seconds=plan.seconds))
    if target.name == "sqlite-audited":
        record("health", measure(ghz, "health", target, env, seconds=plan.seconds), "floor")


def run_saturation(ghz: Path, plan: Plan, work: Path) -> None:
    """Every scenario on every target at concurrency 32, targets alternated round by round."""
    dsns = postgres_dsns(plan.targets)
    for round_ in range(plan.rounds):
        # Rotated each round, so that no target always runs first or last.
        order = list(plan.targets[round_:]) + list(plan.targets[:round_])
        for name in order:
            target = start_target(name, work, dsns=dsns.get(name))
            try:
                run_target(ghz, plan, target)
            finally:
                target.stop()
            notice = plan.results.get("notice", {}).get(name, [])
            rps = f"{notice[-1].rps:7.0f} notice/s" if notice else ""
            print(f"round {round_ + 1}/{plan.rounds} {name:<20} {rps}", flush=True)


def fsync_ms(directory: Path, count: int = 200) -> tuple[float, float]:
    """p50 and p99 of a 4 KiB write and fsync in ``directory``: the disk's own floor under
    each of a write's three commits."""
    path = directory / f"fsync-{time.monotonic_ns()}"
    took: list[float] = []
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        for _ in range(count):
            os.write(fd, b"x" * 4096)
            started = time.perf_counter()
            os.fsync(fd)
            took.append((time.perf_counter() - started) * 1000)
    finally:
        os.close(fd)
        path.unlink()
    took.sort()
    return took[len(took) // 2], took[min(len(took) - 1, len(took) * 99 // 100)]


def run_c1(ghz: Path, plan: Plan, work: Path) -> None:
    """Concurrency 1: Health/Check, Notice, Create and Edit on each SQLite sidecar target,
    and the store alone's own Health/Check, PostMessage and CreateArtifact, one call at a
    time, in alternated rounds (targets and scenarios both rotated)."""
    targets = [t for t in C1_TARGETS if t in plan.targets]
    dsns = postgres_dsns(targets)
    for round_ in range(plan.c1_rounds):
        plan.fsync.append(fsync_ms(work))
        for name in targets[round_ % len(targets) :] + targets[: round_ % len(targets)]:
            target = start_target(name, work, dsns=dsns.get(name))
            try:
                env = prepare(target)
                measure(ghz, "notice", target, env, seconds=plan.warmup_seconds, concurrency=1)
                shift = round_ % len(C1_SCENARIOS)
                for scenario in C1_SCENARIOS[shift:] + C1_SCENARIOS[:shift]:
                    if not config_for(scenario, target).exists() or (
                        target.kind == "floor" and scenario == "edit"
                    ):
                        continue  # the store alone and the floors have no Edit
                    env["BENCH_NONCE"] = secrets.token_hex(6)
                    result = measure(ghz, scenario, target, env, seconds=plan.c1_seconds,
                                     concurrency=1)  # fmt: skip
                    plan.c1.setdefault(scenario, {}).setdefault(name, []).append(result)
            finally:
                target.stop()
            p50 = {s: r[-1].p50 for s, by in plan.c1.items() for t, r in by.items() if t == name}
            print(f"c1 round {round_ + 1}/{plan.c1_rounds} {name:<16} p50 ms "
                  + " ".join(f"{s} {v:.2f}" for s, v in p50.items()), flush=True)  # fmt: skip


def run_half_rate(ghz: Path, plan: Plan, work: Path) -> None:
    """Notice at half the audited sidecar's saturating rate, on it and on the store alone."""
    saturating = statistics.median(r.rps for r in plan.results["notice"]["sqlite-audited"])
    rate = max(10, round(saturating / 2))
    plan.half_rate_calls = rate
    for _ in range(max(1, plan.rounds)):
        for name in ("store", "sqlite-audited"):
            target = start_target(name, work)
            try:
                env = prepare(target)
                measure(ghz, "notice", target, env, seconds=plan.warmup_seconds, rate=rate)
                env["BENCH_NONCE"] = secrets.token_hex(6)
                result = measure(ghz, "notice", target, env, seconds=plan.seconds, rate=rate)
            finally:
                target.stop()
            plan.half_rate.setdefault(name, []).append(result)


def machine(ghz: Path) -> dict[str, Any]:
    """What the numbers were measured on."""
    model = ""
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    version = subprocess.run([str(ghz), "--version"], capture_output=True, text=True, check=False)
    return {
        "cores": os.cpu_count(),
        "cpu": model,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "grpcio": grpc.__version__,
        "protobuf": google.protobuf.__version__,
        "sqlite": sqlite3.sqlite_version,
        # A `go install`ed ghz calls itself "dev"; the make target names the pinned version.
        "ghz": os.environ.get("GHZ_VERSION") or version.stdout.strip() or version.stderr.strip(),
        "server_core": SERVER_CORE,
        "load_core": LOAD_CORE,
    }


def _median(results: list[Measured]) -> dict[str, Any]:
    return {
        "rps": statistics.median(r.rps for r in results),
        "p50_ms": statistics.median(r.p50 for r in results),
        "p90_ms": statistics.median(r.p90 for r in results),
        "p99_ms": statistics.median(r.p99 for r in results),
        "errors": sum(r.not_ok for r in results),
        "statuses": {
            status: sum(r.statuses.get(status, 0) for r in results)
            for status in sorted({s for r in results for s in r.statuses})
        },
        "calls": sum(r.count for r in results),
        "cpu_seconds_per_1000_calls": statistics.median(r.cpu_per_1000 for r in results),
        "rounds": [
            {"rps": round(r.rps, 1), "p99_ms": round(r.p99, 3), "calls": r.count,
             "cpu_seconds": round(r.cpu_seconds, 3), "statuses": r.statuses}
            for r in results
        ],
    }  # fmt: skip


def ledger_statements() -> dict[str, dict[str, int]]:
    """Statements a ledger batch costs on each dialect, for a batch of 6 events and one of
    1,200 (new attempts, intents to fence, outcomes): on PostgreSQL each is a round trip."""
    from sidecar.ledger.schema import POSTGRES, SQLITE
    from sidecar.ledger.sql import Queries, append
    from tests.ledger.test_round_trips import CountingCursor, _batch

    counted: dict[str, dict[str, int]] = {}
    for name, dialect in (("sqlite", SQLITE), ("postgres", POSTGRES)):
        for runs in (1, 200):
            cursor = CountingCursor()
            append(cursor, Queries(dialect), _batch(runs))
            counted.setdefault(name, {})[str(6 * runs)] = len(cursor.statements)
    return counted


def collect(plan: Plan, ghz: Path, started: float) -> dict[str, Any]:
    return {
        "machine": machine(ghz),
        "settings": {
            "seconds": plan.seconds,
            "rounds": plan.rounds,
            "concurrency": plan.concurrency,
            "targets": list(plan.targets),
            "parts": list(plan.parts),
            "before_ref": measuring.BEFORE_REF,
            "c1_seconds": plan.c1_seconds,
            "c1_rounds": plan.c1_rounds,
            "wall_seconds": round(time.monotonic() - started, 1),
        },
        "expected_refusals": {
            "sidecar": {k: list(v) for k, v in EXPECTED_REFUSALS.items()},
            "store": {k: list(v) for k, v in STORE_EXPECTED.items()},
        },
        "results": {
            scenario: {name: _median(results) for name, results in by_target.items()}
            for scenario, by_target in plan.results.items()
        },
        "storm_outcomes": plan.storms,
        "half_rate": {
            "rate": plan.half_rate_calls,
            "targets": {name: _median(results) for name, results in plan.half_rate.items()},
        },
        "c1": {
            scenario: {name: _median(results) for name, results in by_target.items()}
            for scenario, by_target in plan.c1.items()
        },
        "contended": {
            "cores": plan.contended_cores,
            "results": {
                scenario: {name: _median(results) for name, results in by_target.items()}
                for scenario, by_target in plan.contended.items()
            },
        },
        "peers": {
            "rows": peers.medians(plan),
            "skipped": plan.peers_skipped,
            "labels": peers.LABELS,
        },
        "growth": plan.growth,
        "tracing": plan.tracing,
        "profiles": plan.profiles,
        "fsync_ms": {
            "p50": statistics.median(f[0] for f in plan.fsync) if plan.fsync else None,
            "p99": statistics.median(f[1] for f in plan.fsync) if plan.fsync else None,
        },
    }


def run_parts(ghz: Path, plan: Plan, work: Path) -> None:
    """Each part the plan names, in order; a part needing targets the plan lacks is skipped."""
    for part in plan.parts:
        if part == "saturation":
            run_saturation(ghz, plan, work)
        elif part == "c1" and any(t in plan.targets for t in C1_TARGETS):
            run_c1(ghz, plan, work)
        elif part == "contended" and "sqlite-audited" in plan.targets:
            contended.run(ghz, plan, work)
        elif part == "peers":
            peers.run(ghz, plan, work)
        elif part == "half-rate" and "notice" in plan.results and "store" in plan.targets:
            run_half_rate(ghz, plan, work)
        elif part == "growth" and "sqlite-audited" in plan.targets:
            growth.run(ghz, plan, work)
        elif part == "tracing" and "sqlite-audited" in plan.targets:
            tracing_bench.run(ghz, plan, work)
        elif part == "profile" and "sqlite-audited" in plan.targets:
            profile.for_report(ghz, plan, work)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per scenario and round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--targets", default=",".join(ALL_TARGETS))
    parser.add_argument("--parts", default=",".join(PARTS), help=f"of {', '.join(PARTS)}")
    parser.add_argument("--before-ref", default=measuring.BEFORE_REF, help="sqlite-before's commit")
    parser.add_argument(
        "--growth-events",
        type=int,
        default=Plan.growth_events,
        help="events in the growth part's large ledger (10,000,000 for the goal)",
    )
    parser.add_argument(
        "--growth-attempts",
        default=",".join(map(str, Plan.growth_attempts)),
        help="the growth part's levels of live attempts",
    )
    parser.add_argument(
        "--c1-rounds",
        type=int,
        default=Plan.c1_rounds,
        help="rounds of the concurrency-1 and contended parts",
    )
    parser.add_argument("--c1-seconds", type=float, default=Plan.c1_seconds)
    parser.add_argument("--smoke", action="store_true", help="a few seconds: `make test`")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    measuring.BEFORE_REF = args.before_ref
    started = time.monotonic()
    if args.smoke:
        # Every part but the profile, each as short as still answers: the smoke checks
        # answers, not speed.
        plan = Plan(seconds=0.3, rounds=1, targets=SMOKE_TARGETS, warmup_seconds=0.2,
                    min_total=100, out=args.out or OUT / "smoke", c1_seconds=0.2, c1_rounds=1,
                    parts=[p for p in PARTS if p not in ("profile", "peers")],
                    growth_attempts=(1, 100),
                    growth_events=2_000)  # fmt: skip
    else:
        targets = [t for t in args.targets.split(",") if t]
        parts = [p for p in args.parts.split(",") if p]
        known = {*ALL_TARGETS, *EXTRA_TARGETS}
        unknown = sorted(set(targets) - known) + sorted(set(parts) - set(PARTS))
        if unknown:
            parser.error(f"unknown targets or parts {unknown}; known: "
                         f"{', '.join(ALL_TARGETS)}; {', '.join(PARTS)}")  # fmt: skip
        plan = Plan(seconds=args.seconds, rounds=args.rounds, targets=targets, parts=parts,
                    c1_rounds=args.c1_rounds, c1_seconds=args.c1_seconds,
                    growth_events=args.growth_events, out=args.out or OUT,
                    growth_attempts=[int(n) for n in args.growth_attempts.split(",")])  # fmt: skip
    ghz = ghz_binary()
    # The driver's own work (setup calls, parsing) stays off the servers' core.
    if pin(LOAD_CORE):
        os.sched_setaffinity(0, {LOAD_CORE})
    plan.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="actonce-bench-") as tmp:
        run_parts(ghz, plan, Path(tmp))
    data = collect(plan, ghz, started)
    (plan.out / "report.json").write_text(json.dumps(data, indent=2) + "\n")
    problems = report.write(data, plan.out)
    print((plan.out / "report.md").read_text())
    print(goals.goals_text(data))
    print(f"wrote {plan.out}/report.json, report.md and plots "
          f"in {time.monotonic() - started:.0f} s")  # fmt: skip
    for problem in problems:
        print(f"problem: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
