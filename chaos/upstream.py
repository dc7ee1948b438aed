"""The gateway's upstream in chaos seeds: a payments MCP server, made with the MCP SDK, in a
process of its own, that counts in a file what it really charged.

``charge(customer, cents, seconds)`` charges at once (a line ``charge CUSTOMER CENTS``,
appended and synced before anything else), then takes ``seconds`` to answer: a charge made
is on record whoever gives up on its answer, as a processor's dashboard shows it. Some
seeds make it slower than the attempt's lease or the gateway's upstream timeout. Some MCP
handshakes (``initialize``, which carries no tool call) are held ``--slow-handshake``
seconds, at the rate ``--slow-handshake-rate`` drawn from ``--seed``: time passes between
a step's send permit and its send, which the call's one deadline must bound.

Run as ``python -m chaos.upstream --port N --log FILE``; :class:`Upstream` runs it for a
seed and reads its file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer

from tests.helpers.env import scrubbed_env

# The gateway lists this server under NAME: its charge is NAME__charge (plan.GATEWAY_TOOL).
NAME = "payments"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


def charge_line(customer: str, cents: int) -> str:
    return f"charge {customer} {cents}"


def charge_id(customer: str, n: int) -> str:
    """The id of a customer's n-th charge (1 for the first)."""
    return f"ch_{customer}_{n}"


def build(log: Path) -> MCPServer:
    server = MCPServer(NAME)

    @server.tool()
    async def charge(customer: str, cents: int, seconds: float) -> dict[str, Any]:
        """Charge a customer; the answer takes ``seconds``."""
        line = charge_line(customer, cents)
        with log.open("a", encoding="utf-8") as out:
            out.write(line + "\n")
            out.flush()
            os.fsync(out.fileno())
        n = sum(1 for seen in read_lines(log) if seen == line)
        await asyncio.sleep(seconds)
        return {"charge_id": charge_id(customer, n), "cents": cents}

    return server


class SlowHandshake:
    """ASGI middleware holding some ``initialize`` requests before the MCP app sees them."""

    def __init__(self, app: App, *, seconds: float, rate: float, seed: int) -> None:
        self.app = app
        self.seconds = seconds
        self.rate = rate
        self.rng = random.Random(seed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST" or not self.rate:
            await self.app(scope, receive, send)
            return
        read: list[Message] = []
        body = b""
        while True:
            message = await receive()
            read.append(message)
            if message["type"] != "http.request":
                break
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if b'"initialize"' in body and self.rng.random() < self.rate:
            await asyncio.sleep(self.seconds)

        async def replay() -> Message:
            return read.pop(0) if read else await receive()

        await self.app(scope, replay, send)


def read_lines(log: Path) -> list[str]:
    try:
        return log.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m chaos.upstream")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--slow-handshake", type=float, default=0.0)
    parser.add_argument("--slow-handshake-rate", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    app = build(args.log).streamable_http_app(stateless_http=True, json_response=True)
    slowed = SlowHandshake(
        app, seconds=args.slow_handshake, rate=args.slow_handshake_rate, seed=args.seed
    )
    uvicorn.run(slowed, host="127.0.0.1", port=args.port, log_config=None, access_log=False)


@dataclass
class Upstream:
    """The payments server's process for one seed: started, stopped, and read."""

    log: Path
    port: int
    slow_handshake: float = 0.0
    slow_handshake_rate: float = 0.0
    seed: int = 0
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self, timeout: float = 30.0) -> Upstream:
        command = [
            sys.executable, "-m", "chaos.upstream", "--port", str(self.port),
            "--log", str(self.log), "--slow-handshake", str(self.slow_handshake),
            "--slow-handshake-rate", str(self.slow_handshake_rate), "--seed", str(self.seed),
        ]  # fmt: skip
        with self.log.with_suffix(".out").open("ab") as out:
            self.process = subprocess.Popen(
                command, stdout=out, stderr=out, env=scrubbed_env(), start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"the payments upstream did not start; see {self.log}.out")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def charges(self) -> Counter[str]:
        """How many times each customer was charged, as the upstream's file says."""
        counted: Counter[str] = Counter()
        for line in read_lines(self.log):
            word, customer, _cents = line.split(" ", 2)
            if word == "charge":
                counted[customer] += 1
        return counted


def recorded_result(customer: str, cents: int) -> str:
    """The result an operator records with ``--ran``: the tool result the upstream gave."""
    answer = {"charge_id": charge_id(customer, 1), "cents": cents}
    return json.dumps(
        {
            "content": [{"type": "text", "text": json.dumps(answer)}],
            "structuredContent": answer,
            "isError": False,
        }
    )


if __name__ == "__main__":
    main()
