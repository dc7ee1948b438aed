"""A delivery whose lease ran out while its model call was pending, resumed after a newer
delivery finished, makes no write: in each integration.

Delivery A begins with a short lease (the queue's visibility timeout) and asks the model,
which does not answer. The lease runs out and the queue delivers the job again: delivery
B asks the model (which names its tool calls anew), opens the ticket, and finishes. Then
A's model answers, with other tool-call ids. A must write nothing: its recorded turn is
fenced (ATTEMPT_FENCED), or, where nothing records the turn (LangGraph with a
checkpointer), its tool calls are refused as they begin, since a newer delivery fenced
A's scoped attempts. The store holds one ticket.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from agents import Agent, set_tracing_disabled
from kill_loop import store_file
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from scripted_agents_model import ScriptedModel

from actonce_client import ActonceError, Client, FailureClass
from actonce_client import langgraph as on_langgraph
from actonce_client import openai_agents as on_agents
from actonce_client import pydantic_ai as on_pydantic
from actonce_client.deliveries import actonce_cause
from actonce_client.testing import LocalSidecar

pytestmark = pytest.mark.timeout(120)
LEASE = 1.5  # seconds: the queue's visibility timeout
TITLE = "Disk full"


class Gate:
    """Holds the first model call until released; every other call answers at once."""

    def __init__(self) -> None:
        self.pending = threading.Event()
        self.release = threading.Event()
        self.calls = 0
        self._lock = threading.Lock()

    def enter(self) -> None:
        with self._lock:
            self.calls += 1
            first = self.calls == 1
        if first:
            self.pending.set()
            assert self.release.wait(60)


@pytest.fixture(scope="module")
def sidecar() -> Iterator[LocalSidecar]:
    # A store call's deadline below the lease, so that the lease can let writes through.
    with LocalSidecar(args=["--store-timeout", "0.5"]) as sidecar:
        yield sidecar


def tickets(sidecar: LocalSidecar, run_id: str) -> int:
    with sqlite3.connect(store_file(sidecar.data_dir)) as db:
        (count,) = db.execute(
            "SELECT count(*) FROM artifacts WHERE kind = 'ticket'"
            " AND json_extract(data_json, '$.run') = ?",
            (run_id,),
        ).fetchone()
    return int(count)


def stale_then_newer(sidecar: LocalSidecar, gate: Gate, deliver: Callable[[datetime], Any]) -> Any:
    """Delivery A (held at its model call past its lease), then B to its end, then A
    released: what A came to (its answer, or the error it raised)."""
    outcome: dict[str, Any] = {}

    def stale() -> None:
        try:
            outcome["answer"] = deliver(datetime.now(UTC) + timedelta(seconds=LEASE))
        except Exception as error:
            outcome["error"] = error

    thread = threading.Thread(target=stale)
    thread.start()
    assert gate.pending.wait(30), "delivery A never asked its model"
    deadline = datetime.now(UTC) + timedelta(seconds=LEASE)
    while datetime.now(UTC) < deadline:  # the queue redelivers once the lease ran out
        threading.Event().wait(0.05)
    deliver(datetime.now(UTC) + timedelta(seconds=60))  # delivery B, to its end
    gate.release.set()
    thread.join(60)
    return outcome.get("error", outcome.get("answer"))


def refused(found: Any) -> str:
    assert isinstance(found, BaseException), f"the stale delivery went on: {found!r}"
    cause = actonce_cause(found)
    assert cause is not None, found
    return cause.reason


# -- the OpenAI Agents SDK --------------------------------------------------------------


def test_the_agents_sdk(sidecar: LocalSidecar) -> None:
    set_tracing_disabled(True)
    run_id, gate = f"stale-agents-{uuid.uuid4().hex[:8]}", Gate()

    class Held(ScriptedModel):
        async def get_response(self, *args: Any, **kwargs: Any) -> Any:
            await asyncio.to_thread(gate.enter)
            return await super().get_response(*args, **kwargs)

    with Client(sidecar.target) as client:
        actonce = on_agents.Actonce(client, rule="billing")

        @actonce.tool
        def open_ticket(title: str, call: on_agents.ToolCall) -> str:
            """Open a ticket."""
            return call.attempt.create("ticket", {"title": title, "run": run_id}).id

        model = Held([[("open_ticket", {"title": TITLE})], []])
        agent = Agent(name="billing", tools=[open_ticket], model=model)
        found = stale_then_newer(
            sidecar,
            gate,
            lambda lease: on_agents.deliver(agent, run_id, "go", lease_deadline=lease),
        )
    assert refused(found) in ("ATTEMPT_FENCED", "LEASE_EXPIRED")
    assert tickets(sidecar, run_id) == 1


# -- LangGraph, with a checkpointer and without -----------------------------------------


class HeldChat(BaseChatModel):
    gate: Any

    @property
    def _llm_type(self) -> str:
        return "held"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:  # fmt: skip
        self.gate.enter()
        if any(isinstance(m, AIMessage) for m in messages):
            return ChatResult(generations=[ChatGeneration(message=AIMessage("done"))])
        call = {"id": f"call_{uuid.uuid4().hex[:12]}", "name": "open_ticket",
                "args": {"title": TITLE}}  # fmt: skip
        return ChatResult(generations=[ChatGeneration(message=AIMessage("", tool_calls=[call]))])

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


@pytest.mark.parametrize("checkpointed", [True, False], ids=["checkpointer", "no-checkpointer"])
def test_langgraph(sidecar: LocalSidecar, tmp_path: Path, checkpointed: bool) -> None:
    run_id, gate = f"stale-graph-{uuid.uuid4().hex[:8]}", Gate()
    with Client(sidecar.target) as client:
        actonce = on_langgraph.Actonce(client, rule="billing")

        @actonce.tool
        def open_ticket(title: str, call: on_langgraph.ToolCall) -> str:
            """Open a ticket."""
            return call.attempt.create("ticket", {"title": title, "run": run_id}).id

        model: Any = HeldChat(gate=gate)
        if not checkpointed:
            model = on_langgraph.durable_model(model)
        saver = (
            SqliteSaver(sqlite3.connect(tmp_path / "cp.db", check_same_thread=False))
            if checkpointed
            else None
        )
        graph = StateGraph(MessagesState)
        graph.add_node("model", lambda state: {"messages": [model.invoke(state["messages"])]})
        graph.add_node(
            "tools", ToolNode([open_ticket], handle_tool_errors=on_langgraph.handle_tool_error)
        )
        graph.add_edge(START, "model")
        graph.add_conditional_edges("model", tools_condition)
        graph.add_edge("tools", "model")
        app = graph.compile(checkpointer=saver)

        def deliver(lease: datetime) -> Any:
            return on_langgraph.deliver(app, run_id, "thread-1", {"messages": [("user", "go")]},
                                 lease_deadline=lease)  # fmt: skip

        found = stale_then_newer(sidecar, gate, deliver)
    assert refused(found) in ("ATTEMPT_FENCED", "LEASE_EXPIRED")
    assert tickets(sidecar, run_id) == 1


# -- Pydantic AI ------------------------------------------------------------------------


def test_pydantic_ai(sidecar: LocalSidecar) -> None:
    run_id, gate = f"stale-pydantic-{uuid.uuid4().hex[:8]}", Gate()

    async def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        await asyncio.to_thread(gate.enter)
        if any(isinstance(m, ModelResponse) for m in messages):
            return ModelResponse(parts=[TextPart("done")])
        call = ToolCallPart("open_ticket", {"title": TITLE},
                            tool_call_id=f"call_{uuid.uuid4().hex[:12]}")  # fmt: skip
        return ModelResponse(parts=[call])

    with Client(sidecar.target) as client:
        actonce = on_pydantic.Actonce(client, rule="billing")

        @actonce.tool
        def open_ticket(title: str, call: on_pydantic.ToolCall) -> str:
            """Open a ticket."""
            return call.attempt.create("ticket", {"title": title, "run": run_id}).id

        agent = PydanticAgent(FunctionModel(answer), tools=[open_ticket], output_type=str)
        found = stale_then_newer(
            sidecar,
            gate,
            lambda lease: on_pydantic.deliver(agent, run_id, "go", lease_deadline=lease),
        )
    assert refused(found) in ("ATTEMPT_FENCED", "LEASE_EXPIRED")
    assert tickets(sidecar, run_id) == 1


def test_an_actonce_error_is_found_inside_a_frameworks_error() -> None:
    inner = ActonceError("x", code=grpc.StatusCode.FAILED_PRECONDITION, reason="ATTEMPT_FENCED",
                         failure_class=FailureClass.RETRYABLE)  # fmt: skip
    try:
        try:
            raise inner
        except ActonceError as error:
            raise RuntimeError("the framework's own") from error
    except RuntimeError as wrapped:
        assert actonce_cause(wrapped) is inner
