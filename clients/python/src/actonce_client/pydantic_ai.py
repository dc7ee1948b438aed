"""Pydantic AI tools whose writes land once however the run is retried (the
``pydantic-ai`` extra; docs/pydantic-ai.md).

    actonce = Actonce(client, rule="billing")

    @actonce.tool
    def open_ticket(title: str, call: ToolCall) -> str:
        \"\"\"Open a ticket.\"\"\"
        return call.attempt.create("ticket", {"title": title}).id

    agent = Agent(model, tools=[open_ticket])
    result = actonce.deliver(agent, run_id, "The disk is full")

Each delivery of the queue's job is an attempt of its run (:func:`deliver`, or
:func:`adeliver` in async code). Its model is wrapped so that every request is a durable
model turn: its response is recorded, keyed by a digest of what the model was asked
(docs/model-turns.md), and a later delivery replays it instead of asking again, so its
tool calls keep their ids. Each try of a tool call begins an attempt of the run scoped
to the tool call's id (``RunContext.tool_call_id``), named by the delivery: a newer
delivery fences it. A run with an item in doubt answers
:class:`Parked`.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any, NoReturn

from pydantic_ai import Agent, ModelRetry, RunContext, Tool
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import (
    CompletedStreamedResponse,
    ModelRequestParameters,
    StreamedResponse,
)
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_core import to_jsonable_python

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
    "is_retryable",
    "refused_message",
]


def _encode(response: ModelResponse) -> Any:
    return ModelMessagesTypeAdapter.dump_python([response], mode="json")[0]


def _decode(recorded: Any) -> ModelResponse:
    (message,) = ModelMessagesTypeAdapter.validate_python([recorded])
    if not isinstance(message, ModelResponse):
        raise TypeError(f"a recorded model turn holds a {type(message).__name__}")
    return message


CODEC: Codec[ModelResponse] = Codec(_encode, _decode)


class DurableModel(WrapperModel):
    """The agent's model with every request a durable model turn of the delivery: keyed by
    ``name`` and a digest of the request (its messages and the tools offered, in the
    neutral form of docs/model-turns.md), asked once, its response recorded; a later
    delivery replays it. Within a delivery, a task that asks again what it was answered
    gets the same answer; other tasks asking the same (agents run in parallel) get turns
    of their own. A streamed request is drained into its response before it is
    recorded, and its parts are then streamed from the record: nothing acts on a part of
    it before the whole is durable."""

    def __init__(self, wrapped: Any, *, name: str = "model") -> None:
        super().__init__(wrapped)
        self.turn_name = name

    def _turn(
        self, messages: list[ModelMessage], parameters: ModelRequestParameters
    ) -> tuple[Delivery, ModelTurn]:
        delivery = deliveries.current()
        if delivery is None:
            raise RuntimeError("a durable model request outside actonce's deliver()")
        request = request_form(conversation(messages), _tools_offered(parameters))
        legacy = {"model": self.turn_name,
                  "turn": sum(isinstance(m, ModelResponse) for m in messages)}  # fmt: skip
        # The asyncio task is the caller: an agent's run asks in its own task, and a
        # request retried there is the same request; agents run in parallel, in their own.
        turn = model_turn(self.turn_name, request, caller=asyncio.current_task(), legacy=legacy)
        return delivery, turn

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        delivery, key = self._turn(messages, model_request_parameters)

        async def ask() -> ModelResponse:
            return await self.wrapped.request(messages, model_settings, model_request_parameters)

        return await delivery.aturn(key, ask, CODEC)

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncIterator[StreamedResponse]:
        delivery, key = self._turn(messages, model_request_parameters)

        async def drained() -> ModelResponse:
            async with self.wrapped.request_stream(
                messages, model_settings, model_request_parameters, run_context
            ) as stream:
                async for _event in stream:
                    pass
                return stream.get()

        response = await delivery.aturn(key, drained, CODEC)
        yield CompletedStreamedResponse(
            response, model_request_parameters=model_request_parameters, replay_events=True
        )


def conversation(messages: list[ModelMessage]) -> list[dict[str, Any]]:
    """Pydantic AI's history in the neutral form (docs/model-turns.md): a request's
    instructions and system prompts as system messages, its user prompts as user ones
    (text, and any other content as its JSON), a tool's return or retry prompt as the
    result of the call it names, by position (a retry prompt of no tool is the user's);
    a response's text parts joined and its tool calls (name and arguments). Timestamps,
    thinking and the parts a model is not sent are left out."""
    made = Conversation()
    for message in messages:
        if isinstance(message, ModelResponse):
            text = "".join(p.content for p in message.parts if isinstance(p, TextPart))
            calls = [(p.tool_call_id, ToolCallForm(p.tool_name, arguments_of(p.args or {})))
                     for p in message.parts if isinstance(p, ToolCallPart)]  # fmt: skip
            if calls:
                made.call(calls, text)
            else:
                made.say("assistant", text)
            continue
        if message.instructions is not None:
            made.say("system", message.instructions)
        for part in message.parts:
            _request_part(made, part)
    return made.messages


def _request_part(made: Conversation, part: Any) -> None:
    if isinstance(part, SystemPromptPart):
        made.say("system", part.content)
    elif isinstance(part, UserPromptPart):
        if isinstance(part.content, str):
            made.say("user", part.content)
        else:
            text = "".join(c for c in part.content if isinstance(c, str))
            others = [to_jsonable_python(c) for c in part.content if not isinstance(c, str)]
            made.say("user", text, others)
    elif isinstance(part, ToolReturnPart):
        made.answer(part.tool_call_id)
    elif isinstance(part, RetryPromptPart):
        if part.tool_name is None:
            made.say("user", part.model_response())
        else:
            made.answer(part.tool_call_id)


def _tools_offered(parameters: ModelRequestParameters) -> list[dict[str, Any]]:
    return [tool_form(t.name, t.description, t.parameters_json_schema)
            for t in [*parameters.function_tools, *parameters.output_tools]]  # fmt: skip


def _actonce_of(agent: Agent[Any, Any], given: Actonce | None) -> Actonce:
    if given is not None:
        return given
    for toolset in agent.toolsets:
        for tool in getattr(toolset, "tools", {}).values():
            found = getattr(tool.function, "__actonce__", None)
            if isinstance(found, Actonce):
                return found
    raise ValueError(
        "the agent has no actonce tool to take the rule and client from: pass actonce=, "
        "or call actonce.deliver()"
    )


async def adeliver(
    agent: Agent[Any, Any],
    run_id: str,
    prompt: Any = None,
    *,
    actonce: Actonce | None = None,
    lease_deadline: datetime | None = None,
    heartbeat: Callable[[], datetime | None] | None = None,
    heartbeat_every: float | None = None,
    attempt: Attempt | None = None,
    **run_options: Any,
) -> Any:
    """Run one delivery of the queue's run ``run_id``: ``agent.run(prompt, ...)`` with its
    model (or ``model=``) a :class:`DurableModel`. ``lease_deadline``, ``heartbeat`` and
    ``heartbeat_every`` are the queue's lease, as the other integrations take them. A run
    with an item in doubt answers :class:`Parked`.

    ``attempt`` is the delivery's attempt when the harness began it and handed it
    over (``client.attempt(attempt_id, run_id=..., rule=..., capability=...)``): an
    agent holding only that attempt's capability, no API token, delivers in it."""
    chosen = _actonce_of(agent, actonce)
    lease = Lease(lease_deadline, heartbeat, heartbeat_every)
    model = run_options.pop("model", None) or agent.model
    if model is None:
        raise ValueError("the agent has no model: pass model=")
    durable = model if isinstance(model, DurableModel) else DurableModel(model)
    delivering = deliveries.adelivering(chosen.client, run_id, chosen.rule, lease,
                                        attempt=attempt)  # fmt: skip
    async with delivering as delivery:
        try:
            return await agent.run(prompt, model=durable, **run_options)
        except Exception as error:
            parked = delivery.parked(error)
            if parked is None:
                raise
            return parked


def deliver(agent: Agent[Any, Any], run_id: str, prompt: Any = None, **options: Any) -> Any:
    """:func:`adeliver`, run to its end on an event loop of its own."""
    return asyncio.run(adeliver(agent, run_id, prompt, **options))


class Actonce:
    """Makes Pydantic AI tools of functions: each run of each tool call is one attempt.

    ``rule`` names the automation the runs belong to; ``lease`` bounds each attempt.
    """

    def __init__(self, client: Client, rule: str, *, lease: timedelta | None = None) -> None:
        self.client = client
        self.rule = rule
        self.lease = lease
        self._attempts = ToolAttempts(client, rule, lease)

    def deliver(self, agent: Agent[Any, Any], run_id: str, prompt: Any = None,
                **options: Any) -> Any:  # fmt: skip
        """:func:`deliver` with this rule and client."""
        return deliver(agent, run_id, prompt, actonce=self, **options)

    async def adeliver(self, agent: Agent[Any, Any], run_id: str, prompt: Any = None,
                       **options: Any) -> Any:  # fmt: skip
        """:func:`adeliver` with this rule and client."""
        return await adeliver(agent, run_id, prompt, actonce=self, **options)

    def tool(self, func: Callable[..., Any]) -> Tool[Any]:
        """A Pydantic AI tool of ``func`` (``def``, or ``async def``), named after it and
        described by its docstring, which takes one :class:`ToolCall` parameter
        (:class:`AsyncToolCall` for ``async def``) besides the model's arguments. Only a
        refusal goes back to the model (as a retry prompt); every other error ends the run."""
        context, signature = context_parameter(func)
        if "ctx" in signature.parameters:
            raise TypeError(f"{func.__qualname__}: 'ctx' is the parameter actonce adds")
        first = inspect.Parameter(
            "ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=RunContext[Any]
        )
        wrapped = signature.replace(parameters=[first, *signature.parameters.values()])
        is_async = inspect.iscoroutinefunction(func)
        run = self._async_runner(func, context) if is_async else self._runner(func, context)
        del run.__wrapped__  # type: ignore[attr-defined]
        run.__signature__ = wrapped  # type: ignore[attr-defined]
        run.__annotations__ = annotations_of(wrapped)
        run.__actonce__ = self  # type: ignore[attr-defined]
        return Tool(run, takes_ctx=True, name=func.__name__, description=inspect.getdoc(func))

    def _runner(self, func: Callable[..., Any], context: str) -> Callable[..., Any]:
        @functools.wraps(func)
        def run(ctx: RunContext[Any], *args: Any, **kwargs: Any) -> Any:
            delivery, run_id, scope = _tool_call(ctx)
            with delivery.tool_running():
                attempt = self._attempts.begin(run_id, scope, "", delivery)
                try:
                    result = func(*args, **{context: ToolCall(attempt, scope)}, **kwargs)
                except BaseException as error:
                    end_quietly(attempt)
                    _refused_or_raise(delivery, error)
                attempt.end()
                return result

        return run

    def _async_runner(self, func: Callable[..., Any], context: str) -> Callable[..., Any]:
        @functools.wraps(func)
        async def run(ctx: RunContext[Any], *args: Any, **kwargs: Any) -> Any:
            delivery, run_id, scope = _tool_call(ctx)
            with delivery.tool_running():
                return await self._run_async(func, context, delivery, run_id, scope, args, kwargs)

        return run

    async def _run_async(
        self,
        func: Callable[..., Any],
        context: str,
        delivery: Delivery,
        run_id: str,
        scope: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        attempt, made = await self._attempts.abegin(run_id, scope, "", delivery)
        try:
            result = await func(*args, **{context: AsyncToolCall(attempt, scope)}, **kwargs)
        except BaseException as error:
            await aend_quietly(attempt)
            _refused_or_raise(delivery, error)
        finally:
            if made is not None:
                await made.close()
        await attempt.end()
        return result


def _tool_call(ctx: RunContext[Any]) -> tuple[Delivery, str, str]:
    delivery = deliveries.current()
    if delivery is None:
        raise RuntimeError("an actonce tool runs under deliver(): no delivery here")
    if not ctx.tool_call_id:
        raise RuntimeError("an actonce tool runs as a tool call of an agent's run")
    return delivery, delivery.run_id, ctx.tool_call_id


def _refused_or_raise(delivery: Delivery, error: BaseException) -> NoReturn:
    """A refusal goes back to the model, which can correct the call (Pydantic AI's retry
    prompt); any other error ends the run, for the queue."""
    message = refused_message(error)
    if message is not None:
        raise ModelRetry(message) from error
    delivery.saw(error)
    raise error
