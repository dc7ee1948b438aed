"""The agent's calls of the gateway's charge: the MCP SDK's own client, bound to an attempt.

A call goes to the sidecar's MCP front (``/mcp``, the attempt in the header
``actonce-attempt-id``), which calls the payments upstream as a step of the attempt. Its
request identity, when it has one, goes in ``_meta["actonce/request_id"]`` or in the header
``actonce-request-id``, as a harness that repeats a call sends it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import RequestParamsMeta

ATTEMPT_HEADER = "actonce-attempt-id"
REQUEST_ID_HEADER = "actonce-request-id"
REQUEST_ID_META = "actonce/request_id"


@dataclass(frozen=True)
class Answer:
    """What the gateway answered: a tool result, or an actonce error as a tool result."""

    error: bool
    outcome: str = ""
    step_id: str = ""
    charge_id: str = ""
    reason: str = ""
    failure_class: str = ""
    message: str = ""
    metadata: dict[str, str] = field(default_factory=dict)


class Unanswered(Exception):
    """No answer came: the sidecar is down or frozen, or the caller gave up waiting."""


def call_charge(
    base: str,
    attempt_id: str,
    tool: str,
    arguments: Mapping[str, Any],
    *,
    timeout: float,
    request_id: str = "",
    in_header: bool = False,
) -> Answer:
    """One tools/call in a session of its own, as a client that repeats a call opens it
    again; Unanswered when no answer came within ``timeout``."""
    try:
        return asyncio.run(_call(base, attempt_id, tool, arguments, timeout, request_id, in_header))
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # the SDK's task groups, httpx's and the client's timeouts
        raise Unanswered(_cause(exc)) from None


async def _call(
    base: str,
    attempt_id: str,
    tool: str,
    arguments: Mapping[str, Any],
    seconds: float,
    request_id: str,
    in_header: bool,
) -> Answer:
    headers = {ATTEMPT_HEADER: attempt_id}
    meta: dict[str, Any] | None = None
    if request_id and in_header:
        headers[REQUEST_ID_HEADER] = request_id
    elif request_id:
        meta = {REQUEST_ID_META: request_id}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=seconds + 1) as http,
        Client(streamable_http_client(f"{base}/mcp", http_client=http), cache=None) as client,
    ):
        result = await asyncio.wait_for(
            client.call_tool(
                tool,
                dict(arguments),
                read_timeout_seconds=seconds,
                meta=cast(RequestParamsMeta, meta) if meta else None,
            ),
            seconds,
        )
    said = dict(result.structured_content or {})
    if result.is_error:
        return Answer(
            error=True,
            reason=str(said.get("reason", "")),
            failure_class=str(said.get("failure_class", "")),
            message=str(said.get("message", "")),
            metadata={str(k): str(v) for k, v in dict(said.get("metadata") or {}).items()},
        )
    meta_said = dict(result.meta or {})
    return Answer(
        error=False,
        outcome=str(meta_said.get("actonce/outcome", "")),
        step_id=str(meta_said.get("actonce/step_id", "")),
        charge_id=str(said.get("charge_id", "")),
    )


def _cause(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}".strip()
