"""LangGraph through actonce's MCP gateway: the grid's MCP row, every third kill.

A LangGraph agent whose tools are langchain-mcp-adapters' tools of ``actonce serve``'s MCP
front, gateway to a real payments MCP server that counts its charges (tests/mcp_world.py,
tests/mcp_worker.py), with ``mcp_scope()`` giving each tool call its scope. Its worker is
killed with SIGKILL after each of its writes and as each of its model calls starts, and the
run delivered again: each ticket, notice and charge lands once, or a charge is in doubt and
made once, never twice, never lost; sync (``deliver``) and async (``adeliver``,
``astream``), with a checkpointer and without one, and with ``create_agent``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import scenarios
from kill_loop import World, check_every_kill
from mcp_world import mcp_world_of

# The first run makes the agent environment (pip, from its cache once it has one).
pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with mcp_world_of(None, tmp_path_factory.mktemp("mcp-gateway")) as world:
        yield world


EXPECTED = scenarios.MCP_GATEWAY


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_each_write_once_whichever_write_or_model_call_the_worker_is_killed_at(
    world: World, scenario: str
) -> None:
    assert check_every_kill(world, scenario, EXPECTED[scenario]) > 0
