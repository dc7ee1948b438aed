"""A queue worker that runs a LangGraph agent on actonce: one delivery of a run per
process, killed with SIGKILL after its k-th write, or as its m-th model call starts,
when the test says so.

Its tools make the writes an agent makes: a ticket and a notice in the store, and
charges through the card processor (tests/card_processor.py), keyed by their step
ids, or unkeyed and so non-idempotent. Each write counts; the k-th kills the
process as soon as it has landed, before the agent hears of it. Its model is scripted
as a real model answers (tests/scripted_model.py).

A scenario is a script, and how it runs: ``+nocp``, without a checkpointer (the model
called through durable_model); ``async`` and ``astream``, with async tools, through
``adeliver`` (ainvoke) and ``astream``; ``fanout``, ``agents`` and ``noderetry``, a
model several tasks ask at once, or one task twice (tests/langgraph_worker.py: several).
"""

from __future__ import annotations

import asyncio
import json
import random
import sqlite3
import tempfile
from pathlib import Path
from typing import Any, cast

from card_processor import charge, charge_async
from delivery import WORDINGS, Job, Siblings, TransientError, Writes
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.pregel import Pregel
from langgraph.types import Command, RetryPolicy, Send, interrupt
from scripted_model import DONE, ScriptedChatModel, Turn

from actonce_client import Client, Effect
from actonce_client.errors import ActonceError
from actonce_client.langgraph import (
    Actonce,
    AsyncToolCall,
    Parked,
    ToolCall,
    adeliver,
    astream,
    deliver,
    durable_model,
    handle_tool_error,
    retry_policy,
)

RULE = "billing-agent"


def tools_of(job: Job, client: Client, writes: Writes) -> list[BaseTool]:
    actonce = Actonce(client, rule=RULE)
    siblings = Siblings(job)
    hiccups: set[str] = set()  # tool calls that already failed once in this process

    @actonce.tool
    def open_ticket(title: str, call: ToolCall) -> str:
        """Open a ticket and tell the thread."""
        ticket = call.attempt.create("ticket", {"title": title, "run": job.run_id})
        writes.landed()
        call.attempt.notice(job.thread_id, f"opened a ticket: {title}")
        writes.landed()
        return ticket.id

    @actonce.tool
    def flaky_notice(text: str, call: ToolCall) -> str:
        """Post a notice; the first try in a process fails after it."""
        posted = call.attempt.notice(job.thread_id, text)
        writes.landed()
        if call.tool_call_id not in hiccups:
            hiccups.add(call.tool_call_id)
            raise TransientError("the network hiccuped")
        return posted.id

    @actonce.tool
    def charge_card(customer: str, cents: int, call: ToolCall) -> str:
        """Charge the customer's card, keyed by the step's id."""

        def keyed(key: str) -> str:
            made = charge(job.processor, f"{job.run_id}-{customer}", cents, key)
            writes.landed()
            return made

        charge_id = call.step(
            "charge_card", {"customer": customer, "cents": cents}, keyed,
            effect=Effect.IDEMPOTENT_WRITE,
        )  # fmt: skip
        call.attempt.notice(job.thread_id, f"charged {customer} {cents}")
        writes.landed()
        return charge_id

    @actonce.tool
    def charge_approved(customer: str, cents: int, call: ToolCall) -> str:
        """Charge a card with no idempotency key, once a person approved it."""

        def approved(key: str) -> str:
            if interrupt({"approve": f"charge {customer} {cents}"}) is not True:
                return "declined"
            made = charge(job.processor, f"{job.run_id}-{customer}", cents, None)
            writes.landed()
            return made

        return call.step("charge_approved", {"customer": customer, "cents": cents}, approved)

    @actonce.tool
    async def open_ticket_async(title: str, call: AsyncToolCall) -> str:
        """Open a ticket and tell the thread, from async code."""
        ticket = await call.attempt.create("ticket", {"title": title, "run": job.run_id})
        writes.landed()
        await call.attempt.notice(job.thread_id, f"opened a ticket: {title}")
        writes.landed()
        return ticket.id

    @actonce.tool
    async def charge_card_async(customer: str, cents: int, call: AsyncToolCall) -> str:
        """Charge the customer's card from async code, keyed by the step's id."""

        async def keyed(key: str) -> str:
            made = await charge_async(job.processor, f"{job.run_id}-{customer}", cents, key)
            writes.landed()
            return made

        charge_id = await call.step(
            "charge_card", {"customer": customer, "cents": cents}, keyed,
            effect=Effect.IDEMPOTENT_WRITE,
        )  # fmt: skip
        await call.attempt.notice(job.thread_id, f"charged {customer} {cents}")
        writes.landed()
        return charge_id

    @actonce.tool
    def charge_unkeyed(customer: str, cents: int, call: ToolCall) -> str:
        """Charge the customer's card with no idempotency key."""
        return siblings.charge_unkeyed(call, customer, cents)

    return [open_ticket, flaky_notice, charge_card, charge_approved, open_ticket_async,
            charge_card_async, charge_unkeyed]  # fmt: skip


def build(
    job: Job, client: Client, writes: Writes, saver: BaseCheckpointSaver[Any] | None = None
) -> tuple[Pregel[Any, Any, Any, Any], Any]:
    """The graph of the job's scenario (``saver``: its checkpointer, else a SQLite file's),
    and its scripted model."""
    script, _, how = job.scenario.partition("+")
    model = ScriptedChatModel(script=SCRIPTS.get(script, DONE_ONLY),
                              scripts=BY_REQUEST.get(script, {}),
                              kill_at_call=job.kill_at_model)  # fmt: skip
    tools = tools_of(job, client, writes)
    checkpointed = how != "nocp"
    if checkpointed and saver is None:
        saver = SqliteSaver(sqlite3.connect(job.checkpoints, check_same_thread=False))
    if not checkpointed:
        saver = None
    chat: Any = model if checkpointed else durable_model(model)
    if script.startswith("create_agent"):
        return create_agent(chat, tools, checkpointer=saver), model
    if script in BY_REQUEST or script == "noderetry":
        return several(job, script, chat.bind_tools(tools), tools, saver), model
    bound = chat.bind_tools(tools)

    def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [bound.invoke(state["messages"])]}

    async def acall_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await bound.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    is_async = script in ("async", "astream")
    graph.add_node("model", acall_model if is_async else call_model)
    graph.add_node(
        "tools",
        ToolNode(tools, handle_tool_errors=handle_tool_error),
        retry_policy=retry_policy(
            transient=(ConnectionError,), initial_interval=0.01, jitter=False
        ),
    )
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    return graph.compile(checkpointer=saver), model


def agent_loop(
    job: Job, bound: Any, tools: list[BaseTool], system: str = "", hiccup: bool = False
) -> Any:
    """An agent as a graph of its own: its model, then its tools, until it answers.
    ``hiccup``: the model's node fails once in the run after its model answered, and its
    RetryPolicy runs it again; the redelivery of a run killed later does not fail."""
    failed_once = Path(job.checkpoints).with_suffix(".hiccup")

    def call_model(state: MessagesState) -> dict[str, Any]:
        asked = [SystemMessage(system), *state["messages"]] if system else state["messages"]
        answer = bound.invoke(asked)
        if hiccup and not failed_once.exists():
            failed_once.touch()
            raise TransientError("the connection reset after the model answered")
        return {"messages": [answer]}

    graph = StateGraph(MessagesState)
    node_retry = RetryPolicy(retry_on=TransientError, initial_interval=0.01, jitter=False)
    graph.add_node("model", call_model, retry_policy=node_retry)
    graph.add_node(
        "tools",
        ToolNode(tools, handle_tool_errors=handle_tool_error),
        retry_policy=retry_policy(transient=(ConnectionError,), initial_interval=0.01,
                                  jitter=False),
    )  # fmt: skip
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    return graph.compile()


def several(
    job: Job, script: str, bound: Any, tools: list[BaseTool],
    saver: BaseCheckpointSaver[Any] | None,
) -> Pregel[Any, Any, Any, Any]:  # fmt: skip
    """The graphs whose model several tasks ask, or one task twice: ``fanout``, a branch
    per customer (``Send``), in another order on each delivery; ``agents``, two agents at
    once; ``noderetry``, an agent whose model's node fails once after its model answered."""
    graph = StateGraph(MessagesState)
    if script == "fanout":
        graph.add_node("branch", agent_loop(job, bound, tools))
        customers = list(FANOUT)
        random.shuffle(customers)
        graph.add_conditional_edges(START, lambda _: [
            Send("branch", {"messages": [HumanMessage(ask)]}) for ask in customers
        ])  # fmt: skip
    elif script == "agents":
        for name, system in AGENTS.items():
            graph.add_node(name, agent_loop(job, bound, tools, system))
            graph.add_edge(START, name)
    else:
        graph.add_node("agent", agent_loop(job, bound, tools, hiccup=True))
        graph.add_edge(START, "agent")
    return graph.compile(checkpointer=saver)


DISK = WORDINGS["Disk full"]
PARALLEL: list[Turn] = [
    [("open_ticket", {"title": DISK}), ("open_ticket", {"title": DISK}),
     ("charge_card", {"customer": "ada", "cents": 500})],
    DONE,
]  # fmt: skip
ASYNC: list[Turn] = [
    [("open_ticket_async", {"title": DISK}),
     ("charge_card_async", {"customer": "eve", "cents": 400})],
    DONE,
]  # fmt: skip
SCRIPTS: dict[str, list[Turn]] = {
    # No tool call: what warm() runs.
    "warm": [DONE],
    "create_agent-warm": [DONE],
    # One turn, three tool calls at once; two of them make the same writes.
    "parallel": PARALLEL,
    "create_agent": [
        [("open_ticket", {"title": DISK}), ("charge_card", {"customer": "ada", "cents": 500})],
        DONE,
    ],
    # A transient error after a notice; a charge whose connection resets once charged.
    "retry": [
        [("flaky_notice", {"text": WORDINGS["looking into it"]}),
         ("charge_card", {"customer": "bob-reset", "cents": 700})],
        DONE,
    ],
    # A charge a person approves inside its step, then a ticket.
    "approval": [
        [("charge_approved", {"customer": "cy", "cents": 900})],
        [("open_ticket", {"title": "Refund later"})],
        DONE,
    ],
    "async": ASYNC,
    "astream": ASYNC,
    # Three charges at once, none keyed; killed with one in flight and one not yet sent.
    "siblings": [
        [("charge_unkeyed", {"customer": "ada", "cents": 100}),
         ("charge_unkeyed", {"customer": "bob", "cents": 200}),
         ("charge_unkeyed", {"customer": "cy", "cents": 300})],
        DONE,
    ],
}  # fmt: skip


DONE_ONLY: list[Turn] = [DONE]
# A branch per customer, each asked about its own: a ticket and a charge each.
FANOUT: dict[str, list[Turn]] = {
    f"help {customer}": [
        [("open_ticket", {"title": f"Ticket for {customer}"}),
         ("charge_card", {"customer": customer, "cents": cents})],
        DONE,
    ]
    for customer, cents in (("ada", 100), ("bob", 200), ("cy", 300))
}  # fmt: skip
# Two agents at once, on one model: each its own system prompt, its own tools' calls.
AGENTS = {"billing": "You charge cards.", "support": "You open tickets."}
BY_REQUEST: dict[str, dict[str, list[Turn]]] = {
    "fanout": FANOUT,
    "agents": {
        AGENTS["billing"]: [[("charge_card", {"customer": "gus", "cents": 800})], DONE],
        AGENTS["support"]: [[("open_ticket", {"title": DISK})], DONE],
    },
}
SCRIPTS["noderetry"] = [
    [("open_ticket", {"title": DISK}), ("charge_card", {"customer": "fay", "cents": 600})],
    DONE,
]  # fmt: skip


def warm() -> None:
    """Run both graphs once, with no tool call and no connection, so that every
    delivery forked after it finds LangGraph's lazy imports and caches made."""
    with tempfile.TemporaryDirectory() as folder:
        for scenario in ("warm", "create_agent-warm"):
            job = Job(scenario=scenario, run_id="warm", resume=False, target="", processor="",
                      thread_id="", checkpoints=f"{folder}/{scenario}.db", result="")  # fmt: skip
            app, _ = build(job, cast(Client, None), Writes(0))
            config: RunnableConfig = {"configurable": {"thread_id": "warm",
                                                       "actonce_run_id": "warm"}}  # fmt: skip
            app.invoke({"messages": [HumanMessage("go")]}, config)


async def _deliver_async(job: Job, client: Client, writes: Writes, first: Any) -> Any:
    """A delivery through adeliver (ainvoke) or astream, on an async checkpointer."""
    thread = f"thread-{job.run_id}"
    async with AsyncSqliteSaver.from_conn_string(job.checkpoints) as saver:
        app, model = build(job, client, writes, saver)
        if job.scenario.startswith("async"):
            return await adeliver(app, job.run_id, thread, first), model
        last: Any = None
        async for chunk in astream(app, job.run_id, thread, first, stream_mode="values"):
            last = chunk
        return last, model


def _deliver(job: Job, client: Client, writes: Writes, first: Any) -> tuple[Any, Any]:
    if job.scenario.partition("+")[0] in ("async", "astream"):
        found: tuple[Any, Any] = asyncio.run(_deliver_async(job, client, writes, first))
        return found
    app, model = build(job, client, writes)
    return deliver(app, job.run_id, f"thread-{job.run_id}", first), model


def run(given: dict[str, Any]) -> None:
    """One delivery of the job ``given`` (a Job's fields); what it did goes to its result."""
    job = Job(**given)
    writes = Writes(job.kill_at)
    models: list[Any] = []
    parked: list[str] = []
    with Client(job.target) as client:
        first: Any = Command(resume=True) if job.resume else {"messages": [HumanMessage("go")]}
        try:
            out, model = _deliver(job, client, writes, first)
            models.append(model)
            if isinstance(out, Parked):
                state = out.items[0].reason
                parked = [item.id for item in out.items]
            else:
                state = "interrupted" if out.get("__interrupt__") else "done"
        except ActonceError as error:
            state = error.reason
    calls = models[0].calls if models else 0
    Path(job.result).write_text(json.dumps({"state": state, "writes": writes.count,
                                            "model_calls": calls, "parked": parked}))  # fmt: skip
