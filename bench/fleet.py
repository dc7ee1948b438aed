"""`make bench-fleet`: sidecars on one PostgreSQL ledger, writing at saturation.

For each fleet size (1, 2, 4, 8 sidecars; ``--sizes``), on a private server of its own and a
fresh ledger: that many ``actonce serve`` processes (each with its embedded SQLite store, so
that the ledger is the only thing they share), one ghz per sidecar writing Creates at
``--concurrency`` for ``--seconds``, all at once. Beside the writes/s of the whole fleet it
samples, every 0.1 s: the sessions waiting on a lock in the ledger's database (PostgreSQL's
``wait_event_type = 'Lock'``), the server connections the fleet holds, and the machine's CPU
use; and reads the commits and events the ledger took, for events per commit. The largest
size runs again through PgBouncer in transaction mode (``--pooler``) when it is installed.

pgbench's figure for the same append shape comes beside it: a transaction that reads a head
row FOR UPDATE, inserts an event and moves the head, by as many clients as sidecars, with one
head row shared by all (the ledger's shape) and with one head row per client (what appends to
separate chains would cost the server).

Writes bench/out/fleet.json and fleet.md (and fleet.png when matplotlib is installed).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from bench import setup
from bench.processes import free_port, ghz_binary
from sidecar.ledger.pgschema import migrate
from tests.helpers.pgbouncer import Pooler, available
from tests.helpers.postgres import PrivateServer, fresh_database

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"
SERVER = PrivateServer("/tmp/actonce-bench-fleet-pg", 55461)


@dataclass
class Point:
    """One fleet size's run."""

    sidecars: int
    pooler: bool
    writes_per_second: float
    not_ok: int
    lock_waiting: float  # sessions waiting on a lock in the ledger's database, on average
    lock_waiting_peak: int
    connections: float  # the fleet's client connections to the server, on average
    connections_peak: int
    events_per_commit: float
    cpu_busy: float  # the machine's cores, busy share (0 to 1)
    pgbench_shared_head: float = 0.0  # appends/s, as many clients as sidecars, one head row
    pgbench_head_per_client: float = 0.0  # appends/s, one head row per client
    statuses: dict[str, int] = field(default_factory=dict)


def _cpu_ticks() -> tuple[int, int]:
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


class _Sampler:
    """The ledger's lock waits and connections, sampled while the fleet writes."""

    def __init__(self, admin_dsn: str, database: str) -> None:
        self._admin = admin_dsn
        self._database = database
        self.waiting: list[int] = []
        self.connections: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with psycopg.connect(self._admin, autocommit=True) as conn:
            while not self._stop.is_set():
                row = conn.execute(
                    "SELECT count(*) FILTER (WHERE wait_event_type = 'Lock'), count(*) "
                    "FROM pg_stat_activity WHERE datname = %s AND backend_type = 'client backend'",
                    (self._database,),
                ).fetchone()
                assert row is not None
                self.waiting.append(int(row[0]))
                self.connections.append(int(row[1]))
                self._stop.wait(0.1)

    def __enter__(self) -> _Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5)


def _ledger_counts(dsn: str) -> tuple[int, int]:
    """The ledger database's commits so far, and its events."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
        events = conn.execute("SELECT count(*) FROM audit_events").fetchone()
    assert row is not None and events is not None
    return int(row[0]), int(events[0])


def _spawn(dsn: str, work: Path, n: int) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    data = work / f"data{n}"
    args = [sys.executable, "-m", "sidecar.cli", "serve", "--listen", f"127.0.0.1:{port}",
            "--data-dir", str(data), "--audit-dsn", dsn, "--log-level", "warning"]  # fmt: skip
    log = (work / f"sidecar{n}.log").open("ab")
    process = subprocess.Popen(args, stdout=log, stderr=log)
    return process, f"127.0.0.1:{port}"


def _ready(target: str, process: subprocess.Popen[bytes]) -> dict[str, str]:
    deadline = time.monotonic() + 60
    while True:
        try:
            return setup.sidecar(target)
        except Exception:
            if process.poll() is not None or time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def _ghz(ghz: Path, target: str, env: dict[str, str], seconds: float, concurrency: int) -> Any:
    command = [str(ghz), "--config", str(ROOT / "bench" / "ghz" / "create.json"),
               "--format", "json", "-z", f"{seconds:g}s", "--duration-stop", "wait",
               "-c", str(concurrency), target]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.PIPE, env={**os.environ, **env})


def fleet_point(
    ghz: Path, server: str, sidecars: int, *, seconds: float, concurrency: int, pooler: bool
) -> Point:
    """``sidecars`` sidecars writing at once on a fresh ledger: what they managed."""
    ledger = fresh_database(f"fleet{sidecars}", server=server)
    migrate(ledger)
    database = ledger.rsplit("/", 1)[-1]
    work = Path(tempfile.mkdtemp(prefix="actonce-fleet-"))
    bouncer = Pooler(server, default_pool_size=2 * sidecars + 2).start() if pooler else None
    dsn = bouncer.dsn(ledger) if bouncer is not None else ledger
    processes: list[subprocess.Popen[bytes]] = []
    try:
        started = [_spawn(dsn, work, n) for n in range(sidecars)]
        processes = [process for process, _ in started]
        envs = [_ready(target, process) for process, target in started]
        commits, events = _ledger_counts(ledger)
        busy, total = _cpu_ticks()
        with _Sampler(server, database) as sampler:
            loads = [
                _ghz(ghz, target, env, seconds, concurrency)
                for (_, target), env in zip(started, envs, strict=True)
            ]
            reports = [json.loads(load.communicate()[0]) for load in loads]
        busy2, total2 = _cpu_ticks()
        commits2, events2 = _ledger_counts(ledger)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(20)
        if bouncer is not None:
            bouncer.stop()
        shutil.rmtree(work, ignore_errors=True)
    statuses: dict[str, int] = {}
    for report in reports:
        for status, n in (report.get("statusCodeDistribution") or {}).items():
            statuses[status] = statuses.get(status, 0) + n
    ok = statuses.get("OK", 0)
    took = max(float(r["total"]) / 1e9 for r in reports)
    waiting, held = sampler.waiting or [0], sampler.connections or [0]
    return Point(
        sidecars=sidecars,
        pooler=pooler,
        writes_per_second=round(ok / took, 1),
        not_ok=sum(statuses.values()) - ok,
        lock_waiting=round(sum(waiting) / len(waiting), 2),
        lock_waiting_peak=max(waiting),
        connections=round(sum(held) / len(held), 1),
        connections_peak=max(held),
        events_per_commit=round((events2 - events) / max(1, commits2 - commits), 2),
        cpu_busy=round((busy2 - busy) / max(1, total2 - total), 2),
        statuses=statuses,
    )


# The ledger's append, without Python: the head row read FOR UPDATE, an event, the head moved.
_PGBENCH_SETUP = """
DROP TABLE IF EXISTS bench_events, bench_heads;
CREATE TABLE bench_heads (id INTEGER PRIMARY KEY, seq BIGINT NOT NULL, hash TEXT NOT NULL);
CREATE TABLE bench_events (id INTEGER NOT NULL, seq BIGINT NOT NULL, body TEXT NOT NULL,
                           hash TEXT NOT NULL, PRIMARY KEY (id, seq));
INSERT INTO bench_heads SELECT g, 0, '' FROM generate_series(0, 63) g;
"""
_PGBENCH_SCRIPT = """
\\set head {head}
BEGIN;
SELECT seq, hash FROM bench_heads WHERE id = :head FOR UPDATE;
INSERT INTO bench_events SELECT :head, seq + 1, repeat('x', 400), md5(hash || seq)
    FROM bench_heads WHERE id = :head;
UPDATE bench_heads SET seq = seq + 1, hash = md5(hash || seq) WHERE id = :head;
COMMIT;
"""


def pgbench(server: str, clients: int, *, shared_head: bool, seconds: float) -> float:
    """Appends/s of pgbench's ``clients`` running the append shape above."""
    dsn = fresh_database("pgbench", server=server)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(_PGBENCH_SETUP)
    script = Path(tempfile.mkstemp(suffix=".sql")[1])
    script.write_text(_PGBENCH_SCRIPT.format(head="0" if shared_head else ":client_id"))
    script.chmod(0o644)
    binary = shutil.which("pgbench") or "pgbench"
    command = [binary, "-n", "-f", str(script), "-c", str(clients), "-j", str(min(clients, 2)),
               "-T", str(max(1, round(seconds))), dsn]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    script.unlink()
    for line in done.stdout.splitlines():
        if line.startswith("tps"):
            return round(float(line.split("=")[1].split()[0]), 1)
    raise RuntimeError(done.stdout + done.stderr)


def report(points: list[Point]) -> str:
    base = next((p.writes_per_second for p in points if p.sidecars == 1 and not p.pooler), 0.0)
    lines = [
        "# Fleet bench: sidecars on one PostgreSQL ledger",
        "",
        f"{os.cpu_count()} cores; Creates at saturation, one ghz per sidecar; `make bench-fleet`.",
        "",
        "| sidecars | via | writes/s | times one | waiting on a lock (avg / peak) | connections "
        "(avg / peak) | events per commit | CPU busy | pgbench, one head | pgbench, a head "
        "per client | not OK |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for p in points:
        times = f"{p.writes_per_second / base:.2f}" if base else "-"
        lines.append(
            f"| {p.sidecars} | {'PgBouncer (transaction)' if p.pooler else 'direct'} | "
            f"{p.writes_per_second:.0f} | {times} | {p.lock_waiting:.2f} / {p.lock_waiting_peak} | "
            f"{p.connections:.1f} / {p.connections_peak} | {p.events_per_commit:.2f} | "
            f"{p.cpu_busy:.0%} | {_figure(p.pgbench_shared_head)} | "
            f"{_figure(p.pgbench_head_per_client)} | {p.not_ok} |"
        )
    return "\n".join(lines) + "\n"


def _figure(value: float) -> str:
    return f"{value:.0f}" if value else "-"


def plot(points: list[Point], out: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    direct = [p for p in points if not p.pooler]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    sizes = [p.sidecars for p in direct]
    left.plot(sizes, [p.writes_per_second for p in direct], marker="o", label="sidecars")
    left.plot(sizes, [p.pgbench_shared_head for p in direct], marker="s", label="pgbench, one head")
    left.plot(sizes, [p.pgbench_head_per_client for p in direct], marker="^",
              label="pgbench, a head per client")  # fmt: skip
    left.set_xlabel("sidecars (pgbench: clients)")
    left.set_ylabel("writes/s")
    left.legend()
    right.plot(sizes, [p.lock_waiting for p in direct], marker="o", label="waiting on a lock")
    right.plot(sizes, [p.cpu_busy * 10 for p in direct], marker="s", label="CPU busy (x10)")
    right.set_xlabel("sidecars")
    right.legend()
    fig.tight_layout()
    fig.savefig(out / "fleet.png", dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,2,4,8")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--pooler", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    ghz = ghz_binary()
    server = SERVER.start()
    points: list[Point] = []
    try:
        for size in [int(s) for s in args.sizes.split(",")]:
            point = fleet_point(ghz, server, size, seconds=args.seconds,
                                concurrency=args.concurrency, pooler=False)  # fmt: skip
            point.pgbench_shared_head = pgbench(server, size, shared_head=True,
                                                seconds=args.seconds)  # fmt: skip
            point.pgbench_head_per_client = pgbench(server, size, shared_head=False,
                                                    seconds=args.seconds)  # fmt: skip
            points.append(point)
            print(json.dumps(asdict(point)), flush=True)
        if args.pooler and available():
            largest = max(int(s) for s in args.sizes.split(","))
            point = fleet_point(ghz, server, largest, seconds=args.seconds,
                                concurrency=args.concurrency, pooler=True)  # fmt: skip
            points.append(point)
            print(json.dumps(asdict(point)), flush=True)
    finally:
        SERVER.run("stop")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fleet.json").write_text(json.dumps([asdict(p) for p in points], indent=2))
    (args.out / "fleet.md").write_text(report(points))
    plot(points, args.out)
    print(report(points))
    return 0


if __name__ == "__main__":
    sys.exit(main())
