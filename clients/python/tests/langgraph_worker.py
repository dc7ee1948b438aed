"""A queue worker that runs a LangGraph agent on actonce: one delivery of a run per
process, killed with SIGKILL at its k-th write when the test says so.

Its tools make the writes an agent makes: a ticket and a notice in the store, and
charges through the card processor (tests/card_processor.py), keyed by their step
ids, or unkeyed and so non-idempotent. Each write counts; the k-th kills the
process as soon as it has landed, before the agent hears of it.
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
from pathlib import Path
from typing import Any, cast

from card_processor import charge
from delivery import Job, TransientError, Writes
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.pregel import Pregel
from langgraph.types import Command, interrupt
from scripted_model import ScriptedChatModel, turn

from actonce_client import Client, Effect
from actonce_client.errors import ActonceError
from actonce_client.langgraph import (
    Actonce,
    ToolCall,
    deliver,
    handle_tool_error,
    retry_policy,
)

RULE = "billing-agent"


def build(job: Job, client: Client, writes: Writes) -> Pregel[Any, Any, Any, Any]:
    actonce = Actonce(client, rule=RULE)
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

    script = SCRIPTS[job.scenario]
    model = ScriptedChatModel(script=script)
    tools = [open_ticket, flaky_notice, charge_card, charge_approved]
    saver = SqliteSaver(sqlite3.connect(job.checkpoints, check_same_thread=False))
    if job.scenario.startswith("create_agent"):
        return create_agent(model, tools, checkpointer=saver)

    def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
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
    return graph.compile(checkpointer=saver)


DONE = AIMessage("done")
SCRIPTS: dict[str, list[AIMessage]] = {
    # No tool call: what warm() runs.
    "warm": [DONE],
    "create_agent-warm": [DONE],
    # One turn, three tool calls at once; two of them make the same writes.
    "parallel": [
        turn(
            ("call-a", "open_ticket", {"title": "Disk full"}),
            ("call-b", "open_ticket", {"title": "Disk full"}),
            ("call-c", "charge_card", {"customer": "ada", "cents": 500}),
        ),
        DONE,
    ],
    "create_agent": [
        turn(
            ("call-a", "open_ticket", {"title": "Disk full"}),
            ("call-b", "charge_card", {"customer": "ada", "cents": 500}),
        ),
        DONE,
    ],
    # A transient error after a notice; a charge whose connection resets once charged.
    "retry": [
        turn(
            ("call-a", "flaky_notice", {"text": "looking into it"}),
            ("call-b", "charge_card", {"customer": "bob-reset", "cents": 700}),
        ),
        DONE,
    ],
    # A charge a person approves inside its step, then a ticket.
    "approval": [
        turn(("call-a", "charge_approved", {"customer": "cy", "cents": 900})),
        turn(("call-b", "open_ticket", {"title": "Refund later"})),
        DONE,
    ],
}


def warm() -> None:
    """Run both graphs once, with no tool call and no connection, so that every
    delivery forked after it finds LangGraph's lazy imports and caches made."""
    with tempfile.TemporaryDirectory() as folder:
        for scenario in ("warm", "create_agent-warm"):
            job = Job(scenario=scenario, run_id="warm", resume=False, target="", processor="",
                      thread_id="", checkpoints=f"{folder}/{scenario}.db", result="")  # fmt: skip
            app = build(job, cast(Client, None), Writes(0))
            deliver(app, "warm", "warm", {"messages": [HumanMessage("go")]})


def run(given: dict[str, Any]) -> None:
    """One delivery of the job ``given`` (a Job's fields); what it did goes to its result."""
    job = Job(**given)
    writes = Writes(job.kill_at)
    with Client(job.target) as client:
        app = build(job, client, writes)
        first: Any = Command(resume=True) if job.resume else {"messages": [HumanMessage("go")]}
        try:
            out = deliver(app, job.run_id, f"thread-{job.run_id}", first)
            state = "interrupted" if out.get("__interrupt__") else "done"
        except ActonceError as error:
            state = error.reason
    Path(job.result).write_text(json.dumps({"state": state, "writes": writes.count}))
