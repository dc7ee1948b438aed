"""OpenAI Agents SDK function tools whose writes land once however the run is
retried (the ``openai-agents`` extra; docs/openai-agents.md).

    actonce = Actonce(client, rule="billing")

    @actonce.tool
    def open_ticket(title: str, call: ToolCall) -> str:
        \"\"\"Open a ticket.\"\"\"
        return call.attempt.create("ticket", {"title": title}).id

    agent = Agent(name="billing", tools=[open_ticket], ...)
    result = actonce.deliver(agent, run_id, "The disk is full")

Each delivery of the queue's job is an attempt of its run (:func:`deliver`, or
:func:`adeliver` in async code). Every model call of the delivery is a durable model
turn: its response is recorded, keyed by the agent and a digest of what it was asked
(docs/model-turns.md), and a later delivery replays it instead of asking the model
again, so its tool calls keep their ids (the SDK keeps nothing between turns). Each
try of a tool call begins an attempt of the run scoped to the tool call's id
(``ToolContext.tool_call_id``), named by the delivery: a newer delivery fences it, and
it writes what its earlier tries wrote, once. A run with an item in doubt answers :class:`Parked`.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, cast, overload

from agents import (
    Agent,
    FunctionTool,
    Model,
    ModelResponse,
    RunConfig,
    RunContextWrapper,
    Runner,
    RunResult,
    RunState,
    Usage,
    function_tool,
)
from agents.models.interface import ModelProvider
from agents.models.multi_provider import MultiProvider
from agents.run_config import CallModelData, ModelInputData
from agents.tool import ToolErrorFunction
from agents.tool_context import ToolContext
from openai.types.responses import Response, ResponseCompletedEvent, ResponseStreamEvent
from openai.types.responses.response_output_item import ResponseOutputItem
from pydantic import TypeAdapter

from actonce_client import deliveries
from actonce_client.client import Attempt, Client
from actonce_client.deliveries import (
    MAX_RECORDED_BYTES,
    Codec,
    Delivery,
    Lease,
    ModelResponseTooLarge,
    Parked,
    ParkedItem,
)
from actonce_client.model_turns import (
    Conversation,
    ModelTurn,
    ToolCallForm,
    arguments_of,
    model_turn,
    request_form,
    tool_form,
)
from actonce_client.tool_calls import (
    AsyncToolCall,
    ToolAttempts,
    ToolCall,
    aend_quietly,
    annotations_of,
    context_parameter,
    end_quietly,
    is_retryable,
    refused_message,
    retry_may_help,
)

__all__ = [
    "MAX_RECORDED_BYTES",
    "Actonce",
    "AsyncToolCall",
    "DurableModel",
    "ModelResponseTooLarge",
    "Parked",
    "ParkedItem",
    "ToolCall",
    "adeliver",
    "deliver",
    "handle_tool_error",
    "is_retryable",
    "queue_run",
]

_run_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "actonce_queue_run_id", default=None
)
_ACTONCE = "__actonce__"  # the attribute naming a tool's Actonce, which deliver finds


@contextmanager
def queue_run(run_id: str) -> Iterator[None]:
    """Within it, actonce tools write as attempts of the queue's run ``run_id``, with
    neither a delivery that fences them nor durable model turns: prefer :func:`adeliver`."""
    token = _run_id.set(run_id)
    try:
        yield
    finally:
        _run_id.reset(token)


def handle_tool_error(context: RunContextWrapper[Any], error: Exception) -> str | None:
    """A function tool's ``failure_error_function``: a REFUSED call goes back to
    the model, which can correct it; every other error is raised out of the run,
    for the queue (the SDK's default would hand the model an IN_DOUBT, say)."""
    return refused_message(error)


# -- durable model turns ---------------------------------------------------------------

_ITEM = TypeAdapter(ResponseOutputItem)


def _encode(response: ModelResponse) -> dict[str, Any]:
    return {
        "output": [item.model_dump(mode="json", exclude_none=True) for item in response.output],
        "response_id": response.response_id,
    }


def _decode(recorded: Any) -> ModelResponse:
    # A replayed turn asked no model: it used no tokens.
    return ModelResponse(
        output=[_ITEM.validate_python(item) for item in recorded["output"]],
        usage=Usage(),
        response_id=recorded.get("response_id"),
    )


CODEC: Codec[ModelResponse] = Codec(_encode, _decode)


@dataclass
class _Turns:
    """The model calls of one run in one delivery: how the agent whose turn it is finds
    its model, and how many calls the run made (an earlier client's positional key)."""

    delivery: Delivery
    resolve: Callable[[Agent[Any]], Model]
    next_index: int = 0

    def turn(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[ModelTurn, Model]:
        agent = _announced.get()
        if agent is None:
            raise RuntimeError("a model call the run's input filter did not announce")
        asked = _asked(args, kwargs)
        request = request_form(conversation(asked["system_instructions"], asked["input"]),
                               _tools_offered(asked["tools"], asked["handoffs"]))  # fmt: skip
        legacy = {"agent": agent.name, "turn": self.next_index}
        self.next_index += 1
        # The asyncio task is the caller: the SDK retries a model call in the task that
        # made it; an agent run as another's tool runs in a task of its own.
        made = model_turn(agent.name, request, caller=asyncio.current_task(), legacy=legacy)
        return made, self.resolve(agent)


# What Model.get_response and stream_response take first, in order, as the SDK passes them.
_ASKED = ("system_instructions", "input", "model_settings", "tools", "output_schema", "handoffs")


def _asked(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """A model call's arguments by name, however the SDK passed them."""
    found = dict(zip(_ASKED, args, strict=False))
    found.update((k, v) for k, v in kwargs.items() if k in _ASKED)
    return {name: found.get(name) for name in _ASKED}


_turns: contextvars.ContextVar[_Turns | None] = contextvars.ContextVar(
    "actonce_agents_turns", default=None
)
# The agent whose model call comes next in this task: the SDK names it to the input
# filter, in the task that then calls the model, and not to the model. Agents run as
# tools, in parallel, each announce their own in their own task.
_announced: contextvars.ContextVar[Agent[Any] | None] = contextvars.ContextVar(
    "actonce_agents_announced", default=None
)


def conversation(instructions: str | None, input: Any) -> list[dict[str, Any]]:
    """The SDK's model input in the neutral form (docs/model-turns.md): the instructions
    as a system message; each message item its role (``developer`` is ``system``) and
    text; a ``function_call`` item a tool call (name and arguments) of the assistant
    message before it, or of one of its own; a ``function_call_output`` the result of the
    call it names, by position; reasoning items left out (what a model thought is not what
    it was asked); any other item as it is, its ``id`` left out."""
    made = Conversation()
    if instructions is not None:
        made.say("system", instructions)
    if isinstance(input, str):
        made.say("user", input)
        return made.messages
    for raw in input:
        item = _plain_item(raw)
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "message":
            role = str(item.get("role", "user"))
            text, parts = _content(item.get("content"))
            made.say("system" if role == "developer" else role, text, parts)
        elif kind == "function_call":
            call = ToolCallForm(str(item.get("name", "")), arguments_of(item.get("arguments")))
            made.call([(item.get("call_id"), call)], join=True)
        elif kind == "function_call_output":
            made.answer(item.get("call_id"))
        elif kind != "reasoning":
            made.say("item", "", [{k: v for k, v in item.items() if k != "id"}])
    return made.messages


def _plain_item(item: Any) -> dict[str, Any]:
    if isinstance(item, Mapping):
        return dict(item)
    dump = getattr(item, "model_dump", None)
    return dict(dump(mode="json", exclude_none=True)) if dump is not None else {"value": item}


def _content(content: Any) -> tuple[str, list[Any]]:
    """An item's text (its text parts, joined) and its other parts."""
    if content is None:
        return "", []
    if isinstance(content, str):
        return content, []
    text: list[str] = []
    parts: list[Any] = []
    for part in content:
        plain = _plain_item(part)
        if plain.get("type") in ("input_text", "output_text", "text"):
            text.append(str(plain.get("text", "")))
        else:
            parts.append({k: v for k, v in plain.items() if k != "id"})
    return "".join(text), parts


def _tools_offered(tools: Any, handoffs: Any) -> list[dict[str, Any]]:
    """The tools and handoffs the model is offered, in the neutral form: a handoff is the
    tool the model calls to hand off."""
    offered = []
    for tool in tools or []:
        if isinstance(tool, FunctionTool):
            offered.append(tool_form(tool.name, tool.description, tool.params_json_schema))
        else:
            offered.append(tool_form(str(getattr(tool, "name", type(tool).__name__)), "", {}))
    for handoff in handoffs or []:
        offered.append(tool_form(handoff.tool_name, handoff.tool_description,
                                 handoff.input_json_schema))  # fmt: skip
    return offered


class DurableModel(Model):
    """The run's model, every call a durable model turn of the delivery: the model of
    the agent whose turn it is (its own Model, or its name's from the run's provider),
    asked once per request (keyed by the agent's name and a digest of what it is asked:
    docs/model-turns.md), its response recorded; a later delivery replays it. Handoffs
    and agents run as tools included: each turn names its agent. Set as the run's
    ``RunConfig.model`` by :func:`adeliver`."""

    def _turns(self) -> _Turns:
        turns = _turns.get()
        if turns is None:
            raise RuntimeError("a durable model call outside actonce's deliver()")
        return turns

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        turns = self._turns()
        turn, model = turns.turn(args, kwargs)
        return await turns.delivery.aturn(turn, lambda: model.get_response(*args, **kwargs),
                                          CODEC)  # fmt: skip

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[ResponseStreamEvent]:
        return self._stream(*args, **kwargs)

    async def _stream(self, *args: Any, **kwargs: Any) -> AsyncIterator[ResponseStreamEvent]:
        turns = self._turns()
        turn, model = turns.turn(args, kwargs)
        held: list[ResponseStreamEvent] = []

        async def streamed() -> ModelResponse:
            # The events go on to the run as they come, but the completed one: the SDK acts
            # on it, so it waits until the response is recorded.
            output: list[Any] = []
            async for event in model.stream_response(*args, **kwargs):
                if isinstance(event, ResponseCompletedEvent):
                    held.append(event)
                    response = event.response
                    return ModelResponse(output=list(response.output or output), usage=Usage(),
                                         response_id=response.id)  # fmt: skip
                if getattr(event, "type", "") == "response.output_item.done":
                    output.append(event.item)  # type: ignore[union-attr]
                queue.put_nowait(event)
            raise RuntimeError("the model's stream ended without a completed response")

        queue: asyncio.Queue[ResponseStreamEvent] = asyncio.Queue()
        recording = asyncio.ensure_future(turns.delivery.aturn(turn, streamed, CODEC))
        while not (recording.done() and queue.empty()):
            getting = asyncio.ensure_future(queue.get())
            await asyncio.wait({getting, recording}, return_when=asyncio.FIRST_COMPLETED)
            if getting.done():
                yield getting.result()
            else:
                getting.cancel()
        recorded = recording.result()
        yield held[0] if held else _completed(recorded)

    async def close(self) -> None:
        return None


def _completed(response: ModelResponse) -> ResponseCompletedEvent:
    """The stream of a replayed turn: one completed response holding what was recorded."""
    replayed = Response.model_construct(
        id=response.response_id or "replayed", object="response", created_at=0.0,
        model="replayed", output=list(response.output), parallel_tool_calls=True,
        tool_choice="auto", tools=[], usage=None, status="completed",
    )  # fmt: skip
    return ResponseCompletedEvent(type="response.completed", response=replayed, sequence_number=0)


def _resolver(config: RunConfig) -> Callable[[Agent[Any]], Model]:
    provider: ModelProvider = config.model_provider or MultiProvider()
    given = config.model

    def resolve(agent: Agent[Any]) -> Model:
        chosen = given if given is not None else agent.model
        if isinstance(chosen, Model):
            return chosen
        return provider.get_model(chosen)

    return resolve


def _announcing(config: RunConfig) -> Callable[[CallModelData[Any]], Any]:
    users = config.call_model_input_filter

    async def announce(data: CallModelData[Any]) -> ModelInputData:
        _announced.set(data.agent)
        if users is None:
            return data.model_data
        filtered = users(data)
        return await filtered if inspect.isawaitable(filtered) else filtered

    return announce


def _offset(input: Any) -> int:
    # A run resumed from its RunState has had that many model responses: its next turn
    # is the next index in the run, not the delivery's first.
    if isinstance(input, RunState):
        return len(input._model_responses)
    return 0


# -- deliveries ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Options:
    lease: Lease = field(default_factory=Lease)
    stream: bool = False
    attempt: Attempt | None = None


async def _run(
    actonce: Actonce, agent: Agent[Any], run_id: str, input: Any, options: _Options,
    run_options: dict[str, Any],
) -> RunResult | Parked:  # fmt: skip
    config: RunConfig = run_options.pop("run_config", None) or RunConfig()
    delivering = deliveries.adelivering(actonce.client, run_id, actonce.rule, options.lease,
                                        attempt=options.attempt)  # fmt: skip
    async with delivering as d:
        turns = _Turns(d, _resolver(config), next_index=_offset(input))
        durable = replace(config, model=DurableModel(),
                          call_model_input_filter=_announcing(config))  # fmt: skip
        token = _turns.set(turns)
        try:
            if options.stream:
                streamed = Runner.run_streamed(agent, input, run_config=durable, **run_options)
                async for _event in streamed.stream_events():
                    pass
                return cast(RunResult, streamed)
            return await Runner.run(agent, input, run_config=durable, **run_options)
        except Exception as error:
            parked = d.parked(error)
            if parked is not None:
                return parked
            raise
        finally:
            _turns.reset(token)


def _actonce_of(agent: Agent[Any], given: Actonce | None) -> Actonce:
    if given is not None:
        return given
    for tool in agent.tools:
        found = getattr(tool, _ACTONCE, None)
        if isinstance(found, Actonce):
            return found
    raise ValueError(
        f"agent {agent.name!r} has no actonce tool to take the rule and client from: "
        "pass actonce=, or call actonce.deliver()"
    )


async def adeliver(
    agent: Agent[Any],
    run_id: str,
    input: Any,
    *,
    actonce: Actonce | None = None,
    lease_deadline: datetime | None = None,
    heartbeat: Callable[[], datetime | None] | None = None,
    heartbeat_every: float | None = None,
    stream: bool = False,
    attempt: Attempt | None = None,
    **run_options: Any,
) -> RunResult | Parked:
    """Run one delivery of the queue's run ``run_id``: ``Runner.run`` (``stream=True``:
    ``Runner.run_streamed``, its events consumed) with ``input`` (a ``RunState``
    resumes a run paused for approval), every model call a durable model turn.

    ``lease_deadline`` is when the queue's lease on the job ends (its visibility
    timeout); ``heartbeat``, called every ``heartbeat_every`` seconds, extends it and
    answers the new deadline, which the delivery's lease follows. A run with an item in
    doubt answers :class:`Parked`. The rule and client are those of the agent's actonce
    tools, or of ``actonce``.

    ``attempt`` is the delivery's attempt when the harness began it and handed it
    over (``client.attempt(attempt_id, run_id=..., rule=..., capability=...)``): an
    agent holding only that attempt's capability, no API token, delivers in it."""
    options = _Options(Lease(lease_deadline, heartbeat, heartbeat_every), stream, attempt)
    return await _run(_actonce_of(agent, actonce), agent, run_id, input, options, run_options)


def deliver(
    agent: Agent[Any],
    run_id: str,
    input: Any,
    *,
    actonce: Actonce | None = None,
    lease_deadline: datetime | None = None,
    heartbeat: Callable[[], datetime | None] | None = None,
    heartbeat_every: float | None = None,
    stream: bool = False,
    attempt: Attempt | None = None,
    **run_options: Any,
) -> RunResult | Parked:
    """:func:`adeliver`, run to its end on an event loop of its own."""
    return asyncio.run(
        adeliver(
            agent,
            run_id,
            input,
            actonce=actonce,
            lease_deadline=lease_deadline,
            heartbeat=heartbeat,
            heartbeat_every=heartbeat_every,
            stream=stream,
            attempt=attempt,
            **run_options,
        )
    )


class Actonce:
    """Makes function tools of functions: each run of each tool call is one attempt.

    ``rule`` names the automation the runs belong to; ``lease`` bounds each attempt.
    """

    def __init__(self, client: Client, rule: str, *, lease: timedelta | None = None) -> None:
        self.client = client
        self.rule = rule
        self.lease = lease
        self._attempts = ToolAttempts(client, rule, lease)

    def deliver(self, agent: Agent[Any], run_id: str, input: Any, **options: Any) -> Any:
        """:func:`deliver` with this rule and client."""
        return deliver(agent, run_id, input, actonce=self, **options)

    async def adeliver(self, agent: Agent[Any], run_id: str, input: Any, **options: Any) -> Any:
        """:func:`adeliver` with this rule and client."""
        return await adeliver(agent, run_id, input, actonce=self, **options)

    @overload
    def tool(self, func: Callable[..., Any], /) -> FunctionTool: ...
    @overload
    def tool(
        self,
        func: None = None,
        /,
        *,
        retries: int = 0,
        transient: tuple[type[Exception], ...] = (),
        needs_approval: bool = False,
    ) -> Callable[[Callable[..., Any]], FunctionTool]: ...

    def tool(
        self,
        func: Callable[..., Any] | None = None,
        /,
        *,
        retries: int = 0,
        transient: tuple[type[Exception], ...] = (),
        needs_approval: bool = False,
    ) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
        """A function tool of ``func`` (``def``, or ``async def``), named after it and
        described by its docstring, which takes one :class:`ToolCall` parameter
        (:class:`AsyncToolCall` for ``async def``) besides the model's arguments.

        The tool call is tried again, up to ``retries`` times, after a RETRYABLE
        actonce error or one of the ``transient`` errors of its own downstream
        calls, each try a fresh attempt; never after any other error.
        ``needs_approval`` pauses the run for a person before the call is made
        (the SDK's approval); see docs/openai-agents.md.
        """

        def make(f: Callable[..., Any]) -> FunctionTool:
            return self._make_tool(f, retries, transient, needs_approval)

        return make if func is None else make(func)

    def _make_tool(
        self,
        func: Callable[..., Any],
        retries: int,
        transient: tuple[type[Exception], ...],
        needs_approval: bool,
    ) -> FunctionTool:
        context, signature = context_parameter(func)
        if "tool_context" in signature.parameters:
            raise TypeError(f"{func.__qualname__}: 'tool_context' is the parameter actonce adds")
        first = inspect.Parameter(
            "tool_context", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=ToolContext[Any]
        )
        wrapped = signature.replace(parameters=[first, *signature.parameters.values()])

        def may_retry(error: Exception, tries: int) -> bool:
            return tries <= retries and retry_may_help(error, transient)

        run = (
            self._async_runner(func, context, may_retry)
            if inspect.iscoroutinefunction(func)
            else self._runner(func, context, may_retry)
        )
        del run.__wrapped__  # type: ignore[attr-defined]
        run.__signature__ = wrapped  # type: ignore[attr-defined]
        run.__annotations__ = annotations_of(wrapped)
        # The SDK raises the tool's error when the formatter answers None, which
        # ToolErrorFunction's type does not say.
        refusals_only = cast(ToolErrorFunction, handle_tool_error)
        made = function_tool(
            run, failure_error_function=refusals_only, needs_approval=needs_approval
        )
        setattr(made, _ACTONCE, self)
        return made

    def _runner(
        self, func: Callable[..., Any], context: str, may_retry: Callable[[Exception, int], bool]
    ) -> Callable[..., Any]:
        @functools.wraps(func)
        def run(tool_context: ToolContext[Any], *args: Any, **kwargs: Any) -> Any:
            delivery = deliveries.current()
            tries = 0
            while True:
                tries += 1
                attempt = self._attempts.begin(
                    _run_of(delivery), tool_context.tool_call_id, "", delivery
                )
                try:
                    result = func(*args, **{context: ToolCall(attempt, attempt.scope)}, **kwargs)
                except Exception as error:
                    end_quietly(attempt)
                    if may_retry(error, tries):
                        continue
                    _saw(delivery, error)
                    raise
                except BaseException:
                    end_quietly(attempt)
                    raise
                attempt.end()
                return result

        return run

    def _async_runner(
        self, func: Callable[..., Any], context: str, may_retry: Callable[[Exception, int], bool]
    ) -> Callable[..., Any]:
        @functools.wraps(func)
        async def run(tool_context: ToolContext[Any], *args: Any, **kwargs: Any) -> Any:
            delivery = deliveries.current()
            tries = 0
            while True:
                tries += 1
                attempt, made = await self._attempts.abegin(
                    _run_of(delivery), tool_context.tool_call_id, "", delivery
                )
                try:
                    call = AsyncToolCall(attempt, attempt.scope)
                    result = await func(*args, **{context: call}, **kwargs)
                except Exception as error:
                    await aend_quietly(attempt)
                    if may_retry(error, tries):
                        continue
                    _saw(delivery, error)
                    raise
                except BaseException:
                    await aend_quietly(attempt)
                    raise
                finally:
                    if made is not None:
                        await made.close()
                await attempt.end()
                return result

        return run


def _run_of(delivery: Delivery | None) -> str:
    if delivery is not None:
        return delivery.run_id
    run_id = _run_id.get()
    if not run_id:
        raise RuntimeError(
            "no queue run id: run the agent with deliver(), or inside queue_run(run_id)"
        )
    return run_id


def _saw(delivery: Delivery | None, error: BaseException) -> None:
    if delivery is not None:
        delivery.saw(error)
