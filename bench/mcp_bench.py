"""MCP ``notice`` calls per second beside gRPC ``Notice``, in one run, on one sidecar.

One ``actonce serve`` process (embedded store and ledger on SQLite, logging warnings
only) with ``--mcp-listen``; the callers run in this process. Each round makes the
same number of notices through each front,
alternated, with the same concurrency: the gRPC stub over one channel, and the MCP
SDK's own Python client over one connection per worker. Prints calls/s and the
ratio MCP / gRPC. ``make bench-mcp``; ``--calls`` and ``--workers`` to change it.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time

import grpc
import httpx2
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.harness import free_port
from tests.helpers.env import scrubbed_env
from tests.helpers.health import wait_serving


async def grpc_notices(
    target: str, attempt_id: str, thread: str, calls: int, workers: int
) -> float:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.RunActionsServiceStub(channel)

        async def worker(w: int) -> None:
            for n in range(calls // workers):
                await stub.Notice(
                    pb.NoticeRequest(attempt_id=attempt_id, thread_id=thread, text=f"g{w}-{n}")
                )

        started = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(workers)))
        return (calls // workers * workers) / (time.perf_counter() - started)


async def mcp_notices(url: str, attempt_id: str, thread: str, calls: int, workers: int) -> float:
    async def worker(w: int, ready: asyncio.Event, go: asyncio.Event) -> None:
        headers = {"actonce-attempt-id": attempt_id}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60) as http,
            Client(streamable_http_client(url, http_client=http), cache=None) as client,
        ):
            ready.set()
            await go.wait()
            for n in range(calls // workers):
                answer = await client.call_tool(
                    "notice", {"thread_id": thread, "text": f"m{w}-{n}"}
                )
                assert not answer.is_error, answer

    go = asyncio.Event()
    readies = [asyncio.Event() for _ in range(workers)]
    tasks = [asyncio.create_task(worker(w, readies[w], go)) for w in range(workers)]
    for ready in readies:
        await ready.wait()  # connected: the handshake is not what is measured
    started = time.perf_counter()
    go.set()
    await asyncio.gather(*tasks)
    return (calls // workers * workers) / (time.perf_counter() - started)


def main(calls: int, workers: int, rounds: int) -> None:
    # The sidecar is started, and waited for, before the event loop that measures it runs.
    with tempfile.TemporaryDirectory() as data:
        grpc_port, mcp_port = free_port(), free_port()
        target = f"127.0.0.1:{grpc_port}"
        base = f"http://127.0.0.1:{mcp_port}"
        served = subprocess.Popen(
            [sys.executable, "-m", "sidecar.cli", "serve", "--listen", target,
             "--mcp-listen", f"127.0.0.1:{mcp_port}", "--data-dir", data,
             "--log-level", "warning", "--log-format", "json"],
            env=scrubbed_env(),
        )  # fmt: skip
        try:
            wait_serving(target, served)
            grpc_rates, mcp_rates = asyncio.run(_rounds(target, base, calls, workers, rounds))
        finally:
            served.terminate()
            served.wait(30)
    best_grpc, best_mcp = max(grpc_rates), max(mcp_rates)
    print(f"notices: {calls} a round, {workers} concurrent callers, {rounds} rounds, SQLite")
    print(f"gRPC Notice      {best_grpc:8.0f} calls/s  (rounds: {_list(grpc_rates)})")
    print(f"MCP notice       {best_mcp:8.0f} calls/s  (rounds: {_list(mcp_rates)})")
    print(f"MCP / gRPC       {best_mcp / best_grpc:8.2f}")


async def _rounds(
    target: str, base: str, calls: int, workers: int, rounds: int
) -> tuple[list[float], list[float]]:
    """Calls/s of each round through gRPC, and through MCP."""
    async with httpx2.AsyncClient() as http:
        began = await http.post(
            f"{base}/attempts",
            json={"run_id": "bench-mcp", "rule": "bench", "checkpoint": "c"},
        )
    attempt_id = str(began.json()["attempt_id"])
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.RunActionsServiceStub(channel)
        thread = (
            await stub.CreateThread(pb.CreateThreadRequest(attempt_id=attempt_id, title="bench"))
        ).thread_id
    grpc_rates: list[float] = []
    mcp_rates: list[float] = []
    for _ in range(rounds):
        grpc_rates.append(await grpc_notices(target, attempt_id, thread, calls, workers))
        mcp_rates.append(await mcp_notices(f"{base}/mcp", attempt_id, thread, calls, workers))
    return grpc_rates, mcp_rates


def _list(rates: list[float]) -> str:
    return ", ".join(f"{rate:.0f}" for rate in rates)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=600)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    main(args.calls, args.workers, args.rounds)
