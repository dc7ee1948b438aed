"""The exactly-once gateway: other MCP servers' tools, each call bracketed as a step.

An upstream's tool ``charge`` is listed as ``NAME__tool`` (``payments__charge``).
A call of it is a step of the attempt (``RunActions.begin_step`` /
``end_step``), so its step id is the core's derivation from the run, the
checkpoint, the listed name, the canonical arguments and the occurrence, and the
core's repeat rule holds (sidecar.core.attempts, sidecar.core.steps):

- a step an earlier attempt ended answers its recorded result, and the
  upstream is not called; a read-only tool is called every time;
- a non-idempotent step that began earlier and never ended is in doubt: an
  ``UNKNOWN`` error, and the upstream is not called;
- a call that repeats one still under way in its attempt (the client timed out and
  called again), with or without the same request identity, waits for it and gets its
  answer; one that repeats an ended call's request identity gets its recorded result,
  and one that repeats a call sent without an answer is in doubt (a keyed or idempotent
  one is sent again under the same id, so with the same key). None is sent twice.

A tool's effect is the operator's word (the effects file), never the upstream's:
a tool the file does not name is a non-idempotent write, whatever its
annotations hint. A tool that takes an idempotency key (the effects file names
its argument or ``_meta`` key) gets the step id there, the same on every
attempt, and is sent again with it instead of going in doubt. The key is checked
against the upstream's listing: one the tool's listing does not take (an argument not
among its ``inputSchema.properties``, a ``_meta`` key it does not declare) would reach no
one, so the tool is called unkeyed, and the operator is told at each listing that finds it
(a WARNING naming the tool and the key, ``actonce_gateway_effects_findings``, a line of the
MCP front's readiness detail), as of an entry naming a tool the upstream does not list.

A call is sent only under its send permit (``RunActions.permit_step``), asked once the
step has begun and before anything is sent: for a non-idempotent or keyed step, the
ledger records it, refused once the attempt is fenced, its lease has passed by the
ledger's clock, or an operator decided the step; refused, the step is aborted, the call
never sent. The permit fixes the call's one deadline: the smaller of
``--mcp-upstream-timeout`` and what is left of the lease, measured by this process's
monotonic clock from before the permit was asked for. It bounds the whole call, not each
read: connecting, the handshake, sending, and every byte of the answer (a stream of
keep-alives or notifications does not extend it). Past it before the call is sent (a slow
handshake, a scheduler, a process frozen and woken), the call is not sent: the step is
aborted and the caller told ``UPSTREAM_NOT_SENT`` (``RETRYABLE``). The answer is read as
it comes and refused past ``ANSWER_LIMIT_BYTES``, never held whole.

A call either was not sent or was: a failure before it was sent (the upstream
refused the connection, the handshake failed, the deadline passed first) aborts the
step and is ``UPSTREAM_UNAVAILABLE`` or ``UPSTREAM_NOT_SENT`` (``RETRYABLE``); one after
(a reset, the deadline, an answer too large to read or to record, the upstream killed
mid-call) leaves the step begun (failed) and is ``UPSTREAM_FAILED`` (``UNKNOWN``), never
"nothing was written". Once sent, the call runs to its end, or to its deadline, in a task
of its own, whoever gives up on it; so does EndAttempt's wait for it. An upstream's error
answer (``isError``) is an error, never a result: the step does not end, unless the
effects file says the tool's errors mean nothing happened (then it is aborted).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any, cast

import httpx2
import mcp_types as types
import structlog
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from sidecar.core.actions import RunActions
from sidecar.core.types import Outcome, StepPermit
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
# An upstream's answer is read as it comes and refused past this many bytes, never held
# whole: a result is recorded only within the ledger's bound on JSON (1 MiB in its
# canonical form), and the wire's envelope and escapes take less than as much again.
ANSWER_LIMIT_BYTES = 2 * canonical.MAX_JSON_BYTES

# What an effects file's entry may disagree with in its upstream's listing; each makes the
# tool unkeyed (sidecar.fronts.mcp.settings says how a tool declares a _meta key).
KEY_ARGUMENT_NOT_IN_SCHEMA = "key_argument_not_in_schema"
KEY_META_NOT_DECLARED = "key_meta_not_declared"
TOOL_NOT_LISTED = "tool_not_listed"
PROBLEMS = (KEY_ARGUMENT_NOT_IN_SCHEMA, KEY_META_NOT_DECLARED, TOOL_NOT_LISTED)


class UpstreamUnavailable(ActonceError):
    """The upstream MCP server could not be reached: the call was not sent."""

    reason = "UPSTREAM_UNAVAILABLE"
    failure_class = FailureClass.RETRYABLE


class UpstreamFailed(ActonceError):
    """The call was sent to the upstream and no answer came back: it may have acted."""

    reason = "UPSTREAM_FAILED"
    failure_class = FailureClass.UNKNOWN


class NotSentInTime(ActonceError):
    """The call's deadline passed before it could be sent: it was not sent."""

    reason = "UPSTREAM_NOT_SENT"
    failure_class = FailureClass.RETRYABLE


class AnswerTooLarge(httpx2.StreamError):
    """An upstream's answer went past ANSWER_LIMIT_BYTES; it is read no further."""


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


@dataclass(frozen=True)
class EffectsFinding:
    """An effects file's entry that its upstream's listing contradicts: the tool is called
    unkeyed (a non-idempotent one goes in doubt, never sent again), and the operator is
    told (a WARNING, the metric, the MCP front's readiness detail)."""

    tool: str
    problem: str
    detail: str

    def line(self) -> str:
        return f"{self.tool}: {self.detail}"


# (upstream, its findings by problem, every problem counted): what the metric shows.
FindingsReport = Callable[[str, Mapping[str, int]], None]


def _no_report(_upstream: str, _counts: Mapping[str, int]) -> None:
    return None


class Gateway:
    """The upstreams' tools, listed and called through RunActions' steps."""

    def __init__(
        self,
        actions: RunActions,
        upstreams: list[Upstream],
        effects: Mapping[str, ToolSpec],
        *,
        timeout_seconds: float = 30.0,
        report: FindingsReport = _no_report,
        transports: Mapping[str, httpx2.AsyncBaseTransport] | None = None,
    ) -> None:
        self.actions = actions
        # How the gateway reaches an upstream, by its name: over the network unless a
        # transport is given (a test's upstream served in memory, as httpx's MockTransport).
        self.transports = dict(transports or {})
        self.upstreams = {u.name: u for u in upstreams}
        self.effects = dict(effects)
        self.timeout_seconds = timeout_seconds
        self.report = report
        # Each upstream's last successful listing: an upstream that is down stays listed.
        self._listed: dict[str, list[types.Tool]] = {}
        self._listed_at: dict[str, float] = {}
        # What each upstream's last listing contradicts in the effects file.
        self._findings: dict[str, list[EffectsFinding]] = {}

    def spec_of(self, listed: str) -> ToolSpec:
        # The operator's file, or the strictest class: never the upstream's hint. A key
        # the upstream's listing does not take is no key: the tool is called unkeyed.
        spec = self.effects.get(listed, UNLISTED)
        if spec.keyed and any(f.tool == listed for f in self.findings()):
            return replace(spec, key_argument="", key_meta="")
        return spec

    def findings(self) -> list[EffectsFinding]:
        """What the upstreams' last listings contradict in the effects file."""
        return [f for found in self._findings.values() for f in found]

    async def readiness(self) -> list[str]:
        """The readiness detail's lines: each effects-file entry an upstream's listing
        contradicts (an upstream never listed is listed first)."""
        for upstream in self.upstreams.values():
            if upstream.name not in self._listed:
                try:
                    await self._list(upstream)
                except Exception as exc:  # told as a line of its own, not a failure
                    log.warning("mcp_upstream_unlisted", upstream=upstream.name, error=_cause(exc))
        lines = [f.line() for f in self.findings()]
        lines += [
            f"{name}: never listed, so its effects file entries are unchecked"
            for name in self.upstreams
            if name not in self._listed
        ]
        return lines

    def owns(self, listed: str) -> bool:
        return listed.partition(SEPARATOR)[0] in self.upstreams and SEPARATOR in listed

    def is_listed(self, listed: str) -> bool:
        """Whether ``listed`` is a tool of an upstream's last listing (a name the
        metrics and traces may carry)."""
        upstream, _, tool = listed.partition(SEPARATOR)
        return any(t.name == tool for t in self._listed.get(upstream, ()))

    @asynccontextmanager
    async def _connect(
        self, upstream: Upstream, *, seconds: float | None = None
    ) -> AsyncIterator[_Connection]:
        # The whole call is bounded by its caller (_Sending.run); httpx's own timeout
        # bounds each read, and no read may outlast the whole.
        http = httpx2.AsyncClient(
            # Compressed, an answer's bytes on the wire would not bound what it decodes to.
            headers={**upstream.headers, "accept-encoding": "identity"},
            timeout=httpx2.Timeout(seconds if seconds is not None else self.timeout_seconds),
            transport=self.transports.get(upstream.name),
        )
        answers = _AnswerBound(ANSWER_LIMIT_BYTES)
        http.event_hooks = {"response": [answers.watch]}
        async with http:
            transport = streamable_http_client(upstream.url, http_client=http)
            async with Client(transport, cache=None) as client:
                yield _Connection(client, answers)

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
        # Bounded as a whole, as a call is: a listing that streams and never ends must not
        # hold tools/list, a call's route or the readiness detail.
        async with asyncio.timeout(self.timeout_seconds), self._connect(upstream) as connection:
            tools = list((await connection.client.list_tools()).tools)
        self._listed[upstream.name] = tools
        self._check_effects(upstream, tools)
        return tools

    def _check_effects(self, upstream: Upstream, tools: Sequence[types.Tool]) -> None:
        """Compare the effects file's entries for ``upstream`` with its listing; report
        what it contradicts, each finding logged once while it lasts."""
        found = _contradictions(upstream, self.effects, {t.name: t for t in tools})
        earlier = {(f.tool, f.problem) for f in self._findings.get(upstream.name, [])}
        for finding in found:
            if (finding.tool, finding.problem) not in earlier:
                log.warning(
                    "mcp_effects_file_contradicted",
                    tool=finding.tool,
                    problem=finding.problem,
                    detail=finding.detail,
                )
        self._findings[upstream.name] = found
        counts = {problem: sum(f.problem == problem for f in found) for problem in PROBLEMS}
        self.report(upstream.name, counts)

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
        """Call ``listed`` once for the run: the bracket of a step around the upstream call.

        BeginStep answers APPLIED for a step this call is to send (new, or a keyed or
        idempotent one sent again under the same id, so with the same key), ALREADY_APPLIED
        with the recorded result of one that ended (a repeat of its request identity, too:
        it is not sent again), and refuses one that may have been sent without an answer
        (``IN_DOUBT``); a repeat of a call still under way waits for it in the core."""
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
            sent_by_sidecar=True,
        )
        if step.outcome is Outcome.ALREADY_APPLIED:
            log.info("mcp_step_replayed", tool=listed, step_id=step.id)
            return Called(_recorded(step.result_json), step.outcome, step.id)
        sending = _Sending(self, attempt_id, upstream, tool, listed, spec, step.id)
        return await self.actions.to_the_end(attempt_id, sending.run(arguments))

    async def permit(self, attempt_id: str, step_id: str, *, keyed: bool) -> StepPermit:
        """The step's leave to send its call, and the call's one budget: the smaller of
        the timeout and what is left of the attempt's lease, counted from before it was
        asked for. A non-idempotent or keyed step's permit is the ledger's, granted against
        fencing, the lease by the ledger's clock and operators' decisions; refused, the step
        is aborted (never sent) and the refusal raised (sidecar.core.steps)."""
        return await self.actions.permit_step(
            attempt_id=attempt_id,
            step_id=step_id,
            timeout_seconds=self.timeout_seconds,
            keyed=keyed,
        )

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
class _Connection:
    """A connected, initialized MCP client, and the bound on its answers' size."""

    client: Client
    answers: _AnswerBound


@dataclass
class _AnswerBound:
    """Reads each answer of a connection as it comes, and stops it past ``limit`` bytes,
    so that no answer is ever held whole beyond the limit (an httpx response hook)."""

    limit: int
    exceeded: bool = False

    async def watch(self, response: httpx2.Response) -> None:
        response.stream = _BoundedStream(response.stream, self)


@dataclass
class _BoundedStream(httpx2.AsyncByteStream):
    inner: Any  # the transport's stream (an httpx2.AsyncByteStream)
    bound: _AnswerBound
    read: int = field(default=0)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.inner:
            self.read += len(chunk)
            if self.read > self.bound.limit:
                self.bound.exceeded = True
                raise AnswerTooLarge(f"the answer is larger than {self.bound.limit} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


@dataclass(frozen=True)
class _Sending:
    """One begun step's call of its upstream tool, from its permit to its end."""

    gateway: Gateway
    attempt_id: str
    upstream: Upstream
    tool: str
    listed: str
    spec: ToolSpec
    step_id: str

    async def run(self, arguments: dict[str, Any]) -> Called:
        """Send the call under its permit, within the permit's one deadline: connect,
        handshake, send and every byte of the answer. Past the deadline before it is sent,
        it is not sent; past it after, it was sent and has no answer."""
        permit = await self.gateway.permit(self.attempt_id, self.step_id, keyed=self.spec.keyed)
        sent = False
        answers: _AnswerBound | None = None
        result: Any = _NO_ANSWER
        try:
            async with (
                asyncio.timeout(permit.left()),
                self.gateway._connect(self.upstream, seconds=permit.seconds) as connection,
            ):
                answers = connection.answers
                if permit.expired():  # a slow handshake, a scheduler, a freeze
                    raise _Expired()
                sent = True  # from here on the call may reach the upstream
                result = await connection.client.call_tool(
                    self.tool, self._with_key(arguments), meta=self._key_meta()
                )
        except Exception as exc:
            if result is _NO_ANSWER:
                await self._failed(exc, sent=sent, permit=permit, answers=answers)
                raise  # not reached: _failed raised
            # Answered, and only closing the connection failed (or ran past the deadline):
            # the answer stands.
            log.info("mcp_upstream_close_failed", upstream=self.upstream.name, error=_cause(exc))
        except BaseException as exc:
            await self._failed(exc, sent=sent, permit=permit, answers=answers)
            raise  # this task itself was cancelled (a drain)
        return await self._answered(result)

    def _with_key(self, arguments: dict[str, Any]) -> dict[str, Any]:
        if not self.spec.key_argument:
            return arguments
        return {**arguments, self.spec.key_argument: self.step_id}

    def _key_meta(self) -> types.RequestParamsMeta | None:
        if not self.spec.key_meta:
            return None
        return cast(types.RequestParamsMeta, {self.spec.key_meta: self.step_id})

    async def _failed(
        self,
        exc: BaseException,
        *,
        sent: bool,
        permit: StepPermit,
        answers: _AnswerBound | None,
    ) -> None:
        """Record how the call failed, then raise what the caller is told; return only
        when this task itself is cut off (a drain), which its caller re-raises."""
        cause, root = _cause(exc), _root(exc)
        if isinstance(root, _Expired) or (isinstance(root, TimeoutError) and not sent):
            cause = f"its deadline of {permit.seconds:.3f}s passed before it was sent"
            await self._not_sent(cause)
            raise NotSentInTime(
                f"the call of {self.listed} was not sent to {self.upstream.name!r}: {cause}, "
                "so nothing was sent; a retry is safe",
                metadata={"step_id": self.step_id, "tool": self.listed},
            ) from None
        if not sent or _never_connected(exc):
            await self._not_sent(cause)
            if not _cancelled_from_outside():
                raise self.gateway.unavailable(self.upstream, exc) from None
            return
        if isinstance(root, TimeoutError):
            cause = f"its deadline of {permit.seconds:.3f}s passed"
        elif answers is not None and answers.exceeded:
            cause = f"its answer was larger than {answers.limit} bytes"
        await self._sent_without_answer(f"no answer came back ({cause})")

    async def _not_sent(self, cause: str) -> None:
        await self.gateway.actions.abort_step(
            attempt_id=self.attempt_id,
            step_id=self.step_id,
            reason=canonical.as_reason(f"not sent: {cause}"),
            request_id="",
            by_sidecar=True,
        )

    async def _sent_without_answer(self, what: str) -> None:
        """The call was sent, and what it did is unknown: the step is left begun (failed),
        and the caller is told it may have acted, never that nothing was written."""
        try:
            await self.gateway.actions.fail_step(
                attempt_id=self.attempt_id,
                step_id=self.step_id,
                error=f"sent, and {what}",
                request_id="",
                by_sidecar=True,
            )
        except ActonceError as error:
            # Not recorded (the ledger failed, the attempt was fenced): the step is still
            # begun and in doubt, and the caller must still hear that it may have acted.
            log.warning("mcp_step_failure_not_recorded", step_id=self.step_id, error=str(error))
        if _cancelled_from_outside():
            return
        raise UpstreamFailed(
            f"the call of {self.listed} was sent to {self.upstream.name!r} and {what}; it "
            f"may have acted. A retried run finds this step {_retry_finds(self.spec)}",
            metadata={"step_id": self.step_id, "tool": self.listed, "upstream": self.upstream.name},
        ) from None

    async def _answered(self, result: Any) -> Called:
        if not isinstance(result, types.CallToolResult):
            await self._sent_without_answer("it answered something other than a tool result")
            raise AssertionError("unreachable: _sent_without_answer raised")
        if result.is_error:
            await self._tool_error(result)
            return Called(result, None, self.step_id)
        try:
            recorded = JsonValue.of(_recordable(result), "result_json")
        except InvalidArgument as exc:  # acted on, and too large (or deep) to record
            await self._sent_without_answer(f"its answer could not be recorded: {exc.message}")
            raise AssertionError("unreachable: _sent_without_answer raised") from None
        await self.gateway.actions.end_step(
            attempt_id=self.attempt_id,
            step_id=self.step_id,
            result=recorded,
            request_id="",
            by_sidecar=True,
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
                reason=canonical.as_reason(f"the tool answered an error: {said}"),
                request_id="",
                by_sidecar=True,
            )
            return
        await actions.fail_step(
            attempt_id=self.attempt_id,
            step_id=self.step_id,
            error=f"the tool answered an error: {said}",
            request_id="",
            by_sidecar=True,
        )


_NO_ANSWER: Any = object()


class _Expired(Exception):
    """The permit's deadline passed before the call was sent."""


def _contradictions(
    upstream: Upstream, effects: Mapping[str, ToolSpec], tools: Mapping[str, types.Tool]
) -> list[EffectsFinding]:
    """The effects file's entries for ``upstream`` that its listing ``tools`` contradicts."""
    found: list[EffectsFinding] = []
    prefix = f"{upstream.name}{SEPARATOR}"
    for listed, spec in effects.items():
        if not listed.startswith(prefix):
            continue
        tool = tools.get(listed.removeprefix(prefix))
        if tool is None:
            found.append(
                EffectsFinding(
                    listed,
                    TOOL_NOT_LISTED,
                    f"the effects file names it, and {upstream.name!r} lists no tool "
                    f"{listed.removeprefix(prefix)!r}",
                )
            )
            continue
        properties = tool.input_schema.get("properties")
        arguments = properties if isinstance(properties, Mapping) else {}
        if spec.key_argument and spec.key_argument not in arguments:
            found.append(
                EffectsFinding(
                    listed,
                    KEY_ARGUMENT_NOT_IN_SCHEMA,
                    f"the effects file's idempotency_key argument {spec.key_argument!r} is not "
                    f"among the tool's inputSchema properties {sorted(arguments)}; it is "
                    "called unkeyed",
                )
            )
        if spec.key_meta and spec.key_meta not in (tool.meta or {}):
            found.append(
                EffectsFinding(
                    listed,
                    KEY_META_NOT_DECLARED,
                    f"the effects file's idempotency_key _meta key {spec.key_meta!r} is not "
                    "declared in the tool's listed _meta; it is called unkeyed",
                )
            )
    return found


def _retry_finds(spec: ToolSpec) -> str:
    if spec.step_effect is ToolEffect.NON_IDEMPOTENT_WRITE:
        return "in doubt and does not call it again"
    if spec.keyed:
        return "begun, and sends it again with the same idempotency key"
    return "begun, and calls it again"


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
