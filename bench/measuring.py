"""One measurement: a target started by its name, what its scenarios need, one ghz run
against it (:func:`measure`), and the :class:`Plan` every part fills. The parts (bench/run.py,
bench/contended.py, bench/growth.py, bench/peers, bench/tracing_bench.py, bench/profile.py)
stand on this module."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import setup
from bench.processes import (
    GHZ_DIR,
    LOAD_CORE,
    OUT,
    ROOT,
    SERVER_CORE,
    Target,
    free_port,
    pin,
    postgres_pid,
    protoset,
    wait_until_serving,
)
from tests.helpers.env import scrubbed_env

# The "before" target's code: the commit before the latest speed work, so that each change
# is measured beside what it replaced, in the same run. `--before-ref` (or BENCH_BEFORE_REF)
# names another commit.
BEFORE_REF = os.environ.get("BENCH_BEFORE_REF", "1bb115c338680079ef36847b7743506d0345de88")

SIDECAR_SCENARIOS = ("create", "storm", "notice", "edit", "read")
# The floors (bench/floor.py): a bare grpcio aio server making one SQLite commit per write
# (floor1) or three one after another (floor3), serving the sidecar's calls, so that every goal is a
# ratio to a floor measured in the same run, on the same disk, by the same client.
FLOOR_TARGETS = ("floor1", "floor3")
FLOOR_SCENARIOS = ("create", "notice")
STORE_SCENARIOS = ("create", "storm", "notice", "read")
SIDECAR_TARGETS = (
    "sqlite-before",
    "sqlite-twofiles",
    "sqlite-unaudited",
    "sqlite-audited",
    "postgres-unaudited",
    "postgres-audited",
)
ALL_TARGETS = (*FLOOR_TARGETS, "store", "store-postgres", *SIDECAR_TARGETS)
# Targets a run can name besides those it runs by default: `actonce serve` on PostgreSQL, and
# on a data folder of two files (one made before the store moved into the ledger's file), as
# it was at --before-ref; and the writers under SCHED_BATCH.
EXTRA_TARGETS = ("postgres-before", "sqlite-twofilesbefore", "sqlite-batch")
SMOKE_TARGETS = ("floor1", "floor3", "store", "sqlite-unaudited", "sqlite-audited")
# Concurrency 1: the floor and the writes, on the store alone and each SQLite sidecar in the run.
C1_SCENARIOS = ("health", "notice", "create", "edit")
C1_TARGETS = ("floor1", "floor3", "store", "sqlite-before", "sqlite-unaudited",
              "sqlite-twofilesbefore", "sqlite-twofiles", "sqlite-audited",
              "postgres-before", "postgres-unaudited", "postgres-audited")  # fmt: skip
PARTS = ("saturation", "c1", "contended", "peers", "half-rate", "growth", "tracing", "profile")
# The ghz status a scenario is expected to answer with besides OK, and what it means.
EXPECTED_REFUSALS = {
    # An edit that still meets a newer version after three re-reads is refused
    # VERSION_CONFLICT (RETRYABLE): the hot artifact is built to make that happen.
    "edit": ("Aborted", "version conflicts after three re-reads"),
}
STORE_EXPECTED = {
    # The store alone answers a used id with ALREADY_EXISTS; the sidecar turns exactly
    # that into OUTCOME_ALREADY_APPLIED.
    "storm": ("AlreadyExists", "ids refused as used"),
}


def server_env(code: Path = ROOT) -> dict[str, str]:
    # `actonce` refuses ACTONCE_* settings it does not know (the bench's PostgreSQL ones).
    env = scrubbed_env()
    # The servers run this tree's code (or the before's), whatever the venv's editable
    # install points at.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(code), env.get("PYTHONPATH")]))
    return env


def before_code(work: Path) -> Path:
    """The ``sidecar`` package as it was at ``BEFORE_REF``, unpacked under ``work``."""
    code = work / "before"
    if not (code / "sidecar").exists():
        code.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", BEFORE_REF, "sidecar"],
            check=True, capture_output=True,
        )  # fmt: skip
        subprocess.run(["tar", "-x", "-C", str(code)], input=archive.stdout, check=True)
    return code


def start_target(
    name: str,
    work: Path,
    *,
    dsns: tuple[str, str] | None = None,
    data: Path | None = None,
    extra: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> Target:
    """Start the server ``name`` with its data under ``work`` (or in ``data``, made
    beforehand) and wait until it serves; ``extra`` flags go to the server's command, and
    ``env`` (OTEL_* variables, say) into its environment."""
    port = free_port()
    listen = f"127.0.0.1:{port}"
    data = data or work / f"{name}-{time.monotonic_ns()}"
    # As a module: run as a script, bench/profile.py would shadow the standard library's.
    serve = [sys.executable, "-m", "bench.serve", "--listen", listen,
             "--data-dir", str(data), "--log-level", "info"]  # fmt: skip
    actonce = [sys.executable, "-m", "sidecar.cli"]
    backend, _, mode = name.partition("-")
    if name in FLOOR_TARGETS:
        commits = name.removeprefix("floor")
        args = [sys.executable, "-m", "bench.floor", "--listen", listen, "--data-dir", str(data),
                "--commits", commits]  # fmt: skip
        kind = "floor"
    elif backend == "store":
        args, kind = [*actonce, "store", "--listen", listen, "--data-dir", str(data)], "store"
        if mode == "postgres":
            if dsns is None:
                raise ValueError("a PostgreSQL target needs DSNs")
            args += ["--store-dsn", dsns[1]]
    elif mode == "audited":
        args, kind = [*actonce, "serve", "--listen", listen, "--data-dir", str(data)], "sidecar"
    elif mode == "unaudited":
        args, kind = [*serve, "--unaudited"], "sidecar"
    elif mode in ("twofiles", "twofilesbefore"):  # the store's file of its own, made before
        data.mkdir(parents=True, exist_ok=True)
        (data / "store.db").touch()
        args, kind = [*actonce, "serve", "--listen", listen, "--data-dir", str(data)], "sidecar"
    elif mode == "batch":  # audited, its writer threads under SCHED_BATCH (bench only)
        args, kind = [*serve, "--sched-batch"], "sidecar"
    elif mode == "profiled":  # audited, under cProfile (bench/profile.py names the file)
        args, kind = serve, "sidecar"
    elif mode == "before":
        args, kind = [*actonce, "serve", "--listen", listen, "--data-dir", str(data)], "sidecar"
    else:
        raise ValueError(f"unknown target {name}")
    if backend == "postgres":
        if dsns is None:
            raise ValueError("a PostgreSQL target needs DSNs")
        args += ["--audit-dsn", dsns[0], "--store-dsn", dsns[1]]
    before = mode.endswith("before")
    spawned = time.monotonic()
    process = subprocess.Popen(
        [*pin(SERVER_CORE), *args, *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**server_env(before_code(work) if before else ROOT), **(env or {})},
        cwd=work if before else ROOT,
    )
    target = Target(name, process, listen, kind, protoset(work) if before else None,
                    spawned=spawned)  # fmt: skip
    if backend == "postgres" and dsns is not None:
        target.database_pid = postgres_pid()
    try:
        wait_until_serving(target)
    except BaseException:
        target.stop()
        raise
    return target


def prepare(target: Target) -> dict[str, str]:
    """What the scenarios need on ``target``: the environment their templates read."""
    if target.kind == "store":
        return setup.store(target.address)
    if target.kind == "http":
        return {"BENCH_NONCE": secrets.token_hex(6)}
    return setup.sidecar(target.address)


def config_for(scenario: str, target: Target) -> Path:
    name = "health" if scenario == "health" else scenario
    if target.kind == "store":
        name = f"store-{scenario}"
    return GHZ_DIR / f"{name}.json"


def ghz_command(
    ghz: Path,
    scenario: str,
    target: Target,
    *,
    seconds: float | None = None,
    total: int | None = None,
    rate: int | None = None,
    concurrency: int | None = None,
) -> list[str]:
    """The ghz command for one scenario: its config file, with what this run overrides."""
    command = [*pin(LOAD_CORE), str(ghz), "--config", str(config_for(scenario, target)),
               "--format", "json"]  # fmt: skip
    if target.protoset is not None:
        command += ["--protoset", str(target.protoset)]
    if total is not None:
        command += ["-n", str(total)]
    elif seconds is not None:
        # "wait": the calls in flight when the time is up finish. ghz's default for a
        # config without it (create.json's) closes the connection under them, and they
        # come back Unavailable from ghz itself.
        command += ["-z", f"{seconds:g}s", "--duration-stop", "wait"]
    if rate is not None:
        command += ["--rps", str(rate)]
    if concurrency is not None:
        command += ["-c", str(concurrency)]
    return [*command, target.address]


@dataclass
class Measured:
    """One ghz run against one target."""

    count: int
    rps: float
    p50: float
    p90: float
    p99: float
    statuses: dict[str, int]
    cpu_seconds: float

    @property
    def not_ok(self) -> int:
        return sum(n for status, n in self.statuses.items() if status != "OK")

    @property
    def cpu_per_1000(self) -> float:
        return 1000 * self.cpu_seconds / self.count if self.count else 0.0


def measure(
    ghz: Path, scenario: str, target: Target, env: dict[str, str], **options: Any
) -> Measured:
    """Run ghz (or, for an HTTP ingress, the equivalent closed loop) once, reading the
    server's CPU time around it."""
    before = target.cpu_seconds()
    command = (target.load_command(scenario, target, **options) if target.load_command
               else ghz_command(ghz, scenario, target, **options))  # fmt: skip
    done = subprocess.run(
        [*pin(LOAD_CORE), *command] if target.kind == "http" else command,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    used = target.cpu_seconds() - before
    if done.returncode != 0 or not done.stdout.strip():
        raise RuntimeError(f"ghz {scenario} on {target.name}: {done.stderr.strip()[-500:]}")
    result = json.loads(done.stdout)
    latencies = {
        int(entry["percentage"]): entry["latency"] / 1e6
        for entry in result.get("latencyDistribution") or []
    }
    return Measured(
        count=int(result["count"]),
        rps=float(result["rps"]),
        p50=latencies.get(50, 0.0),
        p90=latencies.get(90, 0.0),
        p99=latencies.get(99, 0.0),
        statuses={k: int(v) for k, v in (result.get("statusCodeDistribution") or {}).items()},
        cpu_seconds=used,
    )


@dataclass
class Plan:
    """How long and how hard: the full run, or the smoke version `make test` runs."""

    seconds: float
    rounds: int
    targets: Sequence[str]
    concurrency: int = 32
    warmup_seconds: float = 1.0
    min_total: int = 200
    out: Path = OUT
    parts: Sequence[str] = PARTS
    c1_seconds: float = 3.0
    c1_rounds: int = 3
    # The growth part's sizes (bench/growth.py): live attempts, and the large ledger's events.
    growth_attempts: Sequence[int] = (1, 1_000, 10_000, 100_000)
    growth_events: int = 1_000_000
    results: dict[str, dict[str, list[Measured]]] = field(default_factory=dict)
    storms: dict[str, list[dict[str, int]]] = field(default_factory=dict)
    half_rate: dict[str, list[Measured]] = field(default_factory=dict)
    half_rate_calls: int | None = None
    # Concurrency 1: scenario -> target -> one result per round.
    c1: dict[str, dict[str, list[Measured]]] = field(default_factory=dict)
    growth: dict[str, Any] = field(default_factory=dict)
    # Traces off, sampled at 10 % and at 100 % (bench/tracing_bench.py).
    tracing: dict[str, Any] = field(default_factory=dict)
    profiles: dict[str, str] = field(default_factory=dict)
    # The disk's fsync p50 and p99 (ms), once per concurrency-1 round.
    fsync: list[tuple[float, float]] = field(default_factory=list)
    # Concurrency 1 beside a busy loop on every core (bench/contended.py).
    contended: dict[str, dict[str, list[Measured]]] = field(default_factory=dict)
    contended_cores: int = 0
    # The peers' table: "system/write" -> one row per round (bench/peers).
    peers: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    peers_skipped: list[str] = field(default_factory=list)
