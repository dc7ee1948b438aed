"""What the gateway's tests share: a gateway in front of the payments process, the MCP
SDK's own client bound to an attempt, and reads of the ledger."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from pathlib import Path
from threading import Thread
from typing import Any, cast

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import RequestParamsMeta

from sidecar.config import Config
from sidecar.ledger.audit_command import open_reader
from sidecar.ledger.base import StoredEvent
from tests.fronts.mcp.charges import Charges
from tests.fronts.mcp.clients import ATTEMPT_HEADER, begin_over_http
from tests.harness import ServerProcess, free_port, spawn_sidecar
from tests.server.processes import run_cli

EFFECTS: dict[str, Any] = {
    "payments__charge": "TOOL_EFFECT_NON_IDEMPOTENT_WRITE",
    "payments__charge_keyed": {
        "effect": "TOOL_EFFECT_NON_IDEMPOTENT_WRITE",
        "idempotency_key": {"argument": "idempotency_key"},
    },
    "payments__charge_meta": {
        "effect": "TOOL_EFFECT_NON_IDEMPOTENT_WRITE",
        "idempotency_key": {"meta": "payments/idempotency_key"},
    },
    "payments__set_status": "TOOL_EFFECT_IDEMPOTENT_WRITE",
    "payments__refund": "TOOL_EFFECT_NON_IDEMPOTENT_WRITE",
    "payments__send_mail": {
        "effect": "TOOL_EFFECT_NON_IDEMPOTENT_WRITE",
        "errors_mean_nothing_happened": True,
    },
    "payments__balance": "TOOL_EFFECT_READ_ONLY",
}


def serve_gateway(
    config: Config,
    tmp_path: Path,
    upstream_url: str,
    name: str,
    *extra: str,
    effects_file: Mapping[str, Any] | None = None,
) -> tuple[ServerProcess, str]:
    """``actonce serve`` with the MCP front and ``payments`` as its upstream, its tools'
    effects ``effects_file`` (EFFECTS unless given); its base URL."""
    effects = tmp_path / f"{name}.effects.json"
    effects.write_text(json.dumps(EFFECTS if effects_file is None else effects_file))
    port = free_port()
    process = spawn_sidecar(
        config, tmp_path / f"{name}.log",
        "--mcp-listen", f"127.0.0.1:{port}",
        "--mcp-upstream", f"payments={upstream_url}",
        "--tool-effects", str(effects),
        *extra,
    )  # fmt: skip
    return process, f"http://127.0.0.1:{port}"


async def call_tool(
    base: str,
    attempt_id: str,
    name: str,
    arguments: dict[str, Any],
    *,
    timeout: float = 30.0,  # noqa: ASYNC109  (the client's own read timeout)
    meta: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> Any:
    """One tools/call through the MCP SDK's client, in a session of its own, as a client
    that repeats a call opens it again; raises what the client raises on its timeout."""
    sent = {ATTEMPT_HEADER: attempt_id, **(headers or {})}
    try:
        async with (
            httpx2.AsyncClient(headers=sent, timeout=timeout + 5) as http,
            Client(streamable_http_client(f"{base}/mcp", http_client=http), cache=None) as client,
        ):
            return await client.call_tool(
                name,
                arguments,
                read_timeout_seconds=timeout,
                meta=cast(RequestParamsMeta, dict(meta)) if meta else None,
            )
    except BaseExceptionGroup as group:
        raise _innermost(group) from None


def _innermost(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


def call(base: str, attempt_id: str, name: str, arguments: dict[str, Any], **kw: Any) -> Any:
    return asyncio.run(call_tool(base, attempt_id, name, arguments, **kw))


def call_in_background(base: str, attempt_id: str, name: str, arguments: dict[str, Any]) -> Thread:
    """Start a call in a thread of its own, for a test that kills the sidecar under it:
    whatever the call then raises is expected, and dropped."""

    def run() -> None:
        with contextlib.suppress(BaseException):
            call(base, attempt_id, name, arguments)

    thread = Thread(target=run, daemon=True)
    thread.start()
    return thread


def kill_mid_call(
    sidecar: ServerProcess,
    base: str,
    attempt: str,
    upstream: Charges,
    tool: str,
    args: dict[str, Any],
    acted: str,
) -> None:
    """Call ``tool``; once the upstream has acted (a line ``acted`` in its log), SIGKILL the
    sidecar under the call."""
    held = call_in_background(base, attempt, tool, args)
    upstream.wait_for(acted)
    sidecar.process.kill()
    sidecar.process.wait(10)
    held.join(30)


def begin(base: str, run_id: str, checkpoint: str = "cp-0") -> str:
    return begin_over_http(base, run_id, rule="billing", checkpoint=checkpoint)


def begin_with_lease(base: str, run_id: str, lease_deadline: str) -> str:
    """An attempt whose lease ends at ``lease_deadline`` (RFC 3339)."""
    body = {"run_id": run_id, "rule": "billing", "checkpoint": "cp-0"}
    answer = httpx2.post(
        f"{base}/attempts",
        content=json.dumps({**body, "lease_deadline": lease_deadline}),
        headers={"content-type": "application/json"},
    )
    answer.raise_for_status()
    return str(answer.json()["attempt_id"])


def end_attempt(base: str, attempt_id: str, *, timeout: float = 10.0) -> dict[str, Any]:
    """``POST /attempts/{id}/end``: the counts; raises httpx's timeout when it does not
    answer within ``timeout``."""
    answer = httpx2.post(
        f"{base}/attempts/{attempt_id}/end",
        content=b"{}",
        headers={"content-type": "application/json"},
        timeout=timeout,
    )
    answer.raise_for_status()
    return dict(answer.json())


def ledger_events(config: Config, run_id: str) -> list[StoredEvent]:
    reader = open_reader({"audit_dsn": config.audit_dsn, "audit_db": config.audit_path})
    try:
        return list(reader.events(run_id=run_id))
    finally:
        reader.close()


def ledger_flags(config: Config) -> list[str]:
    if config.audit_dsn:
        return ["--audit-dsn", config.audit_dsn]
    return ["--audit-db", str(config.audit_path)]


def pending(config: Config, *flags: str) -> tuple[int, list[dict[str, Any]]]:
    """``actonce audit pending --json``: its exit code and its items."""
    done = run_cli("audit", "pending", "--json", *flags, *ledger_flags(config), timeout=60)
    assert done.returncode in (0, 3), done.stderr
    items = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    return done.returncode, items


def error_of(result: Any) -> tuple[str, str]:
    """The reason and failure class of an actonce error result."""
    assert result.is_error, result
    said = result.structured_content or {}
    return str(said.get("reason", "")), str(said.get("failure_class", ""))
