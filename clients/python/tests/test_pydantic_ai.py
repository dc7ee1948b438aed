"""A Pydantic AI agent on actonce, its worker killed with SIGKILL after each of its
writes and as each of its model calls starts, and the run delivered again: every write
is in the store once, and every charge is made once by the card processor.

Pydantic AI's real Agent with a FunctionModel scripted as a real model answers (fresh
tool-call ids, shuffled parallel calls, reworded texts), its requests durable model
turns, sync and async tools, a streamed run, against a real `actonce serve`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
import scenarios
from kill_loop import World, check_every_kill, world_of
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from actonce_client import Client
from actonce_client.pydantic_ai import Actonce, Parked, ToolCall, deliver
from actonce_client.testing import LocalSidecar

pytestmark = pytest.mark.timeout(180)

EXPECTED = scenarios.PYDANTIC_AI


@pytest.fixture(scope="module")
def world(sidecar: LocalSidecar, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with world_of(sidecar, tmp_path_factory.mktemp("pydantic"), "pydantic_ai_worker") as world:
        yield world


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_each_write_once_whichever_write_or_model_call_the_worker_is_killed_at(
    world: World, scenario: str
) -> None:
    assert check_every_kill(world, scenario, EXPECTED[scenario]) > 0


def _script(first: list[ToolCallPart]) -> FunctionModel:
    """A model that makes ``first`` tool calls, then answers with what it was told."""

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        told = [p for m in messages for p in getattr(m, "parts", ())
                if isinstance(p, RetryPromptPart | ToolReturnPart)]  # fmt: skip
        if not told:
            return ModelResponse(parts=list(first))
        return ModelResponse(parts=[TextPart(str(told[-1].content))])

    return FunctionModel(answer)


def test_a_refused_call_goes_back_to_the_model_and_the_run_goes_on(client: Client) -> None:
    actonce = Actonce(client, rule="editor")

    @actonce.tool
    def retitle(artifact_id: str, title: str, call: ToolCall) -> str:
        """Retitle an artifact."""
        return call.attempt.edit(artifact_id, "/title", title).id

    call = ToolCallPart("retitle", {"artifact_id": "art_missing", "title": "x"},
                        tool_call_id=f"call_{uuid.uuid4().hex}")  # fmt: skip
    agent = Agent(_script([call]), tools=[retitle], output_type=str)
    result = deliver(agent, f"run-{uuid.uuid4().hex}", "go")
    assert not isinstance(result, Parked)
    assert result.output.startswith("refused: NOT_FOUND")


def test_an_error_that_is_not_a_refusal_ends_the_run(client: Client) -> None:
    actonce = Actonce(client, rule="editor")

    @actonce.tool
    def charge(call: ToolCall) -> str:
        """Charge; its connection fails after it was sent."""
        return call.step("charge", {}, _sent_then_reset)

    made = ToolCallPart("charge", {}, tool_call_id=f"call_{uuid.uuid4().hex}")
    agent = Agent(_script([made]), tools=[charge], output_type=str)
    with pytest.raises(ConnectionResetError):
        deliver(agent, f"run-{uuid.uuid4().hex}", "go")


def _sent_then_reset(key: str) -> str:
    raise ConnectionResetError("charged, then the connection reset")


def test_a_run_stopped_by_one_tools_error_ends_after_its_siblings_steps_do(
    client: Client,
) -> None:
    # Pydantic AI raises a tool's error at once and leaves the other tool calls of the
    # turn running in their threads. Their steps may have acted: the delivery waits for
    # them to end, so that the next delivery reads their results instead of a doubt.
    actonce = Actonce(client, rule="billing")
    calls: list[float] = []

    @actonce.tool
    def fails(call: ToolCall) -> str:
        """Fail at once."""
        raise RuntimeError("the ledger of another system is down")

    @actonce.tool
    def charge_slowly(call: ToolCall) -> str:
        """Charge, with no key; the processor answers after a while."""

        def slow(key: str) -> str:
            time.sleep(1.0)
            calls.append(time.monotonic())
            return "ch_1"

        return call.step("charge_slowly", {}, slow)

    turn = [ToolCallPart("fails", {}, tool_call_id=f"call_{uuid.uuid4().hex}"),
            ToolCallPart("charge_slowly", {}, tool_call_id=f"call_{uuid.uuid4().hex}")]  # fmt: skip
    agent = Agent(_script(turn), tools=[fails, charge_slowly], output_type=str)
    run_id = f"run-{uuid.uuid4().hex}"
    with pytest.raises(RuntimeError):
        deliver(agent, run_id, "go")
    raised = time.monotonic()
    assert len(calls) == 1 and calls[0] < raised
    # Delivered again, the recorded turn makes the same calls: the charge's step ended,
    # so its result is answered without a second charge, and nothing is in doubt.
    with pytest.raises(RuntimeError):
        deliver(agent, run_id, "go")
    assert len(calls) == 1
