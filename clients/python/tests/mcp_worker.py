"""A queue worker that runs a LangGraph agent whose tools are MCP tools through actonce's
gateway (langchain-mcp-adapters, with ``mcp_scope()`` giving each tool call its scope):
one delivery of a run per process, killed with SIGKILL after its k-th write or as its
m-th model call starts, when the test says so. It runs in the MCP agent environment
(tests/mcp_world.py).

Its tools are the sidecar's own (``create``, ``notice``) and the payments server's
(``payments__charge_keyed``, keyed by the step id, and ``payments__charge``, keyed by
nothing: a non-idempotent write). A write is a tool call the gateway answered; the k-th
kills the process as soon as its answer came, before the agent hears of it. Its model is
scripted as a real model answers (tests/scripted_model.py).

Scenarios: ``sync`` (``deliver``, the tools through ``sync_tools``), ``async``
(``adeliver``), ``astream``, ``async+nocp`` (no checkpointer, durable model turns), and
``create_agent``. The tools' attempts take the delivery's checkpoint, ``""``: the tool
call's id, the scope, names each call (docs/langgraph.md, "MCP tools").
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from delivery import WORDINGS, Job, Writes
from langchain.agents import create_agent
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.outputs import ChatResult
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, tool
from langchain_mcp_adapters.client import MultiServerMCPClient
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.pregel import Pregel
from scripted_model import DONE, ScriptedChatModel, Turn

from actonce_client import Client
from actonce_client.deliveries import actonce_cause
from actonce_client.langgraph import (
    Actonce,
    Parked,
    adeliver,
    astream,
    deliver,
    durable_model,
    handle_tool_error,
    mcp_scope,
    retry_policy,
    sync_tools,
)

RULE = "billing-agent"
WRITES = frozenset({"create", "notice", "payments__charge", "payments__charge_keyed"})
OPENED = tuple(f"opened a ticket: {wording}" for wording in WORDINGS["Disk full"])


def script(job: Job) -> list[Turn]:
    """A ticket and a keyed charge; then the same charge again (a second, legitimate one:
    another tool call), a charge with no key, and a notice, at once; then done."""
    ada, bob = f"{job.run_id}-ada", f"{job.run_id}-bob"
    return [
        [("create", {"kind": "ticket", "data": {"title": "Disk full", "run": job.run_id}}),
         ("payments__charge_keyed", {"customer": ada, "cents": 500})],
        [("payments__charge_keyed", {"customer": ada, "cents": 500}),
         ("payments__charge", {"customer": bob, "cents": 700}),
         ("notice", {"thread_id": job.thread_id, "text": OPENED})],
        DONE,
    ]  # fmt: skip


class HeldChatModel(ScriptedChatModel):
    """The scripted model, whose first call waits until the file ``hold`` exists (and says
    it is waiting in ``hold``.pending): a model call pending past the delivery's lease."""

    hold: str = ""

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: Any = None, **kwargs: Any) -> ChatResult:  # fmt: skip
        if self.hold and self.calls == 0:
            Path(f"{self.hold}.pending").touch()
            while not Path(self.hold).exists():
                time.sleep(0.02)
        return super()._generate(messages, stop, run_manager, **kwargs)


def counting(writes: Writes) -> Callable[[Any, Callable[[Any], Any]], Any]:
    """The outermost interceptor: each write the gateway answered counts (and may kill)."""

    async def intercept(request: Any, handler: Callable[[Any], Any]) -> Any:
        result = await handler(request)
        if request.name in WRITES and not getattr(result, "isError", False):
            writes.landed()
        return result

    return intercept


async def mcp_tools(job: Job, writes: Writes) -> list[BaseTool]:
    client = MultiServerMCPClient(
        {"actonce": {"transport": "streamable_http", "url": job.processor}},
        tool_interceptors=[counting(writes), mcp_scope()],
    )
    tools: list[BaseTool] = await client.get_tools()
    return tools


def build(
    how: str, model: Any, tools: list[BaseTool], saver: BaseCheckpointSaver[Any] | None
) -> Pregel[Any, Any, Any, Any]:
    chat: Any = model if saver is not None else durable_model(model)
    if how == "create_agent":
        return create_agent(chat, tools, checkpointer=saver)
    bound = chat.bind_tools(tools)

    def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [bound.invoke(state["messages"])]}

    async def acall_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await bound.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model if how == "sync" else acall_model)
    graph.add_node(
        "tools",
        ToolNode(tools, handle_tool_errors=handle_tool_error),
        retry_policy=retry_policy(initial_interval=0.01, jitter=False),
    )
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    return graph.compile(checkpointer=saver)


def warm() -> None:
    """Run a graph once, with no tool call and no connection, so that every delivery
    forked after it finds LangGraph's lazy imports and caches made."""

    @tool
    def nothing() -> str:
        """Do nothing."""
        return ""

    for how in ("sync", "create_agent"):
        app = build(how, ScriptedChatModel(script=[DONE]), [nothing], InMemorySaver())
        config: RunnableConfig = {"configurable": {"thread_id": "warm"}}
        app.invoke({"messages": [HumanMessage("go")]}, config)


def _options(job: Job, actonce: Actonce) -> dict[str, Any]:
    lease = datetime.now(UTC) + timedelta(seconds=job.lease_seconds)
    return {"actonce": actonce, "lease_deadline": lease if job.lease_seconds else None}


def _deliver(job: Job, actonce: Actonce, model: Any, writes: Writes) -> Any:
    thread, first = f"thread-{job.run_id}", {"messages": [HumanMessage("go")]}
    if job.scenario == "sync":
        tools = sync_tools(asyncio.run(mcp_tools(job, writes)))
        saver = SqliteSaver(sqlite3.connect(job.checkpoints, check_same_thread=False))
        app = build("sync", model, tools, saver)
        return deliver(app, job.run_id, thread, first, **_options(job, actonce))
    return asyncio.run(_adeliver(job, actonce, model, writes))


async def _adeliver(job: Job, actonce: Actonce, model: Any, writes: Writes) -> Any:
    thread, first = f"thread-{job.run_id}", {"messages": [HumanMessage("go")]}
    options = _options(job, actonce)
    tools = await mcp_tools(job, writes)
    if job.scenario == "async+nocp":
        app = build("async", model, tools, None)
        return await adeliver(app, job.run_id, thread, first, **options)
    async with AsyncSqliteSaver.from_conn_string(job.checkpoints) as saver:
        app = build(job.scenario, model, tools, saver)
        if job.scenario != "astream":
            return await adeliver(app, job.run_id, thread, first, **options)
        last: Any = None
        async for chunk in astream(app, job.run_id, thread, first, stream_mode="values",
                                   **options):  # fmt: skip
            last = chunk
        return last


def run(given: dict[str, Any]) -> None:
    """One delivery of the job ``given`` (a Job's fields); what it did goes to its result."""
    job = Job(**given)
    writes = Writes(job.kill_at)
    model = HeldChatModel(script=script(job), kill_at_call=job.kill_at_model, hold=job.hold_model)
    parked: list[str] = []
    with Client(job.target) as client:
        try:
            out = _deliver(job, Actonce(client, rule=RULE), model, writes)
            if isinstance(out, Parked):
                state = out.items[0].reason
                parked = [item.id for item in out.items]
            else:
                state = "done"
        except Exception as error:
            cause = actonce_cause(error)
            if cause is None:
                raise
            state = cause.reason
    done = {"state": state, "writes": writes.count, "model_calls": model.calls, "parked": parked}
    Path(job.result).write_text(json.dumps(done))
