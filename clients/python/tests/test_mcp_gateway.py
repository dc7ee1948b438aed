"""LangGraph through actonce's MCP gateway: the grid's MCP row, every third kill.

A LangGraph agent whose tools are langchain-mcp-adapters' tools of ``actonce serve``'s MCP
front, gateway to a real payments MCP server that counts its charges (tests/mcp_world.py,
tests/mcp_worker.py), with ``mcp_scope()`` giving each tool call its scope. Its worker is
killed with SIGKILL after each of its writes and as each of its model calls starts, and the
run delivered again: each ticket, notice and charge lands once, or a charge is in doubt and
made once, never twice, never lost; sync (``deliver``) and async (``adeliver``,
``astream``), with a checkpointer and without one, and with ``create_agent``.

A delivery whose lease ran out while its model call was pending, resumed after a newer
delivery finished, makes no write through the gateway either.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import asdict, replace
from pathlib import Path

import pytest
import scenarios
from kill_loop import World, check_every_kill, new_job, seen, unprefixed
from mcp_world import CLIENT, agent_python, mcp_world_of

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


LEASE = 6.0  # seconds: the queue's visibility timeout, past the store calls' deadline (5 s)


@pytest.mark.parametrize("scenario", ["sync", "async", "async+nocp"])
def test_a_delivery_whose_lease_ran_out_at_its_model_call_makes_no_write(
    world: World, scenario: str, tmp_path: Path
) -> None:
    job = new_job(world, scenario)
    hold = tmp_path / "release"
    stale = replace(job, lease_seconds=LEASE, hold_model=str(hold),
                    result=str(tmp_path / "stale.json"))  # fmt: skip
    # Delivery A, in a process of its own, asks its model, which does not answer.
    process = subprocess.Popen(
        [str(agent_python()), "-c", "import json, sys, mcp_worker; "
         "mcp_worker.run(json.loads(sys.argv[1]))", json.dumps(asdict(stale))],
        cwd=CLIENT / "tests", env=world.forks.env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not Path(f"{hold}.pending").exists():
            said = Path(stale.result).read_text() if Path(stale.result).exists() else ""
            assert time.monotonic() < deadline and process.poll() is None, f"A never asked: {said}"
            time.sleep(0.02)
        time.sleep(LEASE)  # the queue redelivers once the lease ran out
        newer = world.forks.deliver(asdict(job))  # delivery B, to its end
        assert newer is not None and newer["state"] == "done"
        hold.touch()  # A's model answers now, naming other tool calls
        assert process.wait(60) == 0
    finally:
        if process.poll() is None:
            process.kill()
    found = json.loads(Path(stale.result).read_text())
    assert found["state"] in ("ATTEMPT_FENCED", "LEASE_EXPIRED"), found
    assert found["writes"] == 0
    assert unprefixed(job, seen(world, job)) == EXPECTED[scenario]
