"""A LangGraph agent on actonce, its worker killed with SIGKILL after each of its
writes and the run delivered again: every write is in the store once, and every
charge is made once by the card processor, or is IN_DOUBT, never twice.

A real graph (StateGraph with ToolNode and the node's RetryPolicy, and the stock
create_agent) with a scripted chat model, checkpointed in SQLite files by the
langgraph-checkpoint-sqlite package, calling a real `actonce serve` over gRPC
and a card processor over HTTP. Each delivery runs in a process of its own,
forked from a worker that imported LangGraph once (tests/forking_worker.py), so
that a kill loop is quick.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Annotated, Any

import grpc
import pytest
import scenarios
from kill_loop import World, check_every_kill, world_of
from langchain.agents import create_agent
from langchain.agents.middleware import ToolErrorMiddleware, ToolRetryMiddleware
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import InjectedToolArg, StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from scripted_model import DONE, ScriptedChatModel, turn

from actonce_client import ActonceError, Client, FailureClass
from actonce_client.deliveries import Lease, Parked, ParkedItem, delivering
from actonce_client.langgraph import (
    Actonce,
    ToolCall,
    deliver,
    handle_tool_error,
    is_retryable,
    mcp_scope,
    refused_message,
    retry_policy,
    sync_tools,
)
from actonce_client.testing import LocalSidecar

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def world(sidecar: LocalSidecar, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with world_of(sidecar, tmp_path_factory.mktemp("langgraph"), "langgraph_worker") as world:
        yield world


EXPECTED = scenarios.LANGGRAPH


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_each_write_once_whichever_write_or_model_call_the_worker_is_killed_at(
    world: World, scenario: str
) -> None:
    assert check_every_kill(world, scenario, EXPECTED[scenario]) > 0


def small_agent(client: Client, checkpointer: Any) -> Any:
    """One tool that edits an artifact that does not exist, a model that calls it once."""
    actonce = Actonce(client, rule="editor")

    @actonce.tool
    def retitle(artifact_id: str, title: str, call: ToolCall) -> str:
        """Retitle an artifact."""
        return call.attempt.edit(artifact_id, "/title", title).id

    model = ScriptedChatModel(
        script=[turn(("call-1", "retitle", {"artifact_id": "art_missing", "title": "x"})), DONE]
    )
    graph = StateGraph(MessagesState)
    graph.add_node("model", lambda state: {"messages": [model.invoke(state["messages"])]})
    graph.add_node("tools", ToolNode([retitle], handle_tool_errors=handle_tool_error))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    return graph.compile(checkpointer=checkpointer)


def test_a_refused_call_goes_back_to_the_model_as_the_tool_message(
    client: Client, tmp_path: Path
) -> None:
    with SqliteSaver.from_conn_string(str(tmp_path / "checkpoints.db")) as saver:
        app = small_agent(client, saver)
        out = deliver(app, f"run-{uuid.uuid4().hex}", "thread-1", {"messages": [("user", "go")]})
    answered = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert len(answered) == 1 and str(answered[0].content).startswith("refused: NOT_FOUND")
    assert out["messages"][-1].content == "done"


def error(failure_class: FailureClass, reason: str) -> ActonceError:
    return ActonceError(
        "x", code=grpc.StatusCode.FAILED_PRECONDITION, reason=reason, failure_class=failure_class
    )


@pytest.mark.parametrize(
    "failure",
    [
        error(FailureClass.UNKNOWN, "IN_DOUBT"),
        error(FailureClass.RETRYABLE, "LEASE_EXPIRED"),
        error(FailureClass.PERMANENT, "FORBIDDEN"),
        ValueError("a bug"),
    ],
)
def test_every_error_but_a_refusal_is_raised_past_the_model(failure: Exception) -> None:
    with pytest.raises(type(failure)):
        handle_tool_error(failure)


def test_the_retry_policy_retries_retryable_and_the_listed_transient_errors_only() -> None:
    retry_on = retry_policy(transient=(ConnectionError,)).retry_on
    assert callable(retry_on)
    assert retry_on(error(FailureClass.RETRYABLE, "UNKNOWN_ATTEMPT"))
    assert retry_on(error(FailureClass.RETRYABLE, "LEASE_EXPIRED"))
    assert retry_on(ConnectionResetError())
    # A fenced delivery is fenced again on every retry: the fence ends it.
    for never in [error(FailureClass.RETRYABLE, "ATTEMPT_FENCED"),
                  error(FailureClass.UNKNOWN, "IN_DOUBT"),
                  error(FailureClass.UNKNOWN, "AUDIT_PERSISTENCE_FAILED"),
                  error(FailureClass.PERMANENT, "FORBIDDEN"),
                  error(FailureClass.REFUSED, "NOT_FOUND"), ValueError("a bug")]:  # fmt: skip
        assert not retry_on(never), never


def test_deliver_refuses_a_checkpointer_that_dies_with_the_worker(client: Client) -> None:
    app = small_agent(client, InMemorySaver())
    with pytest.raises(ValueError, match="outlives the worker"):
        deliver(app, "run-1", "thread-1", {"messages": [("user", "go")]})


def test_a_graph_without_a_checkpointer_refuses_a_tool_call_no_model_turn_recorded(
    client: Client,
) -> None:
    app = small_agent(client, None)  # its model is not durable_model's
    with pytest.raises(RuntimeError, match="before any recorded model turn"):
        deliver(app, f"run-{uuid.uuid4().hex}", "thread-1", {"messages": [("user", "go")]})


def test_a_tool_names_its_tool_call_parameter_by_type(client: Client) -> None:
    actonce = Actonce(client, rule="editor")

    def no_call(title: str) -> str:
        """No ToolCall."""
        return title

    with pytest.raises(TypeError, match="ToolCall"):
        actonce.tool(no_call)


def test_create_agent_hands_refusals_to_the_model_through_its_middleware(
    client: Client, tmp_path: Path
) -> None:
    actonce = Actonce(client, rule="editor")

    @actonce.tool
    def retitle(artifact_id: str, title: str, call: ToolCall) -> str:
        """Retitle an artifact."""
        return call.attempt.edit(artifact_id, "/title", title).id

    model = ScriptedChatModel(
        script=[turn(("call-1", "retitle", {"artifact_id": "art_missing", "title": "x"})), DONE]
    )
    middleware = [
        ToolErrorMiddleware(on_error=lambda error, _: refused_message(error)),
        ToolRetryMiddleware(retry_on=is_retryable, on_failure="error"),
    ]
    with SqliteSaver.from_conn_string(str(tmp_path / "checkpoints.db")) as saver:
        app = create_agent(model, [retitle], middleware=middleware, checkpointer=saver)
        out = deliver(app, f"run-{uuid.uuid4().hex}", "thread-1", {"messages": [("user", "go")]})
    answered = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert len(answered) == 1 and str(answered[0].content).startswith("refused: NOT_FOUND")


@dataclass(frozen=True)
class _McpRequest:
    """What langchain-mcp-adapters hands a tool interceptor: the call's runtime and headers."""

    runtime: Any
    headers: dict[str, str] | None

    def override(self, **changes: Any) -> _McpRequest:
        return replace(self, **changes)


def test_mcp_scope_sends_the_tool_calls_scope_beside_its_delivery(client: Client) -> None:
    sent: dict[str, str] = {}

    async def handler(request: _McpRequest) -> str:
        sent.update(request.headers or {})
        return "answered"

    runtime = SimpleNamespace(config={}, tool_call_id="call_7")
    with delivering(client, f"run-{uuid.uuid4().hex}", "billing", Lease()) as delivery:
        answer = asyncio.run(mcp_scope()(_McpRequest(runtime, {"x-trace": "1"}), handler))
    assert answer == "answered"
    assert sent == {"x-trace": "1", "actonce-attempt-id": delivery.attempt.id,
                    "actonce-scope": "call_7"}  # fmt: skip
    with pytest.raises(RuntimeError, match="under deliver"):
        asyncio.run(mcp_scope()(_McpRequest(runtime, None), handler))


@dataclass(frozen=True)
class _McpResult:
    """An MCP tool result as the MCP SDK's client answers it."""

    isError: bool  # the SDK's names
    structuredContent: dict[str, Any] | None
    meta: dict[str, Any] | None = None


def test_mcp_scope_raises_the_fronts_errors_but_refusals_and_notes_what_is_in_doubt(
    client: Client,
) -> None:
    in_doubt = _McpResult(
        True,
        {
            "reason": "IN_DOUBT",
            "failure_class": "UNKNOWN",
            "message": "began earlier and never ended",
            "metadata": {"step_id": "stp_1", "tool": "payments__charge"},
        },
    )
    refused = _McpResult(
        True,
        {
            "reason": "INVALID_ARGUMENT",
            "failure_class": "REFUSED",
            "message": "cents: must be an integer",
        },
    )
    # The upstream's own error, passed on by the gateway: the upstream's, not actonce's.
    declined = _McpResult(True, {"reason": "card declined", "failure_class": "UNKNOWN"},
                          {"actonce/outcome": "tool_error"})  # fmt: skip
    runtime = SimpleNamespace(config={}, tool_call_id="call_8")

    def called(result: _McpResult) -> Any:
        async def handler(request: _McpRequest) -> _McpResult:
            return result

        return asyncio.run(mcp_scope()(_McpRequest(runtime, None), handler))

    run_id = f"run-{uuid.uuid4().hex}"
    with delivering(client, run_id, "billing", Lease()) as delivery:
        assert called(refused) is refused
        assert called(declined) is declined
        with pytest.raises(ActonceError) as raised:
            called(in_doubt)
        assert (raised.value.reason, raised.value.failure_class) == (
            "IN_DOUBT",
            FailureClass.UNKNOWN,
        )
        item = ParkedItem("stp_1", "payments__charge", "IN_DOUBT", "began earlier and never ended")
        assert delivery.parked() == Parked(run_id, (item,))


def test_sync_tools_runs_an_async_only_tool_in_a_graph_run_with_invoke(client: Client) -> None:
    seen: list[str] = []

    async def lookup(
        runtime: Annotated[object | None, InjectedToolArg()] = None, **arguments: Any
    ) -> str:
        seen.append(getattr(runtime, "tool_call_id", ""))
        return f"balance of {arguments['customer']}: 100"

    schema = {"type": "object", "properties": {"customer": {"type": "string"}},
              "required": ["customer"]}  # fmt: skip
    only_async = StructuredTool(name="lookup", description="A balance.", args_schema=schema,
                                coroutine=lookup)  # fmt: skip

    def graph(tools: list[Any]) -> Any:
        model = ScriptedChatModel(script=[turn(("c", "lookup", {"customer": "ada"})), DONE])
        builder = StateGraph(MessagesState)
        builder.add_node("model", lambda state: {"messages": [model.invoke(state["messages"])]})
        builder.add_node("tools", ToolNode(tools))
        builder.add_edge(START, "model")
        builder.add_conditional_edges("model", tools_condition)
        builder.add_edge("tools", "model")
        return builder.compile(checkpointer=InMemorySaver())

    go = {"messages": [HumanMessage("go")]}
    with pytest.raises(NotImplementedError):  # what an MCP-tooled graph does under invoke
        graph([only_async]).invoke(go, {"configurable": {"thread_id": "t1"}})
    out = graph(sync_tools([only_async])).invoke(go, {"configurable": {"thread_id": "t2"}})
    (answer,) = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert answer.content == "balance of ada: 100"
    assert len(seen) == 1 and seen[0] == answer.tool_call_id
