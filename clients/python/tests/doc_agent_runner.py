"""Runs a doc's complete agent (billing_agent.py beside it, the doc's code as it stands)
where the doc's installs put it: ``python doc_agent_runner.py NAME``, NAME a doc of
tests/test_doc_agents.py. The agent's model is scripted as a real one answers (fresh
tool-call ids on every call); one job is delivered twice, and the agent's two answers
are printed as JSON."""

from __future__ import annotations

import json
import sys
import types
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def load_agent() -> types.ModuleType:
    agent = types.ModuleType("billing_agent")
    path = HERE / "billing_agent.py"
    exec(compile(path.read_text(), str(path), "exec"), agent.__dict__)
    return agent


def calls(name: str) -> list[tuple[str, dict[str, Any]]]:
    return [("open_ticket", {"title": f"Card declined twice ({name})"}),
            ("charge_card", {"customer": f"doc-{name}-ada", "cents": 1200})]  # fmt: skip


def langgraph_app(agent: types.ModuleType, name: str) -> Any:
    from scripted_model import DONE, ScriptedChatModel

    model = ScriptedChatModel(script=[calls(name), DONE])
    return agent.build(model, str(HERE / "checkpoints.db"))


def openai_agents_app(agent: types.ModuleType, name: str) -> Any:
    from agents import set_tracing_disabled
    from scripted_agents_model import ScriptedModel

    set_tracing_disabled(True)  # nothing leaves the machine
    return agent.build(ScriptedModel([calls(name), []]))


def pydantic_ai_app(agent: types.ModuleType, name: str) -> Any:
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if any(isinstance(m, ModelResponse) for m in messages):
            return ModelResponse(parts=[TextPart("done")])
        fresh = [ToolCallPart(tool, args, tool_call_id=f"call_{uuid.uuid4().hex}")
                 for tool, args in calls(name)]  # fmt: skip
        return ModelResponse(parts=list(fresh))

    return agent.build(FunctionModel(answer))


APPS = {"langgraph": langgraph_app, "openai-agents": openai_agents_app,
        "pydantic-ai": pydantic_ai_app}  # fmt: skip


def main() -> None:
    name = sys.argv[1]
    agent = load_agent()
    app = APPS[name](agent, name)
    job: dict[str, Any] = {"run_id": f"doc-run-{name}-{uuid.uuid4().hex[:8]}",
                           "thread_id": f"doc-thread-{name}", "text": "Bill Ada."}  # fmt: skip
    try:
        answers = [agent.handle(app, job), agent.handle(app, job)]  # the queue delivers it again
    finally:
        agent.client.close()
    print(json.dumps(answers))


if __name__ == "__main__":
    main()
