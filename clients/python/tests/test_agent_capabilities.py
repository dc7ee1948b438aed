"""The harness holds the token, the agent one attempt: against a real sidecar started with
--api-token-file and --agent-capabilities, a client with no token makes an attempt's handle
from the id and capability its harness handed it, and every call of that attempt carries the
capability; it cannot begin a run, fence one, or reach another attempt."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from actonce_client import ActonceError, Attempt, Client, Effect, FailureClass, Outcome
from actonce_client.aio import AsyncClient
from actonce_client.deliveries import Lease, delivering
from actonce_client.testing import LocalSidecar, free_port
from actonce_client.tool_calls import ToolCall

TOKEN = "harness-t0ken-8d2a"
RULE = "triage"


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSidecar]:
    token = tmp_path_factory.mktemp("token") / "api.token"
    token.write_text(TOKEN + "\n")
    args = ["--api-token-file", str(token), "--agent-capabilities", "true"]
    with LocalSidecar(args=args) as sidecar:
        yield sidecar


@pytest.fixture(autouse=True)
def no_token_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACTONCE_API_TOKEN_FILE", raising=False)
    monkeypatch.delenv("ACTONCE_API_TOKEN", raising=False)


@pytest.fixture
def harness(sidecar: LocalSidecar) -> Iterator[Client]:
    with Client(sidecar.target, api_token=TOKEN) as client:
        yield client


@pytest.fixture
def agent(sidecar: LocalSidecar) -> Iterator[Client]:
    """The agent's client: no token at all."""
    with Client(sidecar.target) as client:
        yield client


def _run() -> str:
    return f"run-{uuid.uuid4()}"


def handed(agent: Client, begun: Attempt) -> Attempt:
    """What the agent makes of what its harness handed it: the ids and the capability."""
    return agent.attempt(begun.id, run_id=begun.run_id, rule=begun.rule,
                         id_scheme_version=begun.id_scheme_version,
                         capability=begun.capability)  # fmt: skip


def refused(call: object, reason: str) -> ActonceError:
    assert callable(call)
    with pytest.raises(ActonceError) as raised:
        call()
    assert (raised.value.reason, raised.value.failure_class) == (reason, FailureClass.PERMANENT)
    return raised.value


def test_the_agent_acts_in_its_attempt_with_its_capability_alone(
    harness: Client, agent: Client
) -> None:
    begun = harness.begin(_run(), RULE)
    assert begun.capability
    mine = handed(agent, begun)
    made = mine.create("ticket", {"n": 1})
    assert made.outcome is Outcome.APPLIED
    assert mine.read_artifact(made.id).data == {"n": 1}
    step = mine.begin_step("lookup", Effect.READ_ONLY, {"q": 1})
    mine.end_step(step.id, {"found": True})
    mine.extend_lease(datetime.now(UTC) + timedelta(minutes=5))
    assert mine.end().applied >= 1


def test_the_agent_cannot_begin_fence_or_reach_another_attempt(
    harness: Client, agent: Client
) -> None:
    run = _run()
    begun = harness.begin(run, RULE)
    other = harness.begin(_run(), RULE)
    theirs = other.create("invoice", {"status": "due"})
    refused(lambda: agent.begin(_run(), RULE), "UNAUTHENTICATED")
    refused(lambda: agent.begin(run, RULE, capability=begun.capability), "CAPABILITY_REFUSED")
    wrong = agent.attempt(other.id, run_id=other.run_id, rule=RULE, capability=begun.capability)
    refused(lambda: wrong.read_artifact(theirs.id), "CAPABILITY_REFUSED")
    refused(lambda: wrong.edit(theirs.id, "/status", "paid"), "CAPABILITY_REFUSED")
    refused(lambda: wrong.end(), "CAPABILITY_REFUSED")
    # Nothing changed: the invoice as it was, and the harness's attempt neither fenced nor ended.
    assert other.read_artifact(theirs.id).data == {"status": "due"}
    assert handed(agent, begun).create("ticket", {"n": 2}).outcome is Outcome.APPLIED


def test_the_agent_begins_its_deliverys_tool_calls(harness: Client, agent: Client) -> None:
    run = _run()
    delivery = harness.begin(run, RULE)
    lease = Lease(datetime.now(UTC) + timedelta(minutes=5))
    with delivering(agent, run, RULE, lease, attempt=handed(agent, delivery)) as inside:
        tool = inside.begin_tool(agent, "call-1", lease_deadline=lease.deadline)
        assert tool.capability and tool.capability != delivery.capability
        assert tool.create("ticket", {"tool": 1}).outcome is Outcome.APPLIED

        # The asyncio side of the delivery carries the delivery's capability too.
        async def from_the_loop() -> Outcome:
            attempt = inside.async_attempt()
            written = await attempt.create("ticket", {"loop": 1})
            await inside.aclose()
            return written.outcome

        assert asyncio.run(from_the_loop()) is Outcome.APPLIED


def test_the_asyncio_client_carries_the_capability(sidecar: LocalSidecar, harness: Client) -> None:
    begun = harness.begin(_run(), RULE)

    async def act() -> Outcome:
        async with AsyncClient(sidecar.target) as agent:
            mine = agent.attempt(begun.id, run_id=begun.run_id, rule=RULE,
                                 id_scheme_version=begun.id_scheme_version,
                                 capability=begun.capability)  # fmt: skip
            scoped = await agent.begin(begun.run_id, RULE, scope="call-2",
                                       delivery_attempt_id=begun.id,
                                       lease_deadline=datetime.now(UTC) + timedelta(minutes=5),
                                       capability=begun.capability)  # fmt: skip
            await scoped.create("ticket", {"scoped": 1})
            return (await mine.create("ticket", {"async": 1})).outcome

    assert asyncio.run(act()) is Outcome.APPLIED


# -- the framework integrations: each delivers in an attempt the harness handed over --------


def _noting(actonce: Any) -> Any:
    """The tool each framework's agent calls once: a note made in its tool call's attempt."""

    def note(text: str, call: ToolCall) -> str:
        """Write a note."""
        return str(call.attempt.create("note", {"text": text}).id)

    return actonce.tool(note)


def test_langgraph_delivers_in_the_handed_attempt(
    harness: Client, agent: Client, tmp_path: Path
) -> None:
    from langchain_core.messages import ToolMessage
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition
    from scripted_model import DONE, ScriptedChatModel, turn

    from actonce_client.langgraph import Actonce, deliver

    run = _run()
    note = _noting(Actonce(agent, rule=RULE))
    model = ScriptedChatModel(script=[turn(("call-1", "note", {"text": "lg"})), DONE])
    graph = StateGraph(MessagesState)
    graph.add_node("model", lambda state: {"messages": [model.invoke(state["messages"])]})
    graph.add_node("tools", ToolNode([note]))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    begun = harness.begin(run, RULE)
    with SqliteSaver.from_conn_string(str(tmp_path / "checkpoints.db")) as saver:
        app = graph.compile(checkpointer=saver)
        out = deliver(app, run, "thread-1", {"messages": [("user", "go")]},
                      attempt=handed(agent, begun))  # fmt: skip
    (answer,) = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert str(answer.content).startswith("art_"), answer.content


def test_the_agents_sdk_delivers_in_the_handed_attempt(harness: Client, agent: Client) -> None:
    from agents import Agent, RunResult, set_tracing_disabled
    from scripted_agents_model import ScriptedModel

    from actonce_client.openai_agents import Actonce, deliver

    set_tracing_disabled(True)
    run = _run()
    note = _noting(Actonce(agent, rule=RULE))
    sdk_agent = Agent(name="noter", tools=[note],
                      model=ScriptedModel([[("note", {"text": "sdk"})], []]))  # fmt: skip
    result = deliver(sdk_agent, run, "go", attempt=handed(agent, harness.begin(run, RULE)))
    assert isinstance(result, RunResult), result
    outputs = [i.output for i in result.new_items if i.type == "tool_call_output_item"]
    assert len(outputs) == 1 and str(outputs[0]).startswith("art_"), outputs


def test_pydantic_ai_delivers_in_the_handed_attempt(harness: Client, agent: Client) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.messages import (
        ModelMessage,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from actonce_client.pydantic_ai import Actonce, deliver

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        told = [p for m in messages for p in getattr(m, "parts", ())
                if isinstance(p, ToolReturnPart)]  # fmt: skip
        if not told:
            return ModelResponse(parts=[ToolCallPart("note", {"text": "pyd"},
                                                     tool_call_id="call_1")])  # fmt: skip
        return ModelResponse(parts=[TextPart(str(told[-1].content))])

    run = _run()
    note = _noting(Actonce(agent, rule=RULE))
    pyd_agent = Agent(FunctionModel(answer), tools=[note], output_type=str)
    result = deliver(pyd_agent, run, "go", attempt=handed(agent, harness.begin(run, RULE)))
    assert result.output.startswith("art_"), result


def test_a_handed_attempt_of_another_run_is_refused(harness: Client, agent: Client) -> None:
    lease = Lease(datetime.now(UTC) + timedelta(minutes=5))
    other = handed(agent, harness.begin(_run(), RULE))
    with (
        pytest.raises(ValueError, match="needs an unscoped attempt of it"),
        delivering(agent, _run(), RULE, lease, attempt=other),
    ):
        pass


@dataclass(frozen=True)
class _McpRequest:
    """What langchain-mcp-adapters hands a tool interceptor: the call's runtime and headers."""

    runtime: Any
    headers: dict[str, str] | None

    def override(self, **changes: Any) -> _McpRequest:
        return replace(self, **changes)


def test_an_mcp_session_of_a_handed_delivery_carries_its_capability(tmp_path: Path) -> None:
    from actonce_client.langgraph import mcp_scope

    token = tmp_path / "api.token"
    token.write_text(TOKEN + "\n")
    mcp = f"127.0.0.1:{free_port()}"
    args = ["--api-token-file", str(token), "--agent-capabilities", "true", "--mcp-listen", mcp]
    with (
        LocalSidecar(args=args) as sidecar,
        Client(sidecar.target, api_token=TOKEN) as harness,
        Client(sidecar.target) as agent,
    ):
        run = _run()
        delivery = harness.begin(run, RULE)
        answered: list[tuple[int, Any]] = []

        async def send(request: _McpRequest) -> Any:
            # The tool call as the MCP SDK's client sends it, with the headers given.
            call = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "create", "arguments": {"kind": "note", "data": {}}},
            }
            headers = {
                "content-type": "application/json",
                "accept": "application/json, text/event-stream",
                **(request.headers or {}),
            }
            sent = urllib.request.Request(f"http://{mcp}/mcp", json.dumps(call).encode(),
                                          headers, method="POST")  # fmt: skip
            try:
                with urllib.request.urlopen(sent, timeout=30) as response:
                    answered.append((response.status, json.loads(response.read())))
            except urllib.error.HTTPError as refused:
                answered.append((refused.code, refused.read()))
            return None

        runtime = SimpleNamespace(config={}, tool_call_id="call_1")
        lease = Lease(datetime.now(UTC) + timedelta(minutes=5))
        with delivering(agent, run, RULE, lease, attempt=handed(agent, delivery)):
            asyncio.run(mcp_scope()(_McpRequest(runtime, None), send))
        ((status, body),) = answered
        assert status == 200, body
        assert body["result"]["structuredContent"]["outcome"] == "OUTCOME_APPLIED", body
