"""The peers part of `make bench`: the systems a user would pick instead of actonce, each
making one durable write per call, measured in the same run as actonce and its floors.

- ``dbos-sqlite`` / ``dbos-postgres``: DBOS (``bench/peers/dbos_server.py``): a workflow of
  one step per call behind the sidecar's own gRPC calls, its system database on SQLite or on
  the bench's PostgreSQL; ghz drives it, as it drives actonce;
- ``restate``: the Restate server from its npm package and a service of its Python SDK on
  hypercorn (``bench/peers/restate_service.py``), one ``ctx.run`` step per call through the
  server's HTTP ingress; ``.tools/httpload`` (``bench/httpload``) drives it, a closed loop of
  the same shape as ghz's (the same callers, warm-up, durations and rounds).

Every system of the table runs the same procedure, in rounds whose order rotates: spawn it
(its cold start runs from here to its first writes answered), its resident memory idle, a
warm-up, one call at a time (p50, p99), 32 callers (writes/s and CPU per write: every process
of the system, and its PostgreSQL server's where it has one), its peak resident memory.

The peers come from their published packages, installed by ``make bench-peers-env`` into
``.venv-peers`` (``bench/peers/requirements.txt``, pinned) and ``.tools/restate-VERSION``
(npm); the part skips a peer that is not installed, and says so.
"""

from __future__ import annotations

import glob
import json
import os
import secrets
import statistics
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from bench.measuring import Measured, Plan, measure, prepare, start_target
from bench.processes import (
    SERVER_CORE,
    Target,
    free_port,
    pin,
    postgres_dsns,
    postgres_pid,
    protoset,
    wait_until_serving,
)

ROOT = Path(__file__).resolve().parents[2]
PEERS = ("restate", "dbos")
PEER_TARGETS = ("restate", "dbos-sqlite", "dbos-postgres")
RESTATE_VERSION = os.environ.get("RESTATE_VERSION", "1.7.12")
PEERS_PYTHON = Path(os.environ.get("PEERS_PYTHON", ROOT / ".venv-peers" / "bin" / "python"))
HTTPLOAD = Path(os.environ.get("HTTPLOAD", ROOT / ".tools" / "httpload"))
# The table's rows: a system and the write it makes. actonce's own rows are `actonce serve`.
TABLE = (
    ("floor1", "create"),
    ("floor3", "create"),
    ("sqlite-audited", "create"),
    ("restate", "create"),
    ("dbos-sqlite", "create"),
    ("dbos-postgres", "create"),
    ("postgres-audited", "create"),
    ("postgres-audited", "notice"),
)
LABELS = {
    "floor1": "floor1: bare grpcio aio server, one SQLite WAL `synchronous=FULL` commit per call",
    "floor3": "floor3: the same, three commits one after another",
    "sqlite-audited": "actonce (defaults)",
    "restate": f"Restate {RESTATE_VERSION} (`ctx.run`, its server's WAL fsync'd)",
    "dbos-sqlite": "DBOS on SQLite (workflow + one step)",
    "dbos-postgres": "DBOS on PostgreSQL (workflow + one step)",
    "postgres-audited": "actonce on PostgreSQL",
}


def restate_binary() -> Path | None:
    """The Restate server's binary, as its npm package installed it."""
    found = glob.glob(
        str(
            ROOT
            / ".tools"
            / f"restate-{RESTATE_VERSION}"
            / "node_modules"
            / "@restatedev"
            / "restate-server-linux-*"
            / "bin"
            / "restate-server"
        )
    )
    return Path(found[0]) if found else None  # fmt: skip


def installed(name: str) -> bool:
    """Whether the peer ``name`` can run here (`make bench-peers-env` installs them)."""
    if name == "restate":
        return restate_binary() is not None and PEERS_PYTHON.exists() and HTTPLOAD.exists()
    return PEERS_PYTHON.exists()


def _env() -> dict[str, str]:
    from tests.helpers.env import scrubbed_env

    env = scrubbed_env()
    # The peers' own packages, and the API's generated stubs and this tree for their servers.
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "clients" / "python" / "src")])
    return env


def start(name: str, work: Path, *, dsns: tuple[str, str] | None) -> Target:
    """Start the peer ``name``, its data under ``work``, and wait until it answers."""
    listen = f"127.0.0.1:{free_port()}"
    data = work / f"{name}-{time.monotonic_ns()}"
    data.mkdir(parents=True, exist_ok=True)
    spawned = time.monotonic()
    if name == "restate":
        return _start_restate(work, data, spawned)
    if name == "dbos-sqlite":
        database = f"sqlite:///{data / 'dbos.sqlite'}"
    elif name == "dbos-postgres":
        if dsns is None:
            raise ValueError("a PostgreSQL target needs DSNs")
        database = dsns[0]
    else:
        raise ValueError(f"unknown peer {name}")
    process = subprocess.Popen(
        [*pin(SERVER_CORE), str(PEERS_PYTHON), "-m", "bench.peers.dbos_server",
         "--listen", listen, "--database", database],
        stdout=subprocess.DEVNULL, stderr=(data / "server.log").open("wb"), env=_env(), cwd=data,
    )  # fmt: skip
    # ghz reads the calls from a descriptor set: grpcio's own reflection cannot find a method.
    target = Target(name, process, listen, "floor", protoset(work), spawned=spawned)
    if name == "dbos-postgres":
        target.database_pid = postgres_pid()
    try:
        wait_until_serving(target)
    except BaseException:
        target.stop()
        raise
    return target


def _start_restate(work: Path, data: Path, spawned: float) -> Target:
    binary = restate_binary()
    if binary is None:
        raise RuntimeError("the Restate server is not installed: `make bench-peers-env`")
    admin, ingress, fabric, sdk = (free_port() for _ in range(4))
    env = {**_env(), "RESTATE_ADMIN__BIND_ADDRESS": f"127.0.0.1:{admin}",
           "RESTATE_INGRESS__BIND_ADDRESS": f"127.0.0.1:{ingress}",
           "RESTATE_BIND_ADDRESS": f"127.0.0.1:{fabric}",
           "RESTATE_ADVERTISED_ADDRESS": f"http://127.0.0.1:{fabric}/"}  # fmt: skip
    server = subprocess.Popen(
        [*pin(SERVER_CORE), str(binary), "--base-dir", str(data / "restate"),
         "--listen-mode", "tcp", "--node-name", "bench", "--no-logo"],
        stdout=subprocess.DEVNULL, stderr=(data / "server.log").open("wb"), env=env, cwd=data,
    )  # fmt: skip
    service = subprocess.Popen(
        [*pin(SERVER_CORE), str(PEERS_PYTHON), "-m", "hypercorn", "--bind", f"127.0.0.1:{sdk}",
         "bench.peers.restate_service:app"],
        stdout=subprocess.DEVNULL, stderr=(data / "service.log").open("wb"), env=_env(), cwd=data,
    )  # fmt: skip
    target = Target("restate", server, f"127.0.0.1:{ingress}", "http", spawned=spawned,
                    others=[service], load_command=load_command)  # fmt: skip
    try:
        _register(admin, sdk, target)
    except BaseException:
        target.stop()
        raise
    return target


def _register(admin: int, sdk: int, target: Target, timeout: float = 60) -> None:
    """Register the SDK's service with the server (retried while either still starts)."""
    body = json.dumps({"uri": f"http://127.0.0.1:{sdk}"}).encode()
    deadline = time.monotonic() + timeout
    while True:
        for process in (target.process, *target.others):
            if process.poll() is not None:
                raise RuntimeError(f"restate: a process exited with {process.returncode}")
        request = urllib.request.Request(f"http://127.0.0.1:{admin}/deployments", data=body,
                                         headers={"content-type": "application/json"})  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:
                if answer.status in (200, 201):
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("restate: the service could not be registered")
        time.sleep(0.05)


def first_write(target: Target) -> None:
    """Restate's first call through its ingress (gRPC targets make theirs in bench.setup)."""
    load_url = f"http://{target.address}/Bench/create"
    request = urllib.request.Request(load_url, data=b'{"n":-1}',
                                     headers={"content-type": "application/json"})  # fmt: skip
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def load_command(
    scenario: str,
    target: Target,
    *,
    seconds: float | None = None,
    total: int | None = None,
    rate: int | None = None,
    concurrency: int | None = None,
) -> list[str]:
    """The closed-loop HTTP client's command: the same options ghz gets."""
    if scenario != "create" or rate is not None:
        raise ValueError(f"{target.name}: only closed-loop create runs")
    command = [str(HTTPLOAD), "-url", f"http://{target.address}/Bench/create",
               "-c", str(concurrency or 32),
               "-body", '{"nonce":"' + secrets.token_hex(6) + '","n":{{n}}}']  # fmt: skip
    if total is not None:
        return [*command, "-n", str(total)]
    return [*command, "-z", f"{seconds or 1:g}s"]


def _round(ghz: Path, plan: Plan, work: Path, name: str, dsns: dict[str, tuple[str, str]]
           ) -> None:  # fmt: skip
    begin = start if name.partition("-")[0] in PEERS else start_target
    target = begin(name, work, dsns=dsns.get(name))
    try:
        env = prepare(target)
        if target.kind == "http":
            first_write(target)
        cold = time.monotonic() - target.spawned
        time.sleep(0.5)
        idle = target.rss_mib()
        for write in [w for t, w in TABLE if t == name]:
            row = plan.peers.setdefault(f"{name}/{write}", [])
            measure(ghz, write, target, env, seconds=plan.warmup_seconds, concurrency=1)
            env["BENCH_NONCE"] = secrets.token_hex(6)
            one = measure(ghz, write, target, env, seconds=plan.c1_seconds, concurrency=1)
            env["BENCH_NONCE"] = secrets.token_hex(6)
            many = measure(ghz, write, target, env, seconds=plan.seconds,
                           concurrency=plan.concurrency)  # fmt: skip
            row.append(_entry(one, many, cold, idle, target.peak_rss_mib()))
    finally:
        target.stop()


def _entry(one: Measured, many: Measured, cold: float, idle: float, peak: float
           ) -> dict[str, Any]:  # fmt: skip
    return {"p50_ms": one.p50, "p99_ms": one.p99, "rps": many.rps,
            "cpu_ms_per_write": many.cpu_per_1000, "rss_idle_mib": idle, "rss_load_mib": peak,
            "cold_start_s": cold, "errors": one.not_ok + many.not_ok,
            "calls": one.count + many.count}  # fmt: skip


def run(ghz: Path, plan: Plan, work: Path) -> None:
    """Every system of the table, the same procedure each, in rotated rounds."""
    names = list(dict.fromkeys(t for t, _ in TABLE))
    missing = [n for n in names if n in PEER_TARGETS and not installed(n.partition("-")[0])]
    if missing:
        print(f"peers: not installed, skipped: {', '.join(missing)} (make bench-peers-env)",
              flush=True)  # fmt: skip
    names = [n for n in names if n not in missing]
    plan.peers_skipped = missing
    dsns = postgres_dsns(names)
    for round_ in range(plan.rounds):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            _round(ghz, plan, work, name, dsns)
            last = {k: v[-1] for k, v in plan.peers.items() if k.startswith(f"{name}/")}
            print(f"peers round {round_ + 1}/{plan.rounds} {name:<18} " + " ".join(
                f"{k.split('/')[1]} p50 {v['p50_ms']:.2f} ms, {v['rps']:.0f}/s"
                for k, v in last.items()), flush=True)  # fmt: skip


def medians(plan: Plan) -> dict[str, dict[str, Any]]:
    """Each row's medians over its rounds."""
    out: dict[str, dict[str, Any]] = {}
    for key, rounds in plan.peers.items():
        out[key] = {field: statistics.median(r[field]
                                             for r in rounds) for field in rounds[0]}  # fmt: skip
        out[key]["errors"] = sum(r["errors"] for r in rounds)
        out[key]["calls"] = sum(r["calls"] for r in rounds)
        out[key]["rounds"] = len(rounds)
    return out
