"""The exactly-once gateway: other MCP servers' tools, each call bracketed as a step.

An upstream's tool ``charge`` is listed as ``NAME__tool`` (``payments__charge``).
A call of it is a step of the attempt (``RunActions.begin_step`` /
``end_step``), so its step id is the core's derivation from the run, the
checkpoint, the listed name, the canonical arguments and the occurrence, and the
core's repeat rule holds (sidecar.core.requests, sidecar.core.steps):

- a step an earlier attempt ended answers its recorded result, and the
  upstream is not called; a read-only tool is called every time;
- a non-idempotent step that began earlier and never ended is in doubt: an
  ``UNKNOWN`` error, and the upstream is not called;
- a call that repeats one still under way in its attempt (the client timed out and
  called again) waits for it and gets its answer.

A tool's effect is the operator's word (the effects file), never the upstream's:
a tool the file does not name is a non-idempotent write, whatever its
annotations hint. A tool that takes an idempotency key (the effects file names
its argument or ``_meta`` key) gets the step id there, the same on every
attempt, and is sent again with it instead of going in doubt.

A call either was not sent or was: a failure before it was sent (the upstream
refused the connection, the handshake failed) aborts the step and is
``UPSTREAM_UNAVAILABLE`` (``RETRYABLE``); one after (a reset, a timeout, the
upstream killed mid-call) leaves the step begun and is ``UPSTREAM_FAILED``
(``UNKNOWN``). Once sent, the call runs to its end in a task of its own, whoever
gives up on it. An upstream's error answer (``isError``) is an error, never a
result: the step does not end, unless the effects file says the tool's errors
mean nothing happened (then it is aborted).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, cast

import httpx2
import mcp_types as types
import structlog
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from sidecar.core.actions import RunActions
from sidecar.core.types import Outcome
from sidecar.errors import ActonceError, FailureClass, InvalidArgument
from sidecar.fronts.mcp.settings import SEPARATOR, UNLISTED, ToolSpec, Upstream
from sidecar.rules import canonical
from sidecar.rules.canonical import JsonValue
from sidecar.rules.effects import ToolEffect

log = structlog.get_logger()

# A repeat of a call still under way waits this much longer than the upstream may take.
REPEAT_WAIT_MARGIN_SECONDS = 2.0
# A call naming a tool an upstream did not list lists it again, at most this often: a
# model's made-up names cannot make the gateway list the upstream on every call.
RELIST_SECONDS = 5.0


class UpstreamUnavailable(ActonceError):
    """The upstream MCP server could not be reached: the call was not sent."""

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
    """A gateway call's answer: the upstream's result, and the step's outcome (None when
    the tool answered an error)."""

    result: types.CallToolResult
    outcome: Outcome | None
    step_id: str


class Gateway:
    """The upstreams' tools, listed and called through RunActions' steps."""

    def __init__(
        self,
        actions: RunActions,
        upstreams: list[Upstream],
        effects: Mapping[str, ToolSpec],
        *,
        timeout_seconds: float = 30.0,
    ) -> None:
        self.actions = actions
        self.upstreams = {u.name: u for u in upstreams}
        self.effects = dict(effects)
        self.timeout_seconds = timeout_seconds
        # Each upstream's last successful listing: an upstream that is down stays listed.
        self._listed: dict[str, list[types.Tool]] = {}
        self._listed_at: dict[str, float] = {}

    def spec_of(self, listed: str) -> ToolSpec:
        # The operator's file, or the strictest class: never the upstream's hint.
        return self.effects.get(listed, UNLISTED)

    def owns(self, listed: str) -> bool:
        return listed.partition(SEPARATOR)[0] in self.upstreams and SEPARATOR in listed

    def is_listed(self, listed: str) -> bool:
        """Whether ``listed`` is a tool of an upstream's last listing (a name the
        metrics and traces may carry)."""
        upstream, _, tool = listed.partition(SEPARATOR)
        return any(t.name == tool for t in self._listed.get(upstream, ()))

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

    # -- tools/list ---------------------------------------------------------------

    async def list_tools(self) -> list[types.Tool]:
        """Every upstream's tools, renamed ``NAME__tool``; an upstream that does not
        answer is listed from its last successful listing (and logged)."""
        listed: list[types.Tool] = []
        for upstream in self.upstreams.values():
            try:
                tools = await self._list(upstream)
            except Exception as exc:  # an upstream down must not hide the others
                log.warning("mcp_upstream_unlisted", upstream=upstream.name, error=_cause(exc))
                tools = self._listed.get(upstream.name, [])
            listed += [self._as_listed(upstream, tool) for tool in tools]
        return listed

    async def _list(self, upstream: Upstream) -> list[types.Tool]:
        self._listed_at[upstream.name] = time.monotonic()
        async with self._connect(upstream) as client:
            tools = list((await client.list_tools()).tools)
        self._listed[upstream.name] = tools
        return tools

    def _as_listed(self, upstream: Upstream, tool: types.Tool) -> types.Tool:
        name = f"{upstream.name}{SEPARATOR}{tool.name}"
        spec = self.spec_of(name)
        note = f"[actonce: {spec.label}]"
        return tool.model_copy(
            update={
                "name": name,
                "description": f"{tool.description or ''} {note}".strip(),
                "input_schema": _without_key(tool.input_schema, spec.key_argument),
            }
        )

    # -- tools/call ---------------------------------------------------------------

    async def call(
        self, attempt_id: str, listed: str, arguments: Mapping[str, Any], *, request_id: str = ""
    ) -> Called:
        """Call ``listed`` once for the run: the bracket of a step around the upstream call."""
        upstream, tool = await self._route(listed)
        spec = self.spec_of(listed)
        arguments = _model_arguments(spec, arguments)
        step = await self.actions.begin_step(
            attempt_id=attempt_id,
            tool=listed,
            effect=int(spec.step_effect),
            args=JsonValue.of(arguments, "args_json"),
            request_id=request_id,
            wait_seconds=self.timeout_seconds + REPEAT_WAIT_MARGIN_SECONDS,
        )
        if step.outcome is Outcome.ALREADY_APPLIED:
            log.info("mcp_step_replayed", tool=listed, step_id=step.id)
            return Called(_recorded(step.result_json), step.outcome, step.id)
        sending = _Sending(self, attempt_id, upstream, tool, listed, spec, step.id)
        return await self.actions.to_the_end(attempt_id, sending.run(arguments))

    async def _route(self, listed: str) -> tuple[Upstream, str]:
        """The upstream and its tool's name; refused when the upstream lists no such tool."""
        upstream_name, _, tool = listed.partition(SEPARATOR)
        upstream = self.upstreams.get(upstream_name)
        if upstream is None or not tool:
            raise UnknownTool(f"no tool named {listed!r}; list the tools to see their names")
        if not self.is_listed(listed) and self._may_list_again(upstream):
            try:
                await self._list(upstream)  # new since the last listing, or never listed
            except Exception as exc:
                raise self.unavailable(upstream, exc) from None
        if not self.is_listed(listed):
            raise UnknownTool(
                f"the MCP server {upstream.name!r} lists no tool {tool!r}; list the "
                "tools to see their names"
            )
        return upstream, tool

    def _may_list_again(self, upstream: Upstream) -> bool:
        if upstream.name not in self._listed:
            return True
        return time.monotonic() - self._listed_at.get(upstream.name, 0.0) >= RELIST_SECONDS

    def unavailable(self, upstream: Upstream, exc: BaseException) -> UpstreamUnavailable:
        return UpstreamUnavailable(
            f"the MCP server {upstream.name!r} could not be reached, so nothing was sent: "
            f"{_cause(exc)}; a retry is safe",
            metadata={"upstream": upstream.name},
        )


@dataclass(frozen=True)
class _Sending:
    """One begun step's call of its upstream tool, from the connection to its end."""

    gateway: Gateway
    attempt_id: str
    upstream: Upstream
    tool: str
    listed: str
    spec: ToolSpec
    step_id: str

    async def run(self, arguments: dict[str, Any]) -> Called:
        sent = False
        try:
            async with self.gateway._connect(self.upstream) as client:
                sent = True  # connected: from here on the call may reach the upstream
                result = await client.call_tool(
                    self.tool, self._with_key(arguments), meta=self._key_meta()
                )
        except BaseException as exc:
            await self._failed(exc, sent=sent)
            raise  # _failed raised, or this task itself was cancelled (a drain)
        return await self._answered(result)

    def _with_key(self, arguments: dict[str, Any]) -> dict[str, Any]:
        if not self.spec.key_argument:
            return arguments
        return {**arguments, self.spec.key_argument: self.step_id}

    def _key_meta(self) -> types.RequestParamsMeta | None:
        if not self.spec.key_meta:
            return None
        return cast(types.RequestParamsMeta, {self.spec.key_meta: self.step_id})

    async def _failed(self, exc: BaseException, *, sent: bool) -> None:
        """Record how the call failed, then raise what the caller is told; return only
        when this task itself is cut off (a drain), which its caller re-raises."""
        actions, cause = self.gateway.actions, _cause(exc)
        if not sent or _never_connected(exc):
            await actions.abort_step(
                attempt_id=self.attempt_id,
                step_id=self.step_id,
                reason=_reason(f"not sent: {cause}"),
                request_id="",
            )
            if not _cancelled_from_outside():
                raise self.gateway.unavailable(self.upstream, exc) from None
            return
        await actions.fail_step(
            attempt_id=self.attempt_id,
            step_id=self.step_id,
            error=f"sent, and no answer came back: {cause}",
            request_id="",
        )
        if not _cancelled_from_outside():
            raise UpstreamFailed(
                f"the call of {self.listed} was sent to {self.upstream.name!r} and no answer "
                f"came back ({cause}); it may have acted. A retried run finds this step "
                f"{_retry_finds(self.spec)}",
                metadata={
                    "step_id": self.step_id,
                    "tool": self.listed,
                    "upstream": self.upstream.name,
                },
            ) from None

    async def _answered(self, result: Any) -> Called:
        actions = self.gateway.actions
        if not isinstance(result, types.CallToolResult):
            await actions.fail_step(
                attempt_id=self.attempt_id,
                step_id=self.step_id,
                error="answered with something other than a tool result",
                request_id="",
            )
            raise UpstreamFailed(
                f"{self.listed} answered with something other than a tool result",
                metadata={"step_id": self.step_id, "tool": self.listed},
            )
        if result.is_error:
            await self._tool_error(result)
            return Called(result, None, self.step_id)
        await actions.end_step(
            attempt_id=self.attempt_id,
            step_id=self.step_id,
            result=JsonValue.of(_recordable(result), "result_json"),
            request_id="",
        )
        return Called(result, Outcome.APPLIED, self.step_id)

    async def _tool_error(self, result: types.CallToolResult) -> None:
        # An error is not a result: the step does not end, and no later attempt takes
        # it for done. Declared harmless, it is aborted and may simply run again.
        actions, said = self.gateway.actions, _error_text(result)
        if self.spec.errors_mean_nothing_happened:
            await actions.abort_step(
                attempt_id=self.attempt_id,
                step_id=self.step_id,
                reason=_reason(f"the tool answered an error: {said}"),
                request_id="",
            )
            return
        await actions.fail_step(
            attempt_id=self.attempt_id,
            step_id=self.step_id,
            error=f"the tool answered an error: {said}",
            request_id="",
        )


def _retry_finds(spec: ToolSpec) -> str:
    if spec.step_effect is ToolEffect.NON_IDEMPOTENT_WRITE:
        return "in doubt and does not call it again"
    if spec.keyed:
        return "begun, and sends it again with the same idempotency key"
    return "begun, and calls it again"


def _reason(text: str) -> str:
    """``text`` as an AbortStep's reason: within its bound, without NUL."""
    clean = text.replace("\x00", " ")
    encoded = clean.encode("utf-8", "replace")
    if len(encoded) <= canonical.MAX_NAME_BYTES:
        return clean
    return encoded[: canonical.MAX_NAME_BYTES - 3].decode("utf-8", "ignore") + "..."


def _model_arguments(spec: ToolSpec, arguments: Mapping[str, Any]) -> dict[str, Any]:
    if spec.key_argument and spec.key_argument in arguments:
        raise InvalidArgument(
            spec.key_argument,
            "is the call's idempotency key, which actonce fills itself; leave it out",
        )
    return dict(arguments)


def _without_key(schema: Mapping[str, Any], key: str) -> dict[str, Any]:
    """The tool's input schema without the idempotency key's argument, which the
    model must not give."""
    if not key:
        return dict(schema)
    shown = dict(schema)
    properties = shown.get("properties")
    if isinstance(properties, Mapping):
        shown["properties"] = {name: v for name, v in properties.items() if name != key}
    required = shown.get("required")
    if isinstance(required, list):
        shown["required"] = [name for name in required if name != key]
    return shown


def _cause(exc: BaseException) -> str:
    """What went wrong, in words: the innermost error of the SDK's task groups, not
    'unhandled errors in a TaskGroup'."""
    root = _root(exc)
    text = str(root).strip() or "no detail"
    return f"{type(root).__name__}: {text}"


def _root(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        inner = [e for e in exc.exceptions if not isinstance(e, asyncio.CancelledError)]
        exc = (inner or list(exc.exceptions))[0]
    return exc


def _never_connected(exc: BaseException) -> bool:
    # A refused connection on the call's own request: it never left this process.
    return isinstance(_root(exc), httpx2.ConnectError)


def _cancelled_from_outside() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _error_text(result: types.CallToolResult) -> str:
    texts = [c.text for c in result.content if isinstance(c, types.TextContent)]
    return " ".join(texts).strip() or "no text"


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
