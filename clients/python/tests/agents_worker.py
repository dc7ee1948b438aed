"""A queue worker that runs an OpenAI Agents SDK agent on actonce: one delivery of a
run per process, killed with SIGKILL after its k-th write, or as its m-th model call
starts, when the test says so (tests/langgraph_worker.py does the same for LangGraph).

Its model is scripted as a real model answers (tests/scripted_agents_model.py): fresh
tool-call ids on every call, parallel calls shuffled, texts worded anew. Scenarios:
parallel calls, a tool's retries, a charge a person approves (resumed from the run's
saved RunState), a handoff, two agents run at once as another's tools, async tools, and a
streamed run.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from agents import Agent, Runner, RunState, Tool, set_tracing_disabled
from card_processor import charge, charge_async
from delivery import WORDINGS, Job, Siblings, TransientError, Writes
from scripted_agents_model import ScriptedModel, Turn

from actonce_client import Client, Effect
from actonce_client.errors import ActonceError
from actonce_client.openai_agents import (
    Actonce,
    AsyncToolCall,
    Parked,
    ToolCall,
    deliver,
    queue_run,
)

RULE = "billing-agent"


def build(job: Job, client: Client, writes: Writes) -> Agent[Any]:
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

    @actonce.tool(retries=2, transient=(ConnectionError,))
    def flaky_notice(text: str, call: ToolCall) -> str:
        """Post a notice; the first try in a process fails after it."""
        posted = call.attempt.notice(job.thread_id, text)
        writes.landed()
        if call.tool_call_id not in hiccups:
            hiccups.add(call.tool_call_id)
            raise TransientError("the network hiccuped")
        return posted.id

    @actonce.tool(retries=2, transient=(ConnectionError,))
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

    @actonce.tool(needs_approval=True)
    def charge_approved(customer: str, cents: int, call: ToolCall) -> str:
        """Charge a card with no idempotency key, once a person approved it."""

        def unkeyed(key: str) -> str:
            made = charge(job.processor, f"{job.run_id}-{customer}", cents, None)
            writes.landed()
            return made

        return call.step("charge_approved", {"customer": customer, "cents": cents}, unkeyed)

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

    model = ScriptedModel(SCRIPTS[job.scenario], scripts=BY_AGENT.get(job.scenario),
                          kill_at_call=job.kill_at_model)  # fmt: skip
    tools: list[Tool] = [open_ticket, flaky_notice, charge_card, charge_approved,
                         open_ticket_async, charge_card_async, charge_unkeyed]  # fmt: skip
    billing = Agent(name="billing", instructions="Bill.", tools=tools, model=model)
    if job.scenario == "agents":
        return manager(model, tools)
    if job.scenario != "handoff":
        return billing
    return Agent(name="triage", instructions="Route.", handoffs=[billing], model=model,
                 tools=[open_ticket])  # fmt: skip


def manager(model: ScriptedModel, tools: list[Tool]) -> Agent[Any]:
    """Two agents on one model, run at once as the tools of a third: each model call of
    theirs a turn of the delivery, in whichever order the two reach the model."""
    billing = Agent(name="billing", instructions=AGENTS["billing"], tools=tools, model=model)
    support = Agent(name="support", instructions=AGENTS["support"], tools=tools, model=model)
    return Agent(name="manager", instructions=AGENTS["manager"], model=model, tools=[
        billing.as_tool("ask_billing", "Ask the billing agent."),
        support.as_tool("ask_support", "Ask the support agent."), tools[0],
    ])  # fmt: skip


AGENTS = {"manager": "Delegate.", "billing": "You charge cards.", "support": "You open tickets."}
DISK, CARD = WORDINGS["Disk full"], WORDINGS["Card declined"]
PARALLEL: list[Turn] = [
    [("open_ticket", {"title": DISK}), ("open_ticket", {"title": DISK}),
     ("charge_card", {"customer": "ada", "cents": 500})],
    [],
]  # fmt: skip
SCRIPTS: dict[str, list[Turn]] = {
    "warm": [[]],  # no tool call: what warm() runs
    "parallel": PARALLEL,
    "streamed": PARALLEL,
    "retry": [
        [("flaky_notice", {"text": WORDINGS["looking into it"]}),
         ("charge_card", {"customer": "bob-reset", "cents": 700})],
        [],
    ],
    "approval": [
        [("charge_approved", {"customer": "cy", "cents": 900})],
        [("open_ticket", {"title": "Refund later"})],
        [],
    ],
    "handoff": [
        [("transfer_to_billing", {})],
        [("open_ticket", {"title": CARD}), ("charge_card", {"customer": "dee", "cents": 300})],
        [],
    ],
    "async": [
        [("open_ticket_async", {"title": DISK}),
         ("charge_card_async", {"customer": "eve", "cents": 400})],
        [],
    ],
    # Three charges at once, none keyed; killed with one in flight and one not yet sent.
    "siblings": [
        [("charge_unkeyed", {"customer": "ada", "cents": 100}),
         ("charge_unkeyed", {"customer": "bob", "cents": 200}),
         ("charge_unkeyed", {"customer": "cy", "cents": 300})],
        [],
    ],
}  # fmt: skip


SCRIPTS["agents"] = [[]]
BY_AGENT: dict[str, dict[str, list[Turn]]] = {
    "agents": {
        AGENTS["manager"]: [
            [("ask_billing", {"input": "Charge gus 800"}),
             ("ask_support", {"input": "The disk is full"})],
            [],
        ],
        AGENTS["billing"]: [[("charge_card", {"customer": "gus", "cents": 800})], []],
        AGENTS["support"]: [[("open_ticket", {"title": DISK})], []],
    },
}  # fmt: skip


def warm() -> None:
    """Run the agent once, with no tool call and no connection, so that every
    delivery forked after it finds the SDK's lazy imports and caches made."""
    set_tracing_disabled(True)
    job = Job(scenario="warm", run_id="warm", resume=False, target="", processor="",
              thread_id="", checkpoints="", result="")  # fmt: skip
    agent = build(job, Client("127.0.0.1:1"), Writes(0))
    with queue_run("warm"):
        Runner.run_sync(agent, "go")
    # Runner.run_sync leaves its event loop open for the next run on this thread;
    # a forked child must not share its epoll and self-pipe with this process.
    loop = asyncio.get_event_loop_policy().get_event_loop()
    loop.close()
    asyncio.set_event_loop(None)


def run(given: dict[str, Any]) -> None:
    """One delivery of the job ``given`` (a Job's fields); what it did goes to its result.

    A run that pauses for approval keeps its state beside its checkpoints; the
    delivery that resumes it approves every pending call, as the person did."""
    job = Job(**given)
    set_tracing_disabled(True)
    writes = Writes(job.kill_at)
    paused = Path(job.checkpoints).with_suffix(".paused.json")
    parked: list[str] = []
    with Client(job.target) as client:
        agent = build(job, client, writes)
        first: Any = "go"
        if job.resume:
            first = asyncio.run(RunState.from_string(agent, paused.read_text()))
            for item in first.get_interruptions():
                first.approve(item)
        try:
            result = deliver(agent, job.run_id, first, stream=job.scenario == "streamed")
            if isinstance(result, Parked):
                state = result.items[0].reason
                parked = [item.id for item in result.items]
            elif result.interruptions:
                paused.write_text(result.to_state().to_string())
                state = "interrupted"
            else:
                state = "done"
        except ActonceError as error:
            state = error.reason
    Path(job.result).write_text(json.dumps({"state": state, "writes": writes.count,
                                            "model_calls": model_calls(agent),
                                            "parked": parked}))  # fmt: skip


def model_calls(agent: Agent[Any]) -> int:
    model = agent.model
    return model.calls if isinstance(model, ScriptedModel) else 0
