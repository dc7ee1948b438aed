"""A payments MCP server in a process of its own, made with the MCP SDK, that counts what
it really did in a file: the gateway's tests kill it, cut it off and time it out.

Every effect is a line appended (and synced) to ``--log`` before the tool answers, so that
what the upstream did is known even when it, or the sidecar in front of it, is killed:

- ``charge(customer, cents)``: charges (``charge customer cents``), then takes
  ``--charge-seconds`` to answer;
- ``charge_late(customer, cents)``: takes ``--charge-seconds``, then charges (``late customer
  cents``) and answers: a processor on which a person sees nothing while the call is under way;
- ``charge_keyed(customer, cents, idempotency_key)`` and ``charge_meta(customer, cents)``
  (its key in ``_meta["payments/idempotency_key"]``): charge once per key, as Stripe
  does, and answer the first charge again for a key seen before;
- ``set_status(ticket, status)``: an idempotent write, answering ``isError`` "busy,
  nothing done" to its first ``--busy-first`` calls;
- ``refund(customer)``: answers ``isError`` "card declined" every time;
- ``send_mail(to)``: answers ``isError`` "mailbox full, nothing sent" to its first call
  per address, then sends;
- ``charge_optional_key(customer, cents, idempotency_key="")``: charges once per key when
  given one, and every time when not;
- ``hang(customer)``: charges (``hang customer``), then never answers;
- ``chatter(customer)``: charges (``chatter customer``), then sends a log notification every
  10 ms, and never answers;
- ``statement(customer, mib)``: charges (``statement customer``), then answers ``mib`` MiB;
- ``balance(customer)``: reads.

``charge_meta`` declares the ``_meta`` key it reads in its listed ``_meta``, as the effects
file's ``{meta: KEY}`` needs (sidecar.fronts.mcp.settings). With ``--sse-ping SECONDS`` the
server answers in SSE streams, each sending a keep-alive comment every SECONDS. With
``--slow-handshake SECONDS``, while a file ``FILE.slow`` beside the log exists, every
handshake (``initialize``, or 2026's ``server/discover``) is answered SECONDS late.

Run as ``python -m tests.fronts.mcp.charges --port N --log FILE``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
from mcp.server import _streamable_http_modern
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from sse_starlette import EventSourceResponse

META_KEY = "payments/idempotency_key"


def build(log: Path, charge_seconds: float, busy_first: int) -> MCPServer:
    server = MCPServer("payments")
    calls: Counter[str] = Counter()

    def record(line: str) -> None:
        with log.open("a", encoding="utf-8") as out:
            out.write(line + "\n")
            out.flush()
            os.fsync(out.fileno())

    def seen(prefix: str) -> str | None:
        for line in read_lines(log):
            if line.startswith(prefix):
                return line
        return None

    async def charge_once(kind: str, customer: str, cents: int, key: str) -> dict[str, Any]:
        earlier = seen(f"{kind} {key} ")
        if earlier is None:
            record(f"{kind} {key} {customer} {cents}")
        await asyncio.sleep(charge_seconds)
        return {"charge_id": f"ch_{key}", "cents": cents, "again": earlier is not None}

    @server.tool(annotations=ToolAnnotations(idempotent_hint=True, read_only_hint=False))
    async def charge(customer: str, cents: int) -> dict[str, Any]:
        """Charge a customer."""
        record(f"charge {customer} {cents}")
        n = sum(1 for line in read_lines(log) if line == f"charge {customer} {cents}")
        await asyncio.sleep(charge_seconds)
        return {"charge_id": f"ch_{customer}_{cents}_{n}", "cents": cents}

    @server.tool()
    async def charge_late(customer: str, cents: int) -> dict[str, Any]:
        """Charge a customer at the end of a slow call, as a processor that answers late."""
        await asyncio.sleep(charge_seconds)
        record(f"late {customer} {cents}")
        return {"charge_id": f"ch_late_{customer}_{cents}", "cents": cents}

    @server.tool()
    async def charge_keyed(customer: str, cents: int, idempotency_key: str) -> dict[str, Any]:
        """Charge a customer once per idempotency key."""
        return await charge_once("keyed", customer, cents, idempotency_key)

    @server.tool(meta={META_KEY: "the charge's idempotency key"})
    async def charge_meta(customer: str, cents: int, ctx: Context) -> dict[str, Any]:
        """Charge a customer once per idempotency key, given in _meta."""
        meta = ctx.request_context.meta or {}
        return await charge_once("meta", customer, cents, str(meta.get(META_KEY, "")))

    @server.tool()
    async def charge_optional_key(
        customer: str, cents: int, idempotency_key: str = ""
    ) -> dict[str, Any]:
        """Charge a customer: once per idempotency key when given one."""
        if idempotency_key:
            return await charge_once("optkey", customer, cents, idempotency_key)
        record(f"optkey - {customer} {cents}")
        await asyncio.sleep(charge_seconds)
        return {"charge_id": f"ch_{customer}_{cents}", "cents": cents}

    @server.tool()
    async def hang(customer: str) -> dict[str, Any]:
        """Charge a customer, and never answer."""
        record(f"hang {customer}")
        await asyncio.Event().wait()
        return {}

    @server.tool()
    async def chatter(customer: str, ctx: Context) -> dict[str, Any]:
        """Charge a customer, then say so for ever."""
        record(f"chatter {customer}")
        while True:  # a notification every 10 ms: each read is quick, the call never ends
            await ctx.info(f"still charging {customer}")
            await asyncio.sleep(0.01)

    @server.tool()
    async def statement(customer: str, mib: int) -> dict[str, Any]:
        """Charge for a statement, and answer it: ``mib`` MiB of text."""
        record(f"statement {customer}")
        return {"customer": customer, "lines": "x" * (mib << 20)}

    @server.tool()
    async def set_status(ticket: str, status: str) -> Any:
        """Set a ticket's status."""
        calls["set_status"] += 1
        if calls["set_status"] <= busy_first:
            record(f"busy {ticket}")
            return CallToolResult(content=[TextContent(text="busy, nothing done")], is_error=True)
        record(f"status {ticket} {status}")
        return {"ticket": ticket, "status": status}

    @server.tool()
    async def refund(customer: str) -> Any:
        """Refund a customer's last charge."""
        record(f"declined {customer}")
        return CallToolResult(content=[TextContent(text="card declined")], is_error=True)

    @server.tool()
    async def send_mail(to: str) -> Any:
        """Send a mail."""
        calls[f"mail {to}"] += 1
        if calls[f"mail {to}"] == 1:
            return CallToolResult(
                content=[TextContent(text="mailbox full, nothing sent")], is_error=True
            )
        record(f"mail {to}")
        return {"sent": to}

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def balance(customer: str) -> dict[str, Any]:
        """A customer's balance."""
        record(f"balance {customer}")
        return {"customer": customer, "cents": 100}

    return server


def read_lines(log: Path) -> list[str]:
    try:
        return log.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []


def _slow_handshake(app: Any, seconds: float, armed: Path) -> Any:
    """``app``, answering each ``initialize`` ``seconds`` late while ``armed`` exists."""

    def slow() -> bool:  # a stat of a local file: quick enough for a test's server
        return armed.exists()

    async def slowed(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not slow():
            await app(scope, receive, send)
            return
        messages = []
        while True:
            message = await receive()
            messages.append(message)
            if not message.get("more_body"):
                break
        body = b"".join(m.get("body", b"") for m in messages)
        if b'"initialize"' in body or b'"server/discover"' in body:
            await asyncio.sleep(seconds)

        async def replay() -> Any:
            return messages.pop(0) if messages else await receive()

        await app(scope, replay, send)

    return slowed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--charge-seconds", type=float, default=0.0)
    parser.add_argument("--busy-first", type=int, default=0)
    parser.add_argument("--sse-ping", type=float, default=0.0)
    parser.add_argument("--slow-handshake", type=float, default=0.0)
    args = parser.parse_args()
    server = build(args.log, args.charge_seconds, args.busy_first)
    if args.sse_ping:
        # The SDK's SSE responses send a keep-alive comment this often (15 s by default),
        # on the protocol of 2025 and on that of 2026's single exchange alike.
        EventSourceResponse.DEFAULT_PING_INTERVAL = args.sse_ping
        _streamable_http_modern._SSE_PING_INTERVAL = args.sse_ping
    app: Any = server.streamable_http_app(stateless_http=True, json_response=not args.sse_ping)
    if args.slow_handshake:
        app = _slow_handshake(app, args.slow_handshake, args.log.with_suffix(".slow"))
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_config=None, access_log=False)


@dataclass
class Charges:
    """The server's process, as a test runs it: started, killed, and read."""

    log: Path
    port: int
    charge_seconds: float = 0.0
    busy_first: int = 0
    sse_ping: float = 0.0
    slow_handshake: float = 0.0
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> Charges:
        args = [sys.executable, "-m", "tests.fronts.mcp.charges", "--port", str(self.port),
                "--log", str(self.log), "--charge-seconds", str(self.charge_seconds),
                "--busy-first", str(self.busy_first),
                "--sse-ping", str(self.sse_ping),
                "--slow-handshake", str(self.slow_handshake)]  # fmt: skip
        out = self.log.with_suffix(".out").open("ab")
        self.process = subprocess.Popen(args, stdout=out, stderr=out)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            if self.process.poll() is not None:
                raise RuntimeError(self.log.with_suffix(".out").read_text())
            time.sleep(0.05)
        raise RuntimeError("the payments server did not start")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def lines(self, prefix: str = "") -> list[str]:
        return [line for line in read_lines(self.log) if line.startswith(prefix)]

    def wait_for(self, prefix: str, count: int = 1, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.lines(prefix)) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{prefix!r} never reached {count}: {self.lines()}")
            time.sleep(0.02)


if __name__ == "__main__":
    main()
