"""The window a send permit leaves for an unkeyed upstream: from the gateway's last check that
the permit's deadline has not passed to the moment the call's request reaches the socket.

A process frozen (SIGSTOP) or descheduled inside that window sends its call late, after a
person may have decided it did not run. The gateway makes the check right before it hands the
call to the MCP SDK's client (sidecar.fronts.mcp.gateway); this measures what the client and
its HTTP transport do between the two, over loopback against a real MCP server made with the
SDK, as percentiles in microseconds.

    python -m bench.permit_window [--calls 300]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx2
from httpcore2._backends.anyio import AnyIOStream
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.fronts.mcp.charges import Charges
from tests.harness import free_port

_written: list[float] = []
_original_write = AnyIOStream.write


async def _timed_write(
    self: AnyIOStream,
    buffer: bytes,
    timeout: float | None = None,  # noqa: ASYNC109  (httpcore's own signature)
) -> None:
    if b'"tools/call"' in buffer or b"tools/call" in buffer:
        _written.append(time.perf_counter())
    await _original_write(self, buffer, timeout)


async def _measure(url: str, calls: int) -> list[float]:
    AnyIOStream.write = _timed_write  # type: ignore[method-assign]
    windows: list[float] = []
    async with (
        httpx2.AsyncClient(timeout=30) as http,
        Client(streamable_http_client(url, http_client=http), cache=None) as client,
    ):
        for _ in range(calls):
            _written.clear()
            checked = time.perf_counter()  # where the gateway checks permit.expired()
            await client.call_tool("balance", {"customer": "ann"})
            if _written:
                windows.append((_written[0] - checked) * 1e6)
    return windows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        upstream = Charges(Path(folder) / "payments.log", free_port()).start()
        try:
            windows = asyncio.run(_measure(upstream.url, args.calls))
        finally:
            upstream.kill()
    if not windows:
        print("no call's request was seen on the socket", file=sys.stderr)
        return 1
    ordered = sorted(windows)

    def at(share: float) -> float:
        return ordered[min(len(ordered) - 1, int(share * len(ordered)))]

    print(
        f"permit window over {len(windows)} calls (µs): p50 {statistics.median(windows):.0f}, "
        f"p90 {at(0.9):.0f}, p99 {at(0.99):.0f}, max {ordered[-1]:.0f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
