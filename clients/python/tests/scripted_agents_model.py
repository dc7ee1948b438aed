"""An OpenAI Agents SDK model that answers from a script, as a real model answers: the
turn after n tool outputs is the script's turn there, but every call names its tool
calls anew (a fresh id each time), gives parallel calls in a shuffled order, and words
its texts its own way (a text given as a tuple of wordings is one of them, by chance).

A delivery that asks it again therefore makes other tool calls than the first did:
only a durable model turn, replayed, keeps them.
"""

from __future__ import annotations

import json
import os
import random
import signal
import uuid
from collections.abc import AsyncIterator
from typing import Any

from agents import Model, ModelResponse, Usage
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseStreamEvent,
)

# (tool, arguments) each, a handoff as ("transfer_to_<agent>", {}); [] answers "done".
Turn = list[tuple[str, dict[str, Any]]]


def worded(args: dict[str, Any]) -> dict[str, Any]:
    """The arguments as this call words them: a tuple of wordings is one of them."""
    return {k: random.choice(v) if isinstance(v, tuple) else v for k, v in args.items()}


class ScriptedModel(Model):
    """``kill_at_call``: the process kills itself as its k-th call starts (0: never).
    ``scripts``: the script of an agent by its instructions (agents run as tools of
    another, one model for all); any other agent is answered from ``script``."""

    def __init__(
        self, script: list[Turn], *, scripts: dict[str, list[Turn]] | None = None,
        kill_at_call: int = 0,
    ) -> None:  # fmt: skip
        self.script = script
        self.scripts = scripts or {}
        self.kill_at_call = kill_at_call
        self.calls = 0

    def _turn(self, instructions: Any, input: Any) -> list[Any]:
        self.calls += 1
        if self.calls == self.kill_at_call:
            os.kill(os.getpid(), signal.SIGKILL)
        items = input if isinstance(input, list) else []
        outputs = sum(1 for item in items if _type(item) == "function_call_output")
        made = 0
        for calls in self.scripts.get(str(instructions), self.script):
            if made == outputs:
                return _output(calls)
            made += len(calls)
        raise AssertionError(f"no turn in the script after {outputs} tool outputs")

    async def get_response(self, system_instructions: Any, input: Any, *args: Any,
                           **kwargs: Any) -> ModelResponse:  # fmt: skip
        return ModelResponse(output=self._turn(system_instructions, input), usage=Usage(),
                             response_id=None)  # fmt: skip

    async def _stream(self, instructions: Any, input: Any) -> AsyncIterator[ResponseStreamEvent]:
        output = self._turn(instructions, input)
        response = Response.model_construct(
            id=f"resp-{uuid.uuid4().hex}", object="response", created_at=0.0, model="scripted",
            output=output, parallel_tool_calls=True, tool_choice="auto", tools=[], usage=None,
            status="completed",
        )  # fmt: skip
        yield ResponseCompletedEvent(type="response.completed", response=response,
                                     sequence_number=0)  # fmt: skip

    def stream_response(self, system_instructions: Any, input: Any, *args: Any,
                        **kwargs: Any) -> AsyncIterator[ResponseStreamEvent]:  # fmt: skip
        return self._stream(system_instructions, input)


def _type(item: Any) -> Any:
    return item.get("type") if isinstance(item, dict) else getattr(item, "type", None)


def _output(calls: Turn) -> list[Any]:
    if not calls:
        text = ResponseOutputText(type="output_text", text="done", annotations=[])
        message_id = f"msg-{uuid.uuid4().hex[:8]}"
        return [ResponseOutputMessage(id=message_id, type="message", role="assistant",
                                      status="completed", content=[text])]  # fmt: skip
    shuffled = list(calls)
    random.shuffle(shuffled)
    made = []
    for name, args in shuffled:
        call_id = f"call_{uuid.uuid4().hex[:12]}"
        made.append(ResponseFunctionToolCall(
            type="function_call", id=f"fc_{call_id}", call_id=call_id, name=name,
            arguments=json.dumps(worded(args)),
        ))  # fmt: skip
    return made
