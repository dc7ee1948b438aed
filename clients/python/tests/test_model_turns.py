"""Durable model turns keyed by what was asked (docs/model-turns.md).

The neutral form and its digest against the spec's test vectors, which every client
checks; each integration's messages in that form, with tool-call ids named anew on every
call; and, against a real sidecar, LangGraph graphs without a checkpointer whose model
is asked through durable_model: ``Send`` branches that reach the model in another order
on the redelivery, a node run again by its RetryPolicy after its model answered, two
branches asking exactly the same, and a run recorded under the earlier positional key.
"""

from __future__ import annotations

import json
import operator
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.tool import ToolCall
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import RetryPolicy, Send
from pydantic import Field

from actonce_client import Client, Effect, model_turns
from actonce_client import langgraph as on_langgraph
from actonce_client.deliveries import MODEL_TURN, Lease, delivering
from actonce_client.langgraph import Actonce, DurableChatModel, deliver, durable_model

pytestmark = pytest.mark.timeout(120)

VECTORS = Path(__file__).resolve().parents[3] / "docs" / "model-turn-vectors.json"
RULE = "support"
WAIT = 20.0  # seconds a branch waits for its turn at most: far more than a delivery takes


# -- the spec's vectors -----------------------------------------------------------------


def vectors() -> list[dict[str, Any]]:
    return list(json.loads(VECTORS.read_text())["vectors"])


@pytest.mark.parametrize("vector", vectors(), ids=lambda v: str(v["name"]))
def test_the_key_of_each_vector_is_its_canonical_requests_digest(vector: dict[str, Any]) -> None:
    request = vector["request"]
    assert model_turns.canonical(request).decode("utf-8") == vector["canonical"]
    assert model_turns.request_digest(request) == vector["digest"]
    assert model_turns.turn_key(vector["model"], request) == vector["key"]


def test_the_vectors_say_what_tells_requests_apart() -> None:
    by_name = {v["name"]: v for v in vectors()}
    # Member order and 1.0 against 1 are one request; a result answering another call is not.
    assert by_name["member order"]["digest"] == by_name["tool call"]["digest"]
    second, first = by_name["result of the second call"], by_name["result of the first call"]
    assert second["digest"] != first["digest"]
    assert len({v["digest"] for v in vectors()}) == len(vectors()) - 1


# -- each integration's messages in the neutral form ------------------------------------


def call_of(call_id: str, name: str, args: dict[str, Any]) -> ToolCall:
    return {"id": call_id, "name": name, "args": args}


def asked_langchain(call_id: str) -> list[BaseMessage]:
    return [
        SystemMessage("Bill."),
        HumanMessage("The disk is full"),
        AIMessage(
            "", tool_calls=[call_of(call_id, "open_ticket", {"title": "Disk full", "cents": 1.0})]
        ),
        ToolMessage("tkt_1", tool_call_id=call_id),
    ]


def test_langchain_messages_are_keyed_without_their_tool_call_ids() -> None:
    first = on_langgraph.conversation(asked_langchain("call_a1"))
    again = on_langgraph.conversation(asked_langchain("call_zz"))
    assert first == again
    vector = {v["name"]: v for v in vectors()}["tool result"]
    assert model_turns.request_form(first, []) == vector["request"]


def test_a_tool_result_names_its_call_by_position_whatever_the_order_of_results() -> None:
    asked = [
        HumanMessage("go"),
        AIMessage("", tool_calls=[call_of("x", "a", {}), call_of("y", "b", {})]),
        ToolMessage("from b", tool_call_id="y"),
        ToolMessage("from a", tool_call_id="x"),
        ToolMessage("lost", tool_call_id="nowhere"),
    ]
    made = on_langgraph.conversation(asked)
    assert made[2:] == [{"role": "tool", "call": 1}, {"role": "tool", "call": 0},
                        {"role": "tool", "call": None}]  # fmt: skip


def test_what_a_tool_result_says_is_not_part_of_what_was_asked() -> None:
    """A redelivery hears a write it made as ALREADY_APPLIED, an upstream words its answer
    anew: the model's turn after it is the one recorded, not a new question."""

    def asked(result: str) -> list[BaseMessage]:
        return [*asked_langchain("call_1")[:-1], ToolMessage(result, tool_call_id="call_1")]

    first = on_langgraph.conversation(asked('{"id": "tkt_1", "outcome": "APPLIED"}'))
    again = on_langgraph.conversation(asked('{"id": "tkt_1", "outcome": "ALREADY_APPLIED"}'))
    assert model_turns.request_digest(first) == model_turns.request_digest(again)


def test_agents_sdk_items_are_keyed_without_their_ids() -> None:
    from actonce_client import openai_agents as on_agents

    def asked(call_id: str) -> list[dict[str, Any]]:
        return [
            {"role": "user", "content": "The disk is full"},
            {"type": "reasoning", "id": f"rs_{call_id}", "summary": []},
            {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id,
             "name": "open_ticket", "arguments": '{"title": "Disk full", "cents": 1}'},
            {"type": "function_call_output", "call_id": call_id, "output": "tkt_1"},
        ]  # fmt: skip

    first = on_agents.conversation("Bill.", asked("call_1"))
    assert first == on_agents.conversation("Bill.", asked("call_2"))
    vector = {v["name"]: v for v in vectors()}["tool result"]
    assert model_turns.request_form(first, []) == vector["request"]


ARGS = '{"title": "Disk full", "cents": 1}'


def test_pydantic_ai_messages_are_keyed_without_their_ids_or_timestamps() -> None:
    from pydantic_ai.messages import (
        ModelRequest,
        ModelResponse,
        SystemPromptPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )

    from actonce_client import pydantic_ai as on_pydantic

    def asked(call_id: str) -> list[Any]:
        return [
            ModelRequest(parts=[SystemPromptPart("Bill."), UserPromptPart("The disk is full")]),
            ModelResponse(parts=[ToolCallPart("open_ticket", ARGS, tool_call_id=call_id)]),
            ModelRequest(parts=[ToolReturnPart("open_ticket", "tkt_1", tool_call_id=call_id)]),
        ]

    first = on_pydantic.conversation(asked("call_1"))
    assert first == on_pydantic.conversation(asked("call_2"))
    vector = {v["name"]: v for v in vectors()}["tool result"]
    assert model_turns.request_form(first, []) == vector["request"]


def test_the_tools_offered_are_part_of_what_was_asked_however_they_were_bound() -> None:
    @tool
    def open_ticket(title: str) -> str:
        """Open a ticket."""
        return title

    @tool
    def charge_card(customer: str) -> str:
        """Charge a card."""
        return customer

    asked = [HumanMessage("The disk is full")]
    ticket = durable_model(Answering()).bind_tools([open_ticket])
    charge = durable_model(Answering()).bind_tools([charge_card])
    assert isinstance(ticket, DurableChatModel) and isinstance(charge, DurableChatModel)
    assert ticket._key(asked).key != charge._key(asked).key
    bound_first = durable_model(Answering().bind_tools([open_ticket]))
    assert bound_first._key(asked).key == ticket._key(asked).key


# -- LangGraph deliveries against a real sidecar ----------------------------------------


class Answering(BaseChatModel):
    """A model that answers each request with a tool call naming the request's last human
    text, under an id named anew on every call, as a real model does; it counts its calls."""

    calls: list[str] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "answering"

    def bind_tools(
        self, tools: Sequence[Any], *, tool_choice: str | None = None, **kwargs: Any
    ) -> Runnable[LanguageModelInput, AIMessage]:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        asked = next(str(m.content) for m in reversed(messages) if isinstance(m, HumanMessage))
        self.calls.append(asked)
        call = {"id": f"call_{uuid.uuid4().hex[:12]}", "name": "open_ticket",
                "args": {"title": asked}}  # fmt: skip
        answer = AIMessage(f"on it: {asked}", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=answer)])


class InOrder:
    """Lets branches reach the model one at a time, in the order given."""

    def __init__(self, order: list[str]) -> None:
        self.order = order
        self.next = 0
        self.turn = threading.Condition()

    def wait_for(self, name: str) -> None:
        with self.turn:
            assert self.turn.wait_for(lambda: self.order[self.next] == name, WAIT), name

    def done(self) -> None:
        with self.turn:
            self.next += 1
            self.turn.notify_all()


class Branch(TypedDict):
    customer: str


class Fan(TypedDict):
    customers: list[str]
    answers: Annotated[list[tuple[str, str, str]], operator.add]


def fan_out(client: Client, model: Answering, order: InOrder | None) -> Any:
    """One branch per customer (``Send``), each asking the model about its customer."""
    chat = durable_model(model)

    def branch(state: Branch) -> dict[str, Any]:
        customer = state["customer"]
        if order is not None:
            order.wait_for(customer)
        try:
            answer = chat.invoke([HumanMessage(customer)])
        finally:
            if order is not None:
                order.done()
        return {"answers": [(customer, answer.content, answer.tool_calls[0]["id"])]}

    graph = StateGraph(Fan)
    graph.add_node("branch", branch)
    graph.add_conditional_edges(
        START, lambda s: [Send("branch", {"customer": c}) for c in s["customers"]]
    )
    return graph.compile()


def delivered(client: Client, app: Any, run_id: str, given: Any) -> Any:
    return deliver(app, run_id, f"thread-{run_id}", given, actonce=Actonce(client, rule=RULE))


def test_send_branches_get_their_own_answers_whatever_order_they_reach_the_model(
    client: Client,
) -> None:
    run_id = f"fan-{uuid.uuid4().hex}"
    customers = ["ada", "bob", "cy"]
    first = Answering()
    out = delivered(client, fan_out(client, first, InOrder(customers)), run_id,
                    {"customers": customers, "answers": []})  # fmt: skip
    again = Answering()
    replayed = delivered(client, fan_out(client, again, InOrder(customers[::-1])), run_id,
                         {"customers": customers, "answers": []})  # fmt: skip
    assert sorted(first.calls) == customers
    assert again.calls == []  # every branch replayed, none asked again
    assert sorted(replayed["answers"]) == sorted(out["answers"])
    assert all(text == f"on it: {customer}" for customer, text, _ in replayed["answers"])


def test_two_branches_asking_the_same_get_two_turns_and_the_redelivery_both(
    client: Client,
) -> None:
    run_id = f"twins-{uuid.uuid4().hex}"
    given = {"customers": ["ada", "ada"], "answers": []}
    first = Answering()
    out = delivered(client, fan_out(client, first, None), run_id, given)
    again = Answering()
    replayed = delivered(client, fan_out(client, again, None), run_id, given)
    assert first.calls == ["ada", "ada"]  # two requests, two answers
    assert len({call_id for *_, call_id in out["answers"]}) == 2
    assert again.calls == []
    assert sorted(replayed["answers"]) == sorted(out["answers"])


class TransientError(ConnectionError):
    pass


def retried_node(client: Client, model: Answering, hiccups: list[int]) -> Any:
    """A node that asks the model, then fails once (``hiccups``), for its RetryPolicy."""
    chat = durable_model(model)

    def agent(state: MessagesState) -> dict[str, Any]:
        answer = chat.invoke(state["messages"])
        if hiccups:
            hiccups.pop()
            raise TransientError("the network hiccuped after the model answered")
        return {"messages": [answer]}

    policy = RetryPolicy(retry_on=TransientError, initial_interval=0.01, jitter=False)
    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent, retry_policy=policy)
    graph.add_edge(START, "agent")
    return graph.compile()


def test_a_node_run_again_by_its_retry_policy_gets_the_answer_its_model_gave(
    client: Client,
) -> None:
    run_id = f"retry-{uuid.uuid4().hex}"
    given = {"messages": [HumanMessage("ada")]}
    first = Answering()
    out = delivered(client, retried_node(client, first, [1]), run_id, given)
    assert first.calls == ["ada"]  # the retry was answered what the model had said
    # The redelivery, with no hiccup, acts on the same answer: the one the run acted on.
    again = Answering()
    replayed = delivered(client, retried_node(client, again, []), run_id, given)
    assert again.calls == []
    assert replayed["messages"][-1].tool_calls == out["messages"][-1].tool_calls


def test_an_agent_subgraph_run_again_by_its_nodes_retry_policy_gets_the_same_answer(
    client: Client,
) -> None:
    """The subgraph's own tasks are named anew when its node runs again: the node's task,
    outermost, is the one that asks again."""
    chat = durable_model(model := Answering())
    hiccups = [1]

    def ask(state: MessagesState) -> dict[str, Any]:
        return {"messages": [chat.invoke(state["messages"])]}

    def act(state: MessagesState) -> dict[str, Any]:
        if hiccups:
            hiccups.pop()
            raise TransientError("the tool's connection reset after the model answered")
        return {}

    agent = StateGraph(MessagesState)
    agent.add_node("model", ask)
    agent.add_node("act", act)
    agent.add_edge(START, "model")
    agent.add_edge("model", "act")
    graph = StateGraph(MessagesState)
    policy = RetryPolicy(retry_on=TransientError, initial_interval=0.01, jitter=False)
    graph.add_node("agent", agent.compile(), retry_policy=policy)
    graph.add_edge(START, "agent")
    run_id = f"subgraph-retry-{uuid.uuid4().hex}"
    out = delivered(client, graph.compile(), run_id, {"messages": [HumanMessage("ada")]})
    assert model.calls == ["ada"]
    assert len({m.tool_calls[0]["id"] for m in out["messages"] if isinstance(m, AIMessage)}) == 1


def test_a_run_recorded_under_the_positional_key_replays_after_the_upgrade(
    client: Client,
) -> None:
    run_id = f"upgraded-{uuid.uuid4().hex}"
    recorded = AIMessage("on it: ada", tool_calls=[{"id": "call_old", "name": "open_ticket",
                                                    "args": {"title": "ada"}}])  # fmt: skip
    # What the earlier client recorded: the model's name and the turn's index in the run.
    with delivering(client, run_id, RULE, Lease()) as earlier:
        begun = earlier.attempt.begin_step(MODEL_TURN, Effect.IDEMPOTENT_WRITE,
                                           {"model": "model", "turn": 0})  # fmt: skip
        earlier.attempt.end_step(begun.id, on_langgraph.CODEC.encode(recorded))
    given = {"messages": [HumanMessage("ada")]}
    for _ in range(2):  # found under the old key, then under the new one it was copied to
        model = Answering()
        out = delivered(client, retried_node(client, model, []), run_id, given)
        assert model.calls == []
        assert out["messages"][-1].tool_calls[0]["id"] == "call_old"


def test_a_run_begun_after_the_upgrade_looks_for_a_positional_key_once_per_model(
    client: Client,
) -> None:
    run_id = f"fresh-{uuid.uuid4().hex}"
    model = Answering()
    out = delivered(client, fan_out(client, model, InOrder(["ada", "bob"])), run_id,
                    {"customers": ["ada", "bob"], "answers": []})  # fmt: skip
    assert sorted(model.calls) == ["ada", "bob"]
    assert len(out["answers"]) == 2


# -- the Agents SDK and Pydantic AI -----------------------------------------------------


def test_an_agents_sdk_run_recorded_under_the_positional_key_replays(client: Client) -> None:
    from agents import Agent, ModelResponse, Usage, set_tracing_disabled
    from openai.types.responses import ResponseOutputMessage, ResponseOutputText
    from scripted_agents_model import ScriptedModel

    from actonce_client import openai_agents as on_agents

    set_tracing_disabled(True)
    actonce = on_agents.Actonce(client, rule=RULE)
    run_id = f"agents-upgraded-{uuid.uuid4().hex}"
    said = ResponseOutputText(type="output_text", text="recorded", annotations=[])
    recorded = ModelResponse(output=[ResponseOutputMessage(
        id="msg_old", type="message", role="assistant", status="completed", content=[said],
    )], usage=Usage(), response_id=None)  # fmt: skip
    with delivering(client, run_id, RULE, Lease()) as earlier:
        begun = earlier.attempt.begin_step(MODEL_TURN, Effect.IDEMPOTENT_WRITE,
                                           {"agent": "billing", "turn": 0})  # fmt: skip
        earlier.attempt.end_step(begun.id, on_agents.CODEC.encode(recorded))
    for _ in range(2):
        model = ScriptedModel([[]])
        result = on_agents.deliver(Agent(name="billing", model=model), run_id, "go",
                                   actonce=actonce)  # fmt: skip
        assert model.calls == 0
        assert getattr(result, "final_output", None) == "recorded"


def pydantic_model(calls: list[str]) -> Any:
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append("asked")
        return ModelResponse(parts=[TextPart(f"fresh {uuid.uuid4().hex}")])

    return FunctionModel(answer)


def test_a_pydantic_ai_run_recorded_under_the_positional_key_replays(client: Client) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart

    from actonce_client import pydantic_ai as on_pydantic

    actonce = on_pydantic.Actonce(client, rule=RULE)
    run_id = f"pydantic-upgraded-{uuid.uuid4().hex}"
    with delivering(client, run_id, RULE, Lease()) as earlier:
        begun = earlier.attempt.begin_step(MODEL_TURN, Effect.IDEMPOTENT_WRITE,
                                           {"model": "model", "turn": 0})  # fmt: skip
        recorded = ModelResponse(parts=[TextPart("recorded")])
        earlier.attempt.end_step(begun.id, on_pydantic.CODEC.encode(recorded))
    for _ in range(2):
        calls: list[str] = []
        agent = Agent(pydantic_model(calls), output_type=str)
        result = on_pydantic.deliver(agent, run_id, "go", actonce=actonce)
        assert calls == []
        assert result.output == "recorded"


def test_pydantic_ai_agents_asking_the_same_at_once_get_two_turns_and_both_replay(
    client: Client,
) -> None:
    import asyncio

    from pydantic_ai import Agent

    from actonce_client.deliveries import adelivering
    from actonce_client.pydantic_ai import DurableModel

    run_id = f"pydantic-twins-{uuid.uuid4().hex}"

    async def both(calls: list[str]) -> list[str]:
        agent = Agent(DurableModel(pydantic_model(calls)), output_type=str)
        async with adelivering(client, run_id, RULE, Lease()):
            said = await asyncio.gather(agent.run("same"), agent.run("same"))
        return sorted(r.output for r in said)

    first: list[str] = []
    answers = asyncio.run(both(first))
    assert len(first) == 2 and len(set(answers)) == 2  # two requests, two answers
    replayed: list[str] = []
    assert asyncio.run(both(replayed)) == answers
    assert replayed == []
