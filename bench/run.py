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
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import google.protobuf
import grpc

from bench import peers, report, setup
from tests.helpers.env import scrubbed_env
from tests.helpers.health import NeverAnswered, wait_serving

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"
GHZ_DIR = ROOT / "bench" / "ghz"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

# Servers on the first core, the load on the second: ghz must not take the servers' CPU.
SERVER_CORE = 0
LOAD_CORE = 1

# The "before" target's code: the commit before the latest speed work, so that each change
# is measured beside what it replaced, in the same run. `--before-ref` (or BENCH_BEFORE_REF)
# names another commit.
BEFORE_REF = os.environ.get("BENCH_BEFORE_REF", "1bb115c338680079ef36847b7743506d0345de88")

SIDECAR_SCENARIOS = ("create", "storm", "notice", "edit", "read")
# The floors (bench/floor.py): a bare grpcio aio server making one SQLite commit per write
# (floor1) or three in turn (floor3), serving the sidecar's calls, so that every goal is a
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


def pin(core: int) -> list[str]:
    """The taskset prefix that pins a command to ``core`` (none on a one-core machine)."""
    if len(os.sched_getaffinity(0)) < 2 or shutil.which("taskset") is None:
        return []
    return ["taskset", "-c", str(core)]


def ghz_binary() -> Path:
    ghz = Path(os.environ.get("GHZ", ROOT / ".tools" / "bin" / "ghz"))
    if not ghz.exists():
        raise SystemExit(f"ghz not found at {ghz}: `make bench` installs it")
    return ghz


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Target:
    """A server under test: its process and address."""

    name: str
    process: subprocess.Popen[bytes]
    address: str
    kind: str  # "store", "sidecar", "floor" (the sidecar's calls, writes only) or "http"
    protoset: Path | None = None  # for a server whose reflection cannot find methods
    # Processes of the same system beside the first (a peer's server and its SDK's).
    others: list[subprocess.Popen[bytes]] = field(default_factory=list)
    # When it was spawned (time.monotonic()): its cold start runs from here.
    spawned: float = 0.0
    # A database server whose CPU the target's writes use too (its PostgreSQL).
    database_pid: int | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    def pids(self) -> list[int]:
        """Every process of the target, their children included."""
        return [p for proc in (self.process, *self.others) for p in process_tree(proc.pid)]

    def cpu_seconds(self) -> float:
        """User and system CPU of the target's processes (every thread), and of its
        database server's when it has one."""
        pids = self.pids()
        if self.database_pid is not None:
            pids += process_tree(self.database_pid)
        return sum(cpu_seconds(pid) for pid in pids)

    def rss_mib(self) -> float:
        """Resident memory of the target's own processes (not its database server's)."""
        return sum(status_kib(pid, "VmRSS") for pid in self.pids()) / 1024

    def peak_rss_mib(self) -> float:
        """The most resident memory each of the target's processes has held, summed."""
        return sum(status_kib(pid, "VmHWM") for pid in self.pids()) / 1024

    def stop(self) -> None:
        for process in (*self.others, self.process):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(20)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(10)


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants, those alive now."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            for task in Path(f"/proc/{current}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def cpu_seconds(pid: int) -> float:
    """User and system CPU of one process, every thread included; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # utime and stime are the 14th and 15th fields; the split above starts at the 3rd.
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def status_kib(pid: int, key: str) -> int:
    """One ``VmRSS``-like line of /proc/PID/status, in KiB; 0 once the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _server_env(code: Path = ROOT) -> dict[str, str]:
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


def protoset(work: Path) -> Path:
    """The API's descriptors, imports included, and grpc.health.v1's, for ghz to call a
    server without reflection."""
    from google.protobuf import descriptor_pb2
    from grpc_health.v1 import health_pb2

    out = work / "actonce.protoset"
    if not out.exists():
        protos = sorted(str(p.relative_to(ROOT / "protos")) for p in
                        (ROOT / "protos" / "actonce" / "v1").glob("*.proto"))  # fmt: skip
        subprocess.run(
            [sys.executable, "-m", "grpc_tools.protoc", f"-I{ROOT / 'protos'}",
             "--include_imports", f"--descriptor_set_out={out}", *protos],
            check=True, cwd=ROOT,
        )  # fmt: skip
        files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
        health_pb2.DESCRIPTOR.CopyToProto(files.file.add())
        out.write_bytes(files.SerializeToString())
    return out


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
    elif backend in peers.PEERS:
        return peers.start(name, work, listen, data, dsns=dsns)
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
        env={**_server_env(before_code(work) if before else ROOT), **(env or {})},
        cwd=work if before else ROOT,
    )
    target = Target(name, process, listen, kind, protoset(work) if before else None,
                    spawned=spawned)  # fmt: skip
    if backend == "postgres" and dsns is not None:
        target.database_pid = postgres_pid()
    try:
        _wait_serving(target)
    except BaseException:
        target.stop()
        raise
    return target


def _wait_serving(target: Target, timeout: float = 60) -> None:
    try:
        wait_serving(target.address, target.process, timeout=timeout)
    except NeverAnswered as never:
        raise RuntimeError(f"{target.name}: {never}") from None


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
    command = (peers.load_command(scenario, target, **options) if target.kind == "http"
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


PG_DIR = os.environ.get("ACTONCE_PG_DIR", "/tmp/actonce-bench-pg")


def postgres_pid() -> int | None:
    """The bench's PostgreSQL server's postmaster, whose backends a PostgreSQL target's
    writes keep busy: their CPU is the target's too."""
    try:
        return int((Path(PG_DIR) / "data" / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def postgres_dsns(names: Sequence[str]) -> dict[str, tuple[str, str]]:
    """A fresh ledger and store database per PostgreSQL target, on the bench's own server.

    The server is started pinned to the servers' core, so its backends do not take the
    load generator's; it is apart from the tests' server, so the run touches neither.
    """
    if not any("postgres" in name for name in names):
        return {}
    from tests.helpers.postgres import PrivateServer, fresh_database

    server = PrivateServer(
        PG_DIR,
        int(os.environ.get("ACTONCE_PG_PORT", "55461")),
        prefix=tuple(pin(SERVER_CORE)),
    ).start()
    return {
        name: (
            fresh_database("bench_ledger", server=server),
            fresh_database("bench_store", server=server),
        )
        for name in names
        if "postgres" in name
    }


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
    from sidecar.ledger.sql import POSTGRES, SQLITE, Queries, append
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
            "before_ref": BEFORE_REF,
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
    from bench import contended, growth, profile, tracing_bench

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
    global BEFORE_REF
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per scenario and round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--targets", default=",".join(ALL_TARGETS))
    parser.add_argument("--parts", default=",".join(PARTS), help=f"of {', '.join(PARTS)}")
    parser.add_argument("--before-ref", default=BEFORE_REF, help="sqlite-before's commit")
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
    BEFORE_REF = args.before_ref
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
    print(report.goals_text(data))
    print(f"wrote {plan.out}/report.json, report.md and plots "
          f"in {time.monotonic() - started:.0f} s")  # fmt: skip
    for problem in problems:
        print(f"problem: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
