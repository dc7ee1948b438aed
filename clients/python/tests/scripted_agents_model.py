"""An OpenAI Agents SDK model that answers from a script, with no network: the
answer after n tool outputs is the turn the script has there, so a run delivered
again in a new process gets what the first process got."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from agents import Model, ModelResponse, Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseStreamEvent,
)

Turn = list[tuple[str, str, dict[str, Any]]]  # (tool call id, tool, arguments); [] answers


class ScriptedModel(Model):
    def __init__(self, script: list[Turn]) -> None:
        self.script = script

    async def get_response(self, system_instructions: Any, input: Any, *args: Any,
                           **kwargs: Any) -> ModelResponse:  # fmt: skip
        items = input if isinstance(input, list) else []
        outputs = sum(1 for item in items if _type(item) == "function_call_output")
        made = 0
        for calls in self.script:
            if made == outputs:
                return ModelResponse(output=_output(calls), usage=Usage(), response_id=None)
            made += len(calls)
        raise AssertionError(f"no turn in the script after {outputs} tool outputs")

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[ResponseStreamEvent]:
        raise NotImplementedError


def _type(item: Any) -> Any:
    return item.get("type") if isinstance(item, dict) else getattr(item, "type", None)


def _output(calls: Turn) -> list[Any]:
    if not calls:
        text = ResponseOutputText(type="output_text", text="done", annotations=[])
        return [ResponseOutputMessage(id="msg-done", type="message", role="assistant",
                                      status="completed", content=[text])]  # fmt: skip
    return [
        ResponseFunctionToolCall(
            type="function_call",
            id=f"fc-{call_id}",
            call_id=call_id,
            name=name,
            arguments=json.dumps(args),
        )
        for call_id, name, args in calls
    ]
