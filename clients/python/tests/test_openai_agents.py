"""An OpenAI Agents SDK agent on actonce, its worker killed with SIGKILL after each
of its writes and the run delivered again: every write is in the store once, and
every charge is made once by the card processor, or is IN_DOUBT, never twice.

The SDK's real Runner and function tools, with a scripted model and no network
(tracing off), calling a real `actonce serve` over gRPC and a card processor over
HTTP; the tools and scenarios are those of tests/test_langgraph.py: parallel tool
calls in one turn, a tool's retries after a transient error and after "charged,
then reset", and a charge a person approves (the SDK's needs_approval), resumed
from the run's saved RunState.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import scenarios
from agents import Agent, RunResult, set_tracing_disabled
from kill_loop import World, check_every_kill, world_of
from scripted_agents_model import ScriptedModel

from actonce_client import Client
from actonce_client.openai_agents import Actonce, Parked, ToolCall, deliver, queue_run
from actonce_client.testing import LocalSidecar
from actonce_client.tool_calls import ToolAttempts

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def world(sidecar: LocalSidecar, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with world_of(sidecar, tmp_path_factory.mktemp("agents"), "agents_worker") as world:
        yield world


EXPECTED = scenarios.AGENTS


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_each_write_once_whichever_write_or_model_call_the_worker_is_killed_at(
    world: World, scenario: str
) -> None:
    assert check_every_kill(world, scenario, EXPECTED[scenario]) > 0


def _done(result: RunResult | Parked) -> RunResult:
    assert isinstance(result, RunResult), result
    return result


def test_a_refused_call_goes_back_to_the_model_and_the_run_goes_on(client: Client) -> None:
    set_tracing_disabled(True)
    actonce = Actonce(client, rule="editor")

    @actonce.tool
    def retitle(artifact_id: str, title: str, call: ToolCall) -> str:
        """Retitle an artifact."""
        return call.attempt.edit(artifact_id, "/title", title).id

    script = [[("retitle", {"artifact_id": "art_missing", "title": "x"})], []]
    agent = Agent(name="editor", tools=[retitle], model=ScriptedModel(script))
    result = _done(deliver(agent, "run-refused", "go"))
    outputs = [i.output for i in result.new_items if i.type == "tool_call_output_item"]
    assert len(outputs) == 1 and str(outputs[0]).startswith("refused: NOT_FOUND")
    assert result.final_output == "done"


def test_an_error_that_is_not_a_refusal_ends_the_run(client: Client) -> None:
    set_tracing_disabled(True)
    actonce = Actonce(client, rule="editor")

    @actonce.tool
    def post(call: ToolCall) -> str:
        """Post nothing: the tool has a bug."""
        raise ValueError("a bug in the tool")

    agent = Agent(name="editor", tools=[post], model=ScriptedModel([[("post", {})], []]))
    with pytest.raises(Exception) as raised:
        deliver(agent, "run-bug", "go")
    assert "a bug in the tool" in str(raised.value) + str(raised.value.__cause__)


def test_a_tool_outside_a_queue_run_refuses_to_write(client: Client) -> None:
    actonce = Actonce(client, rule="editor")

    @actonce.tool
    def post(call: ToolCall) -> str:
        """Post."""
        return call.tool_call_id

    with queue_run("run-x"):
        pass
    set_tracing_disabled(True)
    agent = Agent(name="editor", tools=[post], model=ScriptedModel([[("post", {})], []]))
    from agents import Runner

    with pytest.raises(Exception) as raised:
        Runner.run_sync(agent, "go")
    assert "queue run id" in str(raised.value) + str(raised.value.__cause__)


def test_a_tool_call_whose_delivery_a_newer_one_fenced_is_not_tried_again(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A retryable error is tried again, up to the tool's retries, each try in an attempt
    # begun anew; ATTEMPT_FENCED is not: a newer delivery of the run fenced this one, and
    # every try would meet the fence.
    set_tracing_disabled(True)
    actonce = Actonce(client, rule="editor")
    begun: list[str] = []
    begin = ToolAttempts.begin

    def counted(self: ToolAttempts, *args: Any, **kwargs: Any) -> Any:
        begun.append("begin")
        return begin(self, *args, **kwargs)

    monkeypatch.setattr(ToolAttempts, "begin", counted)

    @actonce.tool(retries=2)
    def post(call: ToolCall) -> str:
        """Post a ticket."""
        if len(begun) == 1:
            client.begin("run-fenced", "editor")  # the queue delivered the run again
        return call.attempt.create("ticket", {"title": "t"}).id

    agent = Agent(name="editor", tools=[post], model=ScriptedModel([[("post", {})], []]))
    with pytest.raises(Exception) as raised:
        deliver(agent, "run-fenced", "go")
    assert "ATTEMPT_FENCED" in str(raised.value) + str(raised.value.__cause__)
    assert begun == ["begin"]
