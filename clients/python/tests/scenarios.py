"""The scenario grid: every framework's scenarios, and what each run must leave.

Each scenario's worker module runs one delivery per process (tests/forking_worker.py);
the kill loop (tests/kill_loop.py) kills it after every write and as every model call
starts, and delivers the job again. The framework suites run their rows with every kill;
``python clients/python/tests/grid.py`` runs the whole grid and prints what it found.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from kill_loop import SHARED_EXPECTED, Seen, World, world_of
from mcp_world import mcp_world_of

from actonce_client.testing import LocalSidecar

# The world a framework's rows run in: its sidecar (the grid's, or one of its own), its
# card processor or MCP server, and a forking worker of its worker module.
MakeWorld = Callable[[LocalSidecar, Path, str], AbstractContextManager[World]]


def _seen(title: str, customer: str, cents: int) -> Seen:
    return Seen((title,), (f"charged {customer} {cents}", f"opened a ticket: {title}"),
                ((customer, cents),))  # fmt: skip


ONE_TICKET = _seen("Disk full", "ada", 500)
ASYNC = _seen("Disk full", "eve", 400)

AGENTS = {
    **SHARED_EXPECTED,
    "handoff": _seen("Card declined", "dee", 300),
    "agents": Seen(
        ("Disk full",), ("charged gus 800", "opened a ticket: Disk full"), (("gus", 800),)
    ),
    "async": ASYNC,
    "streamed": SHARED_EXPECTED["parallel"],
}
# A branch per customer (Send), each a ticket and a charge of its own.
FANOUT = Seen(
    tuple(f"Ticket for {c}" for c in ("ada", "bob", "cy")),
    tuple(sorted([f"charged {c} {n}" for c, n in (("ada", 100), ("bob", 200), ("cy", 300))]
                 + [f"opened a ticket: Ticket for {c}" for c in ("ada", "bob", "cy")])),
    (("ada", 100), ("bob", 200), ("cy", 300)),
)  # fmt: skip
LANGGRAPH = {
    **SHARED_EXPECTED,
    "create_agent": ONE_TICKET,
    "async": ASYNC,
    "astream": ASYNC,
    # Without a checkpointer: the model's turns are durable instead.
    "parallel+nocp": SHARED_EXPECTED["parallel"],
    "retry+nocp": SHARED_EXPECTED["retry"],
    "create_agent+nocp": ONE_TICKET,
    "async+nocp": ASYNC,
    "astream+nocp": ASYNC,
    # Durable model turns asked by several tasks at once, or by one task twice.
    "fanout+nocp": FANOUT,
    "agents+nocp": Seen(
        ("Disk full",), ("charged gus 800", "opened a ticket: Disk full"), (("gus", 800),)
    ),
    "noderetry+nocp": _seen("Disk full", "fay", 600),
}
# Through the MCP gateway: a ticket, a keyed charge made twice by two tool calls, a charge
# with no key, a notice (tests/mcp_worker.py).
_MCP = Seen(("Disk full",), ("opened a ticket: Disk full",),
            (("ada", 500), ("ada", 500), ("bob", 700)))  # fmt: skip
MCP_GATEWAY = {
    "sync": _MCP,
    "async": _MCP,
    "astream": _MCP,
    "async+nocp": _MCP,
    "create_agent": _MCP,
}
PYDANTIC_AI = {
    "parallel": SHARED_EXPECTED["parallel"],
    "agents": AGENTS["agents"],
    "streamed": SHARED_EXPECTED["parallel"],
    "async": ASYNC,
}


@dataclass(frozen=True)
class Framework:
    name: str
    worker: str  # the module a forking worker runs deliveries of
    scenarios: dict[str, Seen]
    world: MakeWorld = world_of


GRID = (
    Framework("OpenAI Agents SDK", "agents_worker", AGENTS),
    Framework("LangGraph", "langgraph_worker", LANGGRAPH),
    Framework("Pydantic AI", "pydantic_ai_worker", PYDANTIC_AI),
    Framework("LangGraph, MCP gateway", "mcp_worker", MCP_GATEWAY, mcp_world_of),
)
