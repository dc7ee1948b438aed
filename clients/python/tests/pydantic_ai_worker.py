"""A queue worker that runs a Pydantic AI agent on actonce: one delivery of a run per
process, killed with SIGKILL after its k-th write, or as its m-th model call starts,
when the test says so. Its model is a FunctionModel scripted as a real model answers:
fresh tool-call ids on every call, parallel calls shuffled, texts worded anew."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from card_processor import charge, charge_async
from delivery import WORDINGS, Job, Siblings, Writes
from pydantic_ai import Agent, Tool
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from actonce_client import Client, Effect
from actonce_client.errors import ActonceError
from actonce_client.pydantic_ai import (
    Actonce,
    AsyncToolCall,
    DurableModel,
    Parked,
    ToolCall,
    deliver,
)

RULE = "billing-agent"
Turn = list[tuple[str, dict[str, Any]]]


class Script:
    """The model's answers, and how many times it was asked in this process."""

    def __init__(
        self, turns: list[Turn], kill_at_call: int, by_agent: dict[str, list[Turn]] | None = None
    ) -> None:
        self.turns = turns
        self.by_agent = by_agent or {}  # an agent's script, by its instructions
        self.kill_at_call = kill_at_call
        self.calls = 0

    def _calls(self, messages: list[ModelMessage], info: AgentInfo) -> list[ToolCallPart]:
        self.calls += 1
        if self.calls == self.kill_at_call:
            os.kill(os.getpid(), signal.SIGKILL)
        turns = self.by_agent.get(info.instructions or "", self.turns)
        calls = list(turns[sum(isinstance(m, ModelResponse) for m in messages)])
        random.shuffle(calls)
        return [
            ToolCallPart(name, {k: random.choice(v) if isinstance(v, tuple) else v
                                for k, v in args.items()},
                         tool_call_id=f"call_{uuid.uuid4().hex[:12]}")
            for name, args in calls
        ]  # fmt: skip

    def answer(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls = self._calls(messages, info)
        return ModelResponse(parts=list(calls) if calls else [TextPart("done")])

    async def stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        calls = self._calls(messages, info)
        if not calls:
            yield "done"
            return
        made: DeltaToolCalls = {
            i: DeltaToolCall(c.tool_name, json.dumps(c.args), tool_call_id=c.tool_call_id)
            for i, c in enumerate(calls)
        }
        yield made


def build(job: Job, client: Client, writes: Writes) -> tuple[Agent[None, str], Script]:
    actonce = Actonce(client, rule=RULE)
    siblings = Siblings(job)

    @actonce.tool
    def open_ticket(title: str, call: ToolCall) -> str:
        """Open a ticket and tell the thread."""
        ticket = call.attempt.create("ticket", {"title": title, "run": job.run_id})
        writes.landed()
        call.attempt.notice(job.thread_id, f"opened a ticket: {title}")
        writes.landed()
        return ticket.id

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

    script = Script(SCRIPTS[job.scenario], job.kill_at_model, BY_AGENT.get(job.scenario))
    model = FunctionModel(script.answer, stream_function=script.stream)
    tools = [open_ticket, charge_card, open_ticket_async, charge_card_async, charge_unkeyed]
    if job.scenario == "agents":
        return delegating(model, tools), script
    return Agent(model, tools=tools, output_type=str), script


def delegating(model: FunctionModel, tools: list[Tool[Any]]) -> Agent[None, str]:
    """An agent whose tool runs two agents at once, on one model under one turn name:
    each model request of theirs a turn of the delivery, whichever reaches it first."""
    billing = Agent(DurableModel(model), tools=tools, output_type=str,
                    instructions=AGENTS["billing"])  # fmt: skip
    support = Agent(DurableModel(model), tools=tools, output_type=str,
                    instructions=AGENTS["support"])  # fmt: skip

    async def ask_both() -> str:
        """Ask the billing and the support agents at once."""
        # Which of the two reaches the model first is the scheduler's: another each time.
        asks = [(billing, "Charge gus 800"), (support, DISK[0])]
        random.shuffle(asks)
        said = await asyncio.gather(*(agent.run(prompt) for agent, prompt in asks))
        return "; ".join(sorted(r.output for r in said))

    return Agent(model, tools=[Tool(ask_both), tools[0]], output_type=str,
                 instructions=AGENTS["manager"])  # fmt: skip


DISK = WORDINGS["Disk full"]
PARALLEL: list[Turn] = [
    [("open_ticket", {"title": DISK}), ("open_ticket", {"title": DISK}),
     ("charge_card", {"customer": "ada", "cents": 500})],
    [],
]  # fmt: skip
SCRIPTS: dict[str, list[Turn]] = {
    "parallel": PARALLEL,
    "streamed": PARALLEL,
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


AGENTS = {"manager": "Delegate.", "billing": "You charge cards.", "support": "You open tickets."}
SCRIPTS["agents"] = [[]]
BY_AGENT: dict[str, dict[str, list[Turn]]] = {
    "agents": {
        AGENTS["manager"]: [[("ask_both", {})], []],
        AGENTS["billing"]: [[("charge_card", {"customer": "gus", "cents": 800})], []],
        AGENTS["support"]: [[("open_ticket", {"title": DISK})], []],
    },
}


def warm() -> None:
    """Import Pydantic AI's lazy parts before any fork."""
    job = Job(scenario="parallel", run_id="warm", resume=False, target="", processor="",
              thread_id="", checkpoints="", result="")  # fmt: skip
    build(job, Client("127.0.0.1:1"), Writes(0))


async def _ignore(_ctx: Any, events: AsyncIterator[Any]) -> None:
    async for _event in events:
        pass


def run(given: dict[str, Any]) -> None:
    """One delivery of the job ``given`` (a Job's fields); what it did goes to its result."""
    job = Job(**given)
    writes = Writes(job.kill_at)
    parked: list[str] = []
    with Client(job.target) as client:
        agent, script = build(job, client, writes)
        streamed = {"event_stream_handler": _ignore} if job.scenario == "streamed" else {}
        try:
            out = deliver(agent, job.run_id, "go", **streamed)
            state = out.items[0].reason if isinstance(out, Parked) else "done"
            parked = [item.id for item in out.items] if isinstance(out, Parked) else []
        except ActonceError as error:
            state = error.reason
    Path(job.result).write_text(json.dumps({"state": state, "writes": writes.count,
                                            "model_calls": script.calls,
                                            "parked": parked}))  # fmt: skip
