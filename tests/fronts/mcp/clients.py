"""The MCP SDK's own Python client, bound to an attempt the way a harness binds it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

ATTEMPT_HEADER = "actonce-attempt-id"


async def _call(
    url: str, headers: Mapping[str, str], calls: list[tuple[str, dict[str, Any]]]
) -> list[Any]:
    async with (
        httpx2.AsyncClient(headers=dict(headers), timeout=30) as http,
        Client(streamable_http_client(url, http_client=http), cache=None) as client,
    ):
        return [await client.call_tool(name, arguments) for name, arguments in calls]


def call(url: str, attempt_id: str | None, *calls: tuple[str, dict[str, Any]]) -> list[Any]:
    """Call tools in order, each answer a CallToolResult."""
    headers = {ATTEMPT_HEADER: attempt_id} if attempt_id else {}
    return asyncio.run(_call(url, headers, list(calls)))


def list_tools(url: str) -> list[Any]:
    async def run() -> list[Any]:
        async with Client(url, cache=None) as client:
            return list((await client.list_tools()).tools)

    return asyncio.run(run())


def begin_over_http(base: str, run_id: str, rule: str = "triage", checkpoint: str = "cp-0") -> str:
    body = json.dumps({"run_id": run_id, "rule": rule, "checkpoint": checkpoint})
    answer = httpx2.post(
        f"{base}/attempts", content=body, headers={"content-type": "application/json"}
    )
    answer.raise_for_status()
    return str(answer.json()["attempt_id"])
