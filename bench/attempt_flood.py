"""A flood of distinct runs that nobody ends, against `actonce serve` with its default bounds.

Each run begins an attempt and makes one Create with a `request_id`, then never calls again
(an agent killed mid-run): the attempt and its answered request stay in the sidecar's memory
until it forgets them. The flood runs at `--rate` runs a second for `--seconds`; the
sidecar's resident memory is sampled all along, and the script prints its peak against the
Kubernetes manifest's limit (256 MiB), with the live and forgotten attempts from the metrics.

    .venv/bin/python -m bench.attempt_flood --rate 550 --seconds 60

550 runs a second is ten times what the defaults of old (an hour's idle TTL and no other
bound) could sustain within 256 MiB.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from pathlib import Path

import grpc
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc

from tests.harness import free_port
from tests.helpers.env import scrubbed_env
from tests.helpers.health import NeverAnswered, wait_serving

LIMIT_MIB = 256


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def metric(port: int, name: str) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(name):
            key, _, number = line.rpartition(" ")
            found[key] = float(number)
    return found


EXAMPLES: dict[str, str] = {}


async def one_run(stub: pb_grpc.RunActionsServiceAsyncStub, n: int, codes: Counter[str]) -> None:
    try:
        attempt = await stub.BeginAttempt(
            pb.BeginAttemptRequest(run_id=f"flood-{n}", rule="flood", checkpoint="cp-0"),
            timeout=30,
        )
        await stub.Create(
            pb.CreateRequest(
                attempt_id=attempt.attempt_id,
                kind="flood",
                data_json=json.dumps({"n": n}),
                request_id=str(uuid.uuid4()),
            ),
            timeout=30,
        )
        codes["OK"] += 1
    except grpc.aio.AioRpcError as error:
        codes[error.code().name] += 1
        EXAMPLES.setdefault(error.code().name, str(error.details()))


async def flood(target: str, pid: int, rate: float, seconds: float) -> dict[str, object]:
    codes: Counter[str] = Counter()
    samples: list[float] = []
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.RunActionsServiceStub(channel)
        tasks: set[asyncio.Task[None]] = set()
        began = time.monotonic()
        n = 0
        next_sample = began
        # Open loop: runs are started on the clock, whether or not earlier ones answered,
        # with a cap on those in flight so the client itself stays within its own memory.
        while (now := time.monotonic()) - began < seconds:
            due = int((now - began) * rate)
            while n < due and len(tasks) < 2000:
                task = asyncio.create_task(one_run(stub, n, codes))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                n += 1
            if now >= next_sample:
                samples.append(rss_mib(pid))
                next_sample += 1.0
            await asyncio.sleep(0.005)
        if tasks:
            await asyncio.wait(tasks)
        elapsed = time.monotonic() - began
    samples.append(rss_mib(pid))
    return {"started": n, "elapsed": elapsed, "codes": dict(codes), "rss": samples}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=float, default=550.0, help="runs begun a second")
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    port, metrics = free_port(), free_port()
    with tempfile.TemporaryDirectory() as data:
        sidecar = subprocess.Popen(
            [sys.executable, "-m", "sidecar.cli", "serve", "--listen", f"127.0.0.1:{port}",
             "--data-dir", data, "--metrics-listen", f"127.0.0.1:{metrics}",
             "--log-level", "error", "--log-format", "json"],
            env=scrubbed_env(), stdout=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            try:
                wait_serving(f"127.0.0.1:{port}", sidecar, timeout=60)
            except NeverAnswered as never:
                raise SystemExit(f"the sidecar did not come up: {never}") from None
            idle = rss_mib(sidecar.pid)
            result = asyncio.run(flood(f"127.0.0.1:{port}", sidecar.pid, args.rate, args.seconds))
            alive = sidecar.poll() is None
            live = metric(metrics, "actonce_live_attempts")
            forgotten = metric(metrics, "actonce_attempts_forgotten_total")
        finally:
            sidecar.terminate()
            sidecar.wait(60)
    rss = [float(x) for x in result["rss"]]  # type: ignore[attr-defined]
    elapsed = float(result["elapsed"])  # type: ignore[arg-type]
    ok = dict(result["codes"]).get("OK", 0)  # type: ignore[call-overload]
    print(f"runs started        {result['started']} in {elapsed:.1f}s "
          f"(asked {args.rate:g}/s; {int(result['started']) / elapsed:.0f}/s)")  # type: ignore[call-overload]  # fmt: skip
    print(f"runs answered       {ok} ({ok / elapsed:.0f}/s); codes {result['codes']}")
    for code, example in EXAMPLES.items():
        print(f"  {code}: {example}")
    print(f"sidecar alive       {alive}")
    print(f"RSS idle            {idle:.0f} MiB")
    print(f"RSS peak            {max(rss):.0f} MiB of the manifest's {LIMIT_MIB} MiB "
          f"({max(rss) / LIMIT_MIB:.2f})")  # fmt: skip
    print(f"RSS at the end      {rss[-1]:.0f} MiB")
    print(f"live attempts       {live}")
    print(f"forgotten attempts  {forgotten}")
    if not alive or max(rss) > LIMIT_MIB:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
