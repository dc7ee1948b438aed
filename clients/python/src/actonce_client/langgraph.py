"""LangGraph tools whose writes land once however the graph is retried (the
``langgraph`` extra; docs/langgraph.md).

    actonce = Actonce(client, rule="billing")

    @actonce.tool
    def open_ticket(title: str, call: ToolCall) -> str:
        \"\"\"Open a ticket.\"\"\"
        return call.attempt.create("ticket", {"title": title}).id

    tools = ToolNode([open_ticket], handle_tool_errors=handle_tool_error)
    graph.add_node("tools", tools, retry_policy=retry_policy())
    deliver(app, run_id, thread_id, {"messages": [...]})

Each delivery of the queue's job (:func:`deliver`, :func:`adeliver`, :func:`astream`) is
an attempt of its run. Each run of a tool call begins an attempt of the run scoped to
the tool call's id, named by the delivery (a newer delivery fences it), from the
checkpoint the tool's task runs from (``runtime.execution_info.checkpoint_id``: inside
a tool, the config's ``checkpoint_id`` is None), and ends it when the tool returns. The
tool call's id is stable across deliveries when the graph keeps the model's answer: a
durable checkpointer, or, for a graph without one, :func:`durable_model`, which records
each model response as a durable model turn of the delivery, keyed by what the model was asked
(docs/model-turns.md), and replays it.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

import grpc
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ToolMessage,
    messages_from_dict,
    messages_to_dict,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable, RunnableBinding, RunnableConfig, ensure_config
from langchain_core.tools import BaseTool, InjectedToolArg, StructuredTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import GraphInterrupt
from langgraph.prebuilt import ToolNode, ToolRuntime
from langgraph.pregel import Pregel
from langgraph.types import Command, RetryPolicy, StateSnapshot
from pydantic import ConfigDict, Field

from actonce_client import deliveries
from actonce_client.auth import CAPABILITY_HEADER
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
from actonce_client.errors import ActonceError, FailureClass
from actonce_client.model_turns import (
    Conversation,
    ModelTurn,
    ToolCallForm,
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
    "DELIVERY_KEY",
    "MAX_RECORDED_BYTES",
    "RUN_ID_KEY",
    "Actonce",
    "AsyncToolCall",
    "ModelResponseTooLarge",
    "Parked",
    "ParkedItem",
    "ToolCall",
    "adeliver",
    "astream",
    "deliver",
    "durable_model",
    "handle_tool_error",
    "is_retryable",
    "mcp_scope",
    "refused_message",
    "retry_policy",
    "sync_tools",
]

RUN_ID_KEY = "actonce_run_id"
"""The key of the queue's run id in the graph's ``configurable`` (and in the
metadata of each checkpoint the run saves), set by :func:`deliver`."""
DELIVERY_KEY = "actonce_delivery"
"""The key of the delivery's attempt id in the graph's ``configurable``."""

# The deliveries under way in this process, by their attempt's id: a tool finds its
# delivery by the id its config carries, in whichever thread LangGraph runs it.
_deliveries: weakref.WeakValueDictionary[str, Delivery] = weakref.WeakValueDictionary()


def _delivery_of(config: Mapping[str, Any] | None) -> Delivery | None:
    configurable = (config or {}).get("configurable") or {}
    found = _deliveries.get(str(configurable.get(DELIVERY_KEY, "")))
    return found if found is not None else deliveries.current()


class _ActonceTool(StructuredTool):
    """A LangChain tool made by :meth:`Actonce.tool`: it names its Actonce, for deliver."""

    actonce: Any = Field(default=None, exclude=True)


class Actonce:
    """Makes tools of functions: each run of each tool call is one attempt.

    ``rule`` names the automation the runs belong to (the sidecar's send
    allowlist and the audit name it); ``lease`` bounds each attempt.
    """

    def __init__(self, client: Client, rule: str, *, lease: timedelta | None = None) -> None:
        self.client = client
        self.rule = rule
        self.lease = lease
        self._attempts = ToolAttempts(client, rule, lease)

    def tool(self, func: Callable[..., Any]) -> BaseTool:
        """A LangChain tool of ``func`` (``def``, or ``async def``), named after it and
        described by its docstring, which takes one :class:`ToolCall` parameter
        (:class:`AsyncToolCall` for ``async def``) besides the model's arguments."""
        context, signature = context_parameter(func)
        if "runtime" in signature.parameters:
            raise TypeError(f"{func.__qualname__}: 'runtime' is the parameter actonce injects")
        runtime = inspect.Parameter(
            "runtime", inspect.Parameter.KEYWORD_ONLY, annotation=ToolRuntime
        )
        wrapped = signature.replace(parameters=[*signature.parameters.values(), runtime])
        is_async = inspect.iscoroutinefunction(func)
        run = self._async_runner(func, context) if is_async else self._runner(func, context)
        del run.__wrapped__  # type: ignore[attr-defined]
        run.__signature__ = wrapped  # type: ignore[attr-defined]
        run.__annotations__ = annotations_of(wrapped)
        made = _ActonceTool.from_function(
            None if is_async else run, coroutine=run if is_async else None,
            name=func.__name__, description=inspect.getdoc(func),
        )  # fmt: skip
        made.actonce = self
        return made

    def _runner(self, func: Callable[..., Any], context: str) -> Callable[..., Any]:
        @functools.wraps(func)
        def run(*args: Any, runtime: ToolRuntime, **kwargs: Any) -> Any:
            delivery, run_id, scope, checkpoint = _tool_call(runtime)
            attempt = self._attempts.begin(run_id, scope, checkpoint, delivery)
            call = ToolCall(attempt, attempt.scope, interrupts=(GraphInterrupt,))
            try:
                result = func(*args, **{context: call}, **kwargs)
            except BaseException as error:
                end_quietly(attempt)
                if delivery is not None:
                    delivery.saw(error)
                raise
            attempt.end()
            return result

        return run

    def _async_runner(self, func: Callable[..., Any], context: str) -> Callable[..., Any]:
        @functools.wraps(func)
        async def run(*args: Any, runtime: ToolRuntime, **kwargs: Any) -> Any:
            delivery, run_id, scope, checkpoint = _tool_call(runtime)
            attempt, made = await self._attempts.abegin(run_id, scope, checkpoint, delivery)
            call = AsyncToolCall(attempt, attempt.scope, interrupts=(GraphInterrupt,))
            try:
                result = await func(*args, **{context: call}, **kwargs)
            except BaseException as error:
                await aend_quietly(attempt)
                if delivery is not None:
                    delivery.saw(error)
                raise
            finally:
                if made is not None:
                    await made.close()
            await attempt.end()
            return result

        return run

    # -- deliveries with this rule and client -------------------------------------------

    def deliver(self, app: Pregel[Any, Any, Any, Any], run_id: str, thread_id: str,
                input: Any, **options: Any) -> Any:  # fmt: skip
        """:func:`deliver` with this rule and client."""
        return deliver(app, run_id, thread_id, input, actonce=self, **options)

    async def adeliver(self, app: Pregel[Any, Any, Any, Any], run_id: str, thread_id: str,
                       input: Any, **options: Any) -> Any:  # fmt: skip
        """:func:`adeliver` with this rule and client."""
        return await adeliver(app, run_id, thread_id, input, actonce=self, **options)


def _tool_call(runtime: ToolRuntime) -> tuple[Delivery | None, str, str, str]:
    """A tool call's delivery, run, scope (its id) and checkpoint."""
    delivery = _delivery_of(runtime.config)
    run_id = delivery.run_id if delivery is not None else None
    run_id = run_id or (runtime.config.get("configurable") or {}).get(RUN_ID_KEY)
    if not run_id:
        raise RuntimeError(
            f"no queue run id in the graph's config: run the graph with deliver(), "
            f"or set configurable[{RUN_ID_KEY!r}]"
        )
    info = runtime.execution_info
    if runtime.tool_call_id is None or info is None:
        raise RuntimeError("an actonce tool runs inside a graph's ToolNode, not on its own")
    # Without a checkpointer a task's checkpoint is new on every delivery: the tool
    # call's id alone, which the recorded model turn keeps, names it.
    checkpoint = "" if delivery is not None and delivery.needs_turns else info.checkpoint_id
    return delivery, str(run_id), runtime.tool_call_id, checkpoint


def retry_policy(
    *, transient: tuple[type[Exception], ...] = (), max_attempts: int = 3, **kwargs: Any
) -> RetryPolicy:
    """A node's RetryPolicy that retries RETRYABLE actonce errors, and the
    ``transient`` errors of the tools' own downstream calls (a connection reset,
    say), and nothing else: not ATTEMPT_FENCED, which a newer delivery's begin
    caused and every retry would meet again (it ends the delivery). Each retry
    begins a fresh attempt per tool call, so its writes are the first try's
    writes, made once."""

    def retry_on(error: Exception) -> bool:
        return retry_may_help(error, transient)

    return RetryPolicy(max_attempts=max_attempts, retry_on=retry_on, **kwargs)


def handle_tool_error(error: Exception) -> str:
    """``ToolNode(handle_tool_errors=handle_tool_error)``: a REFUSED call (bad
    input, an artifact not found) goes back to the model as the tool's message,
    which it can correct; every other error is raised, for the node's retry
    policy and then the queue."""
    message = refused_message(error)
    if message is None:
        raise error
    return message


# -- durable model turns ---------------------------------------------------------------


def _encode(message: AIMessage) -> Any:
    return messages_to_dict([message])[0]


def _decode(recorded: Any) -> AIMessage:
    message = messages_from_dict([recorded])[0]
    if not isinstance(message, AIMessage):
        raise TypeError(f"a recorded model turn holds a {type(message).__name__}")
    return message


CODEC: Codec[AIMessage] = Codec(_encode, _decode)


def _as_message(found: Any) -> AIMessage:
    if isinstance(found, AIMessageChunk):
        return AIMessage(**found.model_dump(exclude={"type", "tool_call_chunks", "chunk_position"}))
    if isinstance(found, AIMessage):
        return found
    raise TypeError(f"the model answered a {type(found).__name__}, not an AIMessage")


class DurableChatModel(BaseChatModel):
    """A chat model whose every call is a durable model turn of the delivery: keyed by
    the model's ``turn_name`` and a digest of its request (the messages and the tools
    bound, in the neutral form of docs/model-turns.md), asked once, its answer recorded;
    a later delivery replays it, with the same tool calls under the same ids. Within a
    delivery, a LangGraph task that asks again what it was answered (its node run again
    by a RetryPolicy) gets the same answer; other tasks asking the same (``Send``
    branches) get turns of their own (:func:`_caller`). Made by :func:`durable_model`."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    inner: Any
    turn_name: str = "model"
    tools_offered: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "actonce-durable"

    def _key(self, messages: Sequence[BaseMessage]) -> ModelTurn:
        request = request_form(conversation(messages), self.tools_offered)
        caller = _caller(ensure_config())
        legacy = {"model": self.turn_name, "turn": sum(isinstance(m, AIMessage) for m in messages)}
        return model_turn(self.turn_name, request, caller=caller, legacy=legacy)

    def _delivery(self) -> Delivery:
        found = _delivery_of(ensure_config())
        if found is None:
            raise RuntimeError("a durable model call outside actonce's deliver()")
        return found

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        def ask() -> AIMessage:
            return _as_message(self.inner.invoke(messages, stop=stop, **kwargs))

        answer = self._delivery().turn(self._key(messages), ask, CODEC)
        return ChatResult(generations=[ChatGeneration(message=answer)])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        async def ask() -> AIMessage:
            return _as_message(await self.inner.ainvoke(messages, stop=stop, **kwargs))

        answer = await self._delivery().aturn(self._key(messages), ask, CODEC)
        return ChatResult(generations=[ChatGeneration(message=answer)])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        # A turn streams as one chunk, once recorded: nothing may act on a part of it
        # before the whole is durable.
        def ask() -> AIMessage:
            chunks = list(self.inner.stream(messages, stop=stop, **kwargs))
            return _as_message(functools.reduce(lambda a, b: a + b, chunks))

        answer = self._delivery().turn(self._key(messages), ask, CODEC)
        yield _chunk(answer)

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        async def ask() -> AIMessage:
            chunks = [c async for c in self.inner.astream(messages, stop=stop, **kwargs)]
            return _as_message(functools.reduce(lambda a, b: a + b, chunks))

        answer = await self._delivery().aturn(self._key(messages), ask, CODEC)
        yield _chunk(answer)

    def bind_tools(
        self, tools: Sequence[Any], *, tool_choice: str | None = None, **kwargs: Any
    ) -> Runnable[LanguageModelInput, AIMessage]:
        bound = self.inner.bind_tools(tools, tool_choice=tool_choice, **kwargs)
        offered = [_tool_offered(tool) for tool in tools]
        return DurableChatModel(inner=bound, turn_name=self.turn_name, tools_offered=offered)


def _caller(config: RunnableConfig) -> str | None:
    """Who asks, in the graph that deliver() runs: its task the calling code runs in (for
    code in a subgraph, the task of the graph's node that holds the subgraph), or None
    outside a graph.

    A RetryPolicy runs a node again as the same task, under the same id, and each
    ``Send`` branch is a task of its own. A subgraph's own tasks are named anew when the
    node that holds it runs again, so they cannot say that a request is asked again: the
    outermost task can, at the price that two tasks inside one subgraph asking exactly the
    same request at once share one answer."""
    configurable = config.get("configurable") or {}
    namespace = str(configurable.get("checkpoint_ns") or "")
    outermost = namespace.split("|", 1)[0]
    if outermost:
        return outermost
    runtime = configurable.get(CONFIG_KEY_RUNTIME)
    info = getattr(runtime, "execution_info", None)
    return str(info.task_id) if info is not None and info.task_id else None


def _tool_offered(tool: Any) -> dict[str, Any]:
    """A bound tool in the neutral form: its name, description and JSON schema."""
    try:
        made = convert_to_openai_tool(tool)
    except (TypeError, ValueError):
        made = tool if isinstance(tool, dict) else {"name": repr(tool)}
    function = made.get("function")
    if isinstance(function, Mapping):
        return tool_form(str(function.get("name", "")), function.get("description"),
                         function.get("parameters"))  # fmt: skip
    # A provider's own tool ({"type": "web_search", ...}): itself is what is offered.
    return tool_form(str(made.get("name") or made.get("type") or ""), "", made)


# LangGraph's key of the node's Runtime in the config (langgraph.runtime.get_runtime reads it).
CONFIG_KEY_RUNTIME = "__pregel_runtime"

_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}


def conversation(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """LangChain messages in the neutral form (docs/model-turns.md): an AI message's text
    and tool calls (name and arguments), a tool message answering its call by position,
    every other message its role (``human`` is ``user``), text and non-text blocks."""
    made = Conversation()
    for message in messages:
        text, parts = _content(message.content)
        if isinstance(message, AIMessage):
            calls = [(c.get("id"), ToolCallForm(c["name"], c.get("args", {})))
                     for c in message.tool_calls]  # fmt: skip
            if calls:
                made.call(calls, text)
            else:
                made.say("assistant", text)
        elif isinstance(message, ToolMessage):
            made.answer(message.tool_call_id)
        else:
            role = getattr(message, "role", None) if message.type == "chat" else None
            made.say(str(role or _ROLES.get(message.type, message.type)), text, parts)
    return made.messages


def _content(content: Any) -> tuple[str, list[Any]]:
    """A message's text (its text blocks, joined) and its other blocks."""
    if isinstance(content, str):
        return content, []
    text: list[str] = []
    parts: list[Any] = []
    for block in content or []:
        if isinstance(block, str):
            text.append(block)
        elif isinstance(block, Mapping) and block.get("type") == "text":
            text.append(str(block.get("text", "")))
        else:
            parts.append(block)
    return "".join(text), parts


def _chunk(message: AIMessage) -> ChatGenerationChunk:
    chunk = AIMessageChunk(
        content=message.content, id=message.id, additional_kwargs=message.additional_kwargs,
        response_metadata=message.response_metadata, usage_metadata=message.usage_metadata,
        tool_calls=message.tool_calls, invalid_tool_calls=message.invalid_tool_calls,
    )  # fmt: skip
    return ChatGenerationChunk(message=chunk)


def durable_model(model: Any, *, name: str = "model") -> DurableChatModel:
    """``model`` (a chat model, or one with its tools bound) with every call a durable model
    turn of the delivery: the way for a graph without a checkpointer to keep its tool
    calls' ids across deliveries. ``name`` tells two models of one graph apart."""
    # A model given with its tools already bound offers them: they are part of what is asked.
    bound = getattr(model, "kwargs", None) if isinstance(model, RunnableBinding) else None
    tools = (bound or {}).get("tools") or []
    offered = [_tool_offered(tool) for tool in tools]
    return DurableChatModel(inner=model, turn_name=name, tools_offered=offered)


# -- MCP tools --------------------------------------------------------------------------


def mcp_scope() -> Callable[[Any, Callable[[Any], Any]], Any]:
    """A langchain-mcp-adapters tool interceptor that sends each MCP tool call in its own
    tool call's scope: the header ``actonce-scope`` (the tool call's id) beside
    ``actonce-attempt-id`` (the delivery) and the delivery's ``actonce-attempt-capability``
    when it has one, on the actonce MCP front or gateway.

        MultiServerMCPClient({...}, tool_interceptors=[mcp_scope()])

    An error the front answers is raised as an :class:`ActonceError`, as the sidecar's
    own tools raise it, and the delivery notes an item in doubt (``Parked``), except a
    refusal, which goes back to the model as the tool's error. The adapters would hand
    every error to the model (an ``IN_DOUBT``, a fenced delivery), and it would improvise.
    An upstream tool's own error answer is the upstream's, left to the adapters.
    """

    async def intercept(request: Any, handler: Callable[[Any], Any]) -> Any:
        runtime = request.runtime
        config = getattr(runtime, "config", None)
        delivery = _delivery_of(config)
        tool_call_id = getattr(runtime, "tool_call_id", None)
        if delivery is None or not tool_call_id:
            raise RuntimeError(
                "an actonce-scoped MCP tool runs in a graph's ToolNode, under deliver()"
            )
        delivery.require_turns()
        headers = {**(request.headers or {}), "actonce-attempt-id": delivery.attempt.id,
                   "actonce-scope": tool_call_id}  # fmt: skip
        if delivery.attempt.capability:
            headers[CAPABILITY_HEADER] = delivery.attempt.capability
        result = await handler(request.override(headers=headers))
        error = _front_error(result)
        if error is None or error.refused:
            return result
        delivery.saw(error)
        raise error

    return intercept


def _front_error(result: Any) -> ActonceError | None:
    """The actonce error an MCP tool result answers (the front's ``isError`` result: its
    reason, class and metadata), or None for a result or an upstream tool's own error."""
    if not getattr(result, "isError", False):
        return None
    if "actonce/outcome" in (getattr(result, "meta", None) or {}):
        return None  # the gateway passed the upstream's own answer on
    said = getattr(result, "structuredContent", None)
    if not isinstance(said, Mapping) or not isinstance(said.get("reason"), str):
        return None
    try:
        failure_class = FailureClass(str(said.get("failure_class")))
    except ValueError:
        return None
    metadata = said.get("metadata")
    return ActonceError(
        str(said.get("message", "")),
        code=grpc.StatusCode.UNKNOWN,  # MCP carries no status code: the reason says it
        reason=said["reason"],
        failure_class=failure_class,
        metadata={str(k): str(v) for k, v in metadata.items()}
        if isinstance(metadata, Mapping)
        else None,
    )


def sync_tools(tools: Sequence[BaseTool]) -> list[BaseTool]:
    """``tools`` callable from a graph run with ``invoke`` (:func:`deliver`): a tool that
    has only a coroutine (langchain-mcp-adapters' tools are async-only) runs it on an
    event loop of its own in the ToolNode's thread; every other tool as it is."""
    return [_sync_tool(tool) for tool in tools]


def _sync_tool(tool: BaseTool) -> BaseTool:
    if not isinstance(tool, StructuredTool) or tool.func is not None or tool.coroutine is None:
        return tool
    coroutine = tool.coroutine

    # ``runtime`` by name, so that the ToolNode injects it for the tool's interceptors.
    def run(runtime: Annotated[object | None, InjectedToolArg()] = None, **arguments: Any) -> Any:
        async def call() -> Any:
            return await coroutine(runtime=runtime, **arguments)

        return asyncio.run(call())

    return tool.model_copy(update={"func": run})


# -- deliveries ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Plan:
    """What a delivery does: run the graph on ``input``, or answer ``answer`` at once."""

    input: Any = None
    answer: Any = None
    run: bool = True


def _durable(app: Pregel[Any, Any, Any, Any]) -> bool:
    checkpointer = app.checkpointer
    if isinstance(checkpointer, InMemorySaver):
        raise ValueError(
            "deliver() needs a checkpointer that outlives the worker (SQLite, PostgreSQL), "
            "or none, with the model called through durable_model(): an InMemorySaver "
            "dies with the worker"
        )
    return isinstance(checkpointer, BaseCheckpointSaver)


def _plan(app: Pregel[Any, Any, Any, Any], config: RunnableConfig, run_id: str,
          input: Any) -> _Plan:  # fmt: skip
    if isinstance(input, Command) or not _durable(app):
        return _Plan(input)
    return _resume(app.get_state(config), run_id, input)


async def _aplan(app: Pregel[Any, Any, Any, Any], config: RunnableConfig, run_id: str,
                 input: Any) -> _Plan:  # fmt: skip
    if isinstance(input, Command) or not _durable(app):
        return _Plan(input)
    return _resume(await app.aget_state(config), run_id, input)


def _resume(state: StateSnapshot, run_id: str, input: Any) -> _Plan:
    # A redelivery of a run the thread already holds resumes it, or answers what it left.
    if (state.metadata or {}).get(RUN_ID_KEY) != run_id:
        return _Plan(input)
    if state.interrupts:
        return _Plan(answer={**state.values, "__interrupt__": list(state.interrupts)}, run=False)
    if not state.next:
        return _Plan(answer=state.values, run=False)
    return _Plan(None)


def _config(given: RunnableConfig | None, run_id: str, thread_id: str,
            delivery: Delivery) -> RunnableConfig:  # fmt: skip
    base: Mapping[str, Any] = given or {}
    return {
        **base,  # type: ignore[typeddict-item]
        "configurable": {**base.get("configurable", {}), "thread_id": thread_id,
                         RUN_ID_KEY: run_id, DELIVERY_KEY: delivery.attempt.id},
        "metadata": {**base.get("metadata", {}), RUN_ID_KEY: run_id},
    }  # fmt: skip


def _actonce_of(app: Pregel[Any, Any, Any, Any], given: Actonce | None) -> Actonce:
    if given is not None:
        return given
    # The graph's own nodes, then its subgraphs' (an agent as a node of a larger graph).
    subgraphs = (sub for _, sub in app.get_subgraphs(recurse=True))
    graphs = [app, *(sub for sub in subgraphs if isinstance(sub, Pregel))]
    for graph in graphs:
        for node in graph.nodes.values():
            bound = getattr(node, "bound", None)
            if isinstance(bound, ToolNode):
                for tool in bound.tools_by_name.values():
                    if isinstance(tool, _ActonceTool) and isinstance(tool.actonce, Actonce):
                        return tool.actonce
    raise ValueError(
        "the graph has no actonce tool to take the rule and client from: pass actonce=, "
        "or call actonce.deliver()"
    )


@dataclass(frozen=True)
class _Delivering:
    actonce: Actonce
    lease: Lease
    needs_turns: bool
    attempt: Attempt | None = None

    @contextmanager
    def sync(self, run_id: str) -> Iterator[Delivery]:
        with deliveries.delivering(self.actonce.client, run_id, self.actonce.rule, self.lease,
                                   needs_turns=self.needs_turns,
                                   attempt=self.attempt) as delivery:  # fmt: skip
            _deliveries[delivery.attempt.id] = delivery
            yield delivery

    @asynccontextmanager
    async def asynchronous(self, run_id: str) -> AsyncIterator[Delivery]:
        made = deliveries.adelivering(self.actonce.client, run_id, self.actonce.rule, self.lease,
                                      needs_turns=self.needs_turns,
                                      attempt=self.attempt)  # fmt: skip
        async with made as delivery:
            _deliveries[delivery.attempt.id] = delivery
            yield delivery


def _delivering(app: Pregel[Any, Any, Any, Any], options: dict[str, Any]) -> _Delivering:
    lease = Lease(options.pop("lease_deadline", None), options.pop("heartbeat", None),
                  options.pop("heartbeat_every", None))  # fmt: skip
    return _Delivering(_actonce_of(app, options.pop("actonce", None)), lease, not _durable(app),
                       options.pop("attempt", None))  # fmt: skip


def deliver(
    app: Pregel[Any, Any, Any, Any],
    run_id: str,
    thread_id: str,
    input: Any,
    *,
    config: RunnableConfig | None = None,
    actonce: Actonce | None = None,
    lease_deadline: datetime | None = None,
    heartbeat: Callable[[], datetime | None] | None = None,
    heartbeat_every: float | None = None,
    attempt: Attempt | None = None,
) -> Any:
    """Run one delivery of the queue's run ``run_id`` on the graph's thread.

    The first delivery starts the run with ``input``. With a checkpointer, a
    redelivery of a run the thread already holds resumes it from its last checkpoint
    instead (its tool calls keep their ids, so each tool call's writes are found
    once), or, when it finished, returns its final state; while the run waits in an
    ``interrupt()``, it returns the state with its ``__interrupt__``. A
    ``Command(resume=...)`` as ``input`` resumes the interrupted run. Without a
    checkpointer, every delivery runs the graph from ``input``, and its model,
    called through :func:`durable_model`, replays the turns an earlier delivery
    recorded.

    Every checkpoint is saved before the next step runs (``durability="sync"``).
    ``lease_deadline`` is when the queue's lease on the job ends; ``heartbeat``,
    called every ``heartbeat_every`` seconds, extends it and answers the new deadline,
    which the delivery's lease follows. A run with an item in doubt answers
    :class:`Parked`. The rule and client are those of the graph's actonce tools, or of
    ``actonce``.

    ``attempt`` is the delivery's attempt when the harness began it and handed it
    over (``client.attempt(attempt_id, run_id=..., rule=..., capability=...)``): an
    agent holding only that attempt's capability, no API token, delivers in it.
    """
    options = {"actonce": actonce, "lease_deadline": lease_deadline, "heartbeat": heartbeat,
               "heartbeat_every": heartbeat_every, "attempt": attempt}  # fmt: skip
    plan = _delivering(app, options)
    with plan.sync(run_id) as delivery:
        run_config = _config(config, run_id, thread_id, delivery)
        step = _plan(app, run_config, run_id, input)
        if not step.run:
            return step.answer
        try:
            return app.invoke(step.input, run_config, durability=_durability(app))
        except Exception as error:
            return _parked_or_raise(delivery, error)


async def adeliver(
    app: Pregel[Any, Any, Any, Any],
    run_id: str,
    thread_id: str,
    input: Any,
    *,
    config: RunnableConfig | None = None,
    **options: Any,
) -> Any:
    """:func:`deliver` for async code: the graph runs with ``ainvoke`` (its async tools
    and model calls awaited); the same options."""
    plan = _delivering(app, options)
    async with plan.asynchronous(run_id) as delivery:
        run_config = _config(config, run_id, thread_id, delivery)
        step = await _aplan(app, run_config, run_id, input)
        if not step.run:
            return step.answer
        try:
            return await app.ainvoke(step.input, run_config, durability=_durability(app))
        except Exception as error:
            return _parked_or_raise(delivery, error)


async def astream(
    app: Pregel[Any, Any, Any, Any],
    run_id: str,
    thread_id: str,
    input: Any,
    *,
    config: RunnableConfig | None = None,
    stream_mode: Any = "updates",
    **options: Any,
) -> AsyncIterator[Any]:
    """:func:`adeliver` as ``astream``: the graph's chunks as they come (``stream_mode``),
    then, if the run parked, a last item, its :class:`Parked`. A delivery with nothing
    left to run yields the answer :func:`adeliver` would return, once."""
    plan = _delivering(app, options)
    async with plan.asynchronous(run_id) as delivery:
        run_config = _config(config, run_id, thread_id, delivery)
        step = await _aplan(app, run_config, run_id, input)
        if not step.run:
            yield step.answer
            return
        try:
            async for chunk in app.astream(step.input, run_config, stream_mode=stream_mode,
                                           durability=_durability(app)):  # fmt: skip
                yield chunk
        except Exception as error:
            yield _parked_or_raise(delivery, error)


def _durability(app: Pregel[Any, Any, Any, Any]) -> Literal["sync"] | None:
    # Every checkpoint saved before the next step runs; a graph with no checkpointer
    # keeps none (LangGraph's astream refuses the setting there).
    return "sync" if _durable(app) else None


def _parked_or_raise(delivery: Delivery, error: Exception) -> Parked:
    parked = delivery.parked(error)
    if parked is None:
        raise error
    return parked
