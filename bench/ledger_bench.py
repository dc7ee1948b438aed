"""Audited against unaudited throughput, on SQLite and on PostgreSQL: group commit at work.

Each target is a real sidecar process (bench/serve.py) pinned to one core; the
load comes from this process, pinned to the other, as many concurrent Notice
calls over gRPC. Targets alternate over rounds in one run, so that the
machine's noise falls on all of them alike; the report gives medians and the
audited/unaudited ratio per backend. Run: `make bench-ledger`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc

from tests.harness import free_port
from tests.helpers import postgres as pg
from tests.helpers.health import wait_serving

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"


async def load(target: str, seconds: float, concurrency: int) -> tuple[int, int]:
    """Concurrent Notice calls for ``seconds``; returns (ok, errors)."""
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.RunActionsServiceStub(channel)
        attempt = (
            await stub.BeginAttempt(
                pb.BeginAttemptRequest(run_id=f"bench-{time.time_ns()}", rule="bench")
            )
        ).attempt_id
        thread = (
            await stub.CreateThread(pb.CreateThreadRequest(attempt_id=attempt, title="bench"))
        ).thread_id
        ok = errors = 0
        deadline = time.monotonic() + seconds

        async def worker(w: int) -> None:
            nonlocal ok, errors
            n = 0
            while time.monotonic() < deadline:
                n += 1
                try:
                    await stub.Notice(
                        pb.NoticeRequest(attempt_id=attempt, thread_id=thread, text=f"{w}-{n}"),
                        timeout=10,
                    )
                    ok += 1
                except grpc.aio.AioRpcError:
                    errors += 1

        await asyncio.gather(*(worker(w) for w in range(concurrency)))
        return ok, errors


def start(
    name: str, backend: str, audited: bool, work: Path
) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    args = [sys.executable, str(ROOT / "bench" / "serve.py"), "--listen", f"127.0.0.1:{port}",
            "--data-dir", str(work / name)]  # fmt: skip
    if backend == "postgres":
        args += ["--audit-dsn", pg.fresh_database("bench_ledger"),
                 "--store-dsn", pg.fresh_database("bench_store")]  # fmt: skip
    if not audited:
        args.append("--unaudited")
    cores = os.sched_getaffinity(0)
    prefix = ["taskset", "-c", "0"] if len(cores) > 1 else []
    process = subprocess.Popen(prefix + args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    target = f"127.0.0.1:{port}"
    wait_serving(target, process)
    return process, target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--backends", default="sqlite,postgres")
    args = parser.parse_args()
    if len(os.sched_getaffinity(0)) > 1:
        os.sched_setaffinity(0, {1})  # the load on the other core than the sidecar
    targets = [(b, audited) for b in args.backends.split(",") for audited in (False, True)]
    results: dict[str, list[float]] = {
        f"{b} {'audited' if a else 'unaudited'}": [] for b, a in targets
    }
    errors = 0
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for backend, audited in targets:
                name = f"{backend} {'audited' if audited else 'unaudited'}"
                process, target = start(
                    f"{backend}-{audited}-{round_}", backend, audited, Path(tmp)
                )
                try:
                    ok, failed = asyncio.run(load(target, args.seconds, args.concurrency))
                finally:
                    process.terminate()
                    process.wait(30)
                results[name].append(ok / args.seconds)
                errors += failed
                print(f"round {round_ + 1} {name:<22} {ok / args.seconds:8.0f} rps", flush=True)
    report = {name: statistics.median(rps) for name, rps in results.items()}
    print("\nbackend     unaudited rps   audited rps   audited/unaudited")
    summary: dict[str, dict[str, float]] = {}
    for backend in args.backends.split(","):
        plain, with_audit = report[f"{backend} unaudited"], report[f"{backend} audited"]
        ratio = with_audit / plain if plain else 0.0
        summary[backend] = {"unaudited_rps": plain, "audited_rps": with_audit, "ratio": ratio}
        print(f"{backend:<10} {plain:14.0f} {with_audit:13.0f} {ratio:19.2f}")
    print(f"errors: {errors}")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "ledger.json").write_text(json.dumps(
        {"rounds": results, "median": summary, "errors": errors, "seconds": args.seconds,
         "concurrency": args.concurrency, "cores": os.cpu_count()}, indent=2) + "\n")  # fmt: skip


if __name__ == "__main__":
    main()
