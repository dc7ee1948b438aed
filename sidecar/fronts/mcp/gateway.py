"""The exactly-once gateway: other MCP servers' tools, each call bracketed as a step.

An upstream's tool ``charge`` is listed as ``NAME__tool`` (``payments__charge``).
A call of it is a step of the attempt (``RunActions.begin_step`` /
``end_step``), so its step id is the core's derivation from the run, the
checkpoint, the listed name, the canonical arguments and the occurrence:

- a step an earlier attempt ended answers its recorded result, and the
  upstream is not called;
- a non-idempotent step that began earlier and never ended is in doubt: an
  ``UNKNOWN`` error, and the upstream is not called;
- a read-only tool is called every time (its audit is fail-soft in the core).

A tool's effect is the operator's word (the effects file), never the upstream's:
a tool the file does not name is a non-idempotent write, whatever its
annotations hint. An upstream that cannot be reached before the step begins is
``RETRYABLE`` and leaves nothing begun; one that fails once the call was sent
leaves the step begun, in doubt for a non-idempotent tool.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx2
import mcp_types as types
import structlog
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from sidecar.core.actions import RunActions
from sidecar.core.types import Outcome
from sidecar.errors import ActonceError, FailureClass, InvalidArgument
from sidecar.fronts.mcp.settings import EFFECT_PREFIX, SEPARATOR, Upstream
from sidecar.rules.effects import ToolEffect

log = structlog.get_logger()


class UpstreamUnavailable(ActonceError):
    """An upstream MCP server could not be reached (or failed) before it was called."""

    reason = "UPSTREAM_UNAVAILABLE"
    failure_class = FailureClass.RETRYABLE


class UpstreamFailed(ActonceError):
    """The call was sent to the upstream and no answer came back: it may have acted."""

    reason = "UPSTREAM_FAILED"
    failure_class = FailureClass.UNKNOWN


class UnknownTool(ActonceError):
    """The model named a tool that is not listed."""

    reason = "UNKNOWN_TOOL"
    failure_class = FailureClass.REFUSED


@dataclass(frozen=True)
class Called:
    """A gateway call's answer: the upstream's result, and the step's outcome."""

    result: types.CallToolResult
    outcome: Outcome
    step_id: str


class Gateway:
    """The upstreams' tools, listed and called through RunActions' steps."""

    def __init__(
        self,
        actions: RunActions,
        upstreams: list[Upstream],
        effects: Mapping[str, ToolEffect],
        *,
        timeout_seconds: float = 30.0,
    ) -> None:
        self.actions = actions
        self.upstreams = {u.name: u for u in upstreams}
        self.effects = dict(effects)
        self.timeout_seconds = timeout_seconds

    def effect_of(self, listed: str) -> ToolEffect:
        # The operator's file, or the strictest class: never the upstream's hint.
        return self.effects.get(listed, ToolEffect.NON_IDEMPOTENT_WRITE)

    def owns(self, listed: str) -> bool:
        return listed.partition(SEPARATOR)[0] in self.upstreams and SEPARATOR in listed

    @asynccontextmanager
    async def _connect(self, upstream: Upstream) -> AsyncIterator[Client]:
        http = create_mcp_http_client(
            headers=dict(upstream.headers),
            timeout=httpx2.Timeout(self.timeout_seconds),
        )
        async with http:
            transport = streamable_http_client(upstream.url, http_client=http)
            async with Client(transport, cache=None) as client:
                yield client

    async def list_tools(self) -> list[types.Tool]:
        """Every upstream's tools, renamed ``NAME__tool``; an upstream that does not
        answer is left out of the list (and logged), the others are still listed."""
        listed: list[types.Tool] = []
        for upstream in self.upstreams.values():
            try:
                async with self._connect(upstream) as client:
                    tools = (await client.list_tools()).tools
            except Exception as exc:  # an upstream down must not hide the others
                log.warning("mcp_upstream_unlisted", upstream=upstream.name, error=str(exc))
                continue
            for tool in tools:
                name = f"{upstream.name}{SEPARATOR}{tool.name}"
                effect = self.effect_of(name)
                note = f"[actonce: {EFFECT_PREFIX}{effect.name}]"
                listed.append(
                    tool.model_copy(
                        update={
                            "name": name,
                            "description": f"{tool.description or ''} {note}".strip(),
                        }
                    )
                )
        return listed

    async def call(self, attempt_id: str, listed: str, arguments: Mapping[str, Any]) -> Called:
        """Call ``listed`` once for the run: the bracket of a step around the upstream call."""
        upstream_name, _, tool = listed.partition(SEPARATOR)
        upstream = self.upstreams.get(upstream_name)
        if upstream is None or not tool:
            raise UnknownTool(f"no tool named {listed!r}; list the tools to see their names")
        effect = self.effect_of(listed)
        args_json = json.dumps(dict(arguments), ensure_ascii=False, allow_nan=False)
        # The SDK's client runs in task groups, which wrap what is raised inside them:
        # the step's own answers and refusals are carried out of the block, not raised.
        carried: ActonceError | Called | None = None
        result: Any = None
        step_id = ""
        try:
            async with self._connect(upstream) as client:
                # Connected: the upstream answered its handshake before any step began.
                try:
                    step = await self.actions.begin_step(
                        attempt_id=attempt_id,
                        tool=listed,
                        effect=int(effect),
                        args_json=args_json,
                        request_id="",
                    )
                except ActonceError as error:
                    carried = error
                else:
                    step_id = step.id
                    if (
                        step.outcome is Outcome.ALREADY_APPLIED
                        and effect is not ToolEffect.READ_ONLY
                    ):
                        log.info("mcp_step_replayed", tool=listed, step_id=step.id)
                        carried = Called(_recorded(step.result_json), step.outcome, step.id)
                    else:
                        try:
                            result = await client.call_tool(tool, dict(arguments))
                        except Exception as exc:
                            carried = _sent_and_lost(listed, effect, step.id, exc)
        except Exception as exc:
            if carried is None:
                # No handshake: nothing was begun, nothing was sent.
                raise UpstreamUnavailable(
                    f"the MCP server {upstream.name!r} could not be reached: {exc}",
                    metadata={"upstream": upstream.name},
                ) from exc
        if isinstance(carried, ActonceError):
            raise carried
        if isinstance(carried, Called):
            return carried
        if not isinstance(result, types.CallToolResult):
            raise UpstreamFailed(
                f"{listed} answered with something other than a tool result",
                metadata={"step_id": step_id, "tool": listed},
            )
        await self.actions.end_step(
            attempt_id=attempt_id,
            step_id=step_id,
            result_json=json.dumps(_recordable(result), ensure_ascii=False),
            request_id="",
        )
        return Called(result, Outcome.APPLIED, step_id)


def _sent_and_lost(listed: str, effect: ToolEffect, step_id: str, exc: Exception) -> UpstreamFailed:
    again = (
        "in doubt and does not call it again"
        if effect is ToolEffect.NON_IDEMPOTENT_WRITE
        else "begun, and calls it again"
    )
    return UpstreamFailed(
        f"the call of {listed} was sent and no answer came back ({exc}); it may have acted. "
        f"A retried run finds this step {again}",
        metadata={"step_id": step_id, "tool": listed},
    )


def _recordable(result: types.CallToolResult) -> dict[str, Any]:
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


def _recorded(result_json: str) -> types.CallToolResult:
    try:
        return types.CallToolResult.model_validate(json.loads(result_json))
    except Exception as exc:  # a result recorded by hand (audit resolve --ran) may be any JSON
        log.info("mcp_recorded_result_not_a_tool_result", error=str(exc))
        value = json.loads(result_json) if result_json else None
        return types.CallToolResult(
            content=[types.TextContent(text=result_json or "null")],
            structured_content=value if isinstance(value, dict) else None,
        )


def check_arguments(arguments: Any) -> Mapping[str, Any]:
    if arguments is None:
        return {}
    if not isinstance(arguments, Mapping):
        raise InvalidArgument("arguments", "must be a JSON object")
    return arguments
