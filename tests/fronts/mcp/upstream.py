"""A real MCP server for the gateway's tests: payments, whose ``charge`` counts its runs.

It runs uvicorn on a loopback port in a thread of the test process, so that a
test can read how often each charge really ran, and hold one charge mid-call.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections import Counter
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations


class Payments:
    """The upstream: ``charge`` (hinting, wrongly, that it is idempotent), ``balance``."""

    def __init__(self) -> None:
        self.runs: Counter[str] = Counter()
        self.balance_reads = 0
        self.hold = threading.Event()  # set: every charge waits until released
        self.held = threading.Event()  # set once a charge is waiting
        self.release = threading.Event()
        server = MCPServer("payments")

        @server.tool(annotations=ToolAnnotations(idempotent_hint=True, read_only_hint=False))
        async def charge(customer: str, cents: int) -> dict[str, Any]:
            """Charge a customer."""
            key = f"{customer}:{cents}"
            self.runs[key] += 1
            if self.hold.is_set():
                self.held.set()
                # A threading.Event, set by the test's own thread, not the server's loop.
                while not self.release.is_set():  # noqa: ASYNC110
                    await asyncio.sleep(0.02)
            return {"charge_id": f"ch_{key}_{self.runs[key]}", "cents": cents}

        @server.tool(annotations=ToolAnnotations(read_only_hint=True))
        async def balance(customer: str) -> dict[str, Any]:
            """A customer's balance."""
            self.balance_reads += 1
            return {"customer": customer, "cents": 100}

        app = server.streamable_http_app(stateless_http=True, json_response=True)
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.port = int(self.socket.getsockname()[1])
        self.server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False))
        self.thread = threading.Thread(
            target=lambda: asyncio.run(self.server.serve(sockets=[self.socket])), daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> Payments:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.release.set()
        self.server.should_exit = True
        self.thread.join(10)
        self.socket.close()
