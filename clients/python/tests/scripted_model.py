"""A chat model that answers from a script, as a real model answers: answer n is the
one after n answers of the model, but every call names its tool calls anew (a fresh id
each time), gives parallel calls in a shuffled order, and words its texts its own way
(a text given as a tuple of wordings is one of them, by chance). A graph that asks it
again makes other tool calls than the first time: only a checkpointer that kept its
answer, or a durable model turn, keeps them."""

from __future__ import annotations

import os
import random
import signal
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from pydantic import Field, PrivateAttr

Turn = list[tuple[str, dict[str, Any]]]  # (tool, arguments) each; [] answers "done"


class ScriptedChatModel(BaseChatModel):
    """``kill_at_call``: the process kills itself as its k-th call starts (0: never).
    ``scripts``: the script of a request whose message says one of its keys (an agent's
    system prompt, a branch's question), the way a real model answers what it is asked;
    any other request is answered from ``script``."""

    script: list[Turn]
    scripts: dict[str, list[Turn]] = Field(default_factory=dict)
    kill_at_call: int = 0
    calls: int = 0
    _counting: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        with self._counting:  # parallel branches ask at once
            self.calls += 1
            kill = self.calls == self.kill_at_call
        if kill:
            os.kill(os.getpid(), signal.SIGKILL)
        said = (str(m.content) for m in messages if not isinstance(m, AIMessage))
        script = next((self.scripts[s] for s in said if s in self.scripts), self.script)
        answered = sum(isinstance(m, AIMessage) for m in messages)
        return ChatResult(generations=[ChatGeneration(message=answer(script[answered]))])

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        return self


def answer(calls: Turn) -> AIMessage:
    """A model turn that calls tools, fresh ids, shuffled, worded by chance; or "done"."""
    if not calls:
        return AIMessage("done", id=f"ai-{uuid.uuid4().hex[:8]}")
    shuffled = list(calls)
    random.shuffle(shuffled)
    made = [
        {"id": f"call_{uuid.uuid4().hex[:12]}", "name": name,
         "args": {k: random.choice(v) if isinstance(v, tuple) else v for k, v in args.items()}}
        for name, args in shuffled
    ]  # fmt: skip
    return AIMessage("", tool_calls=made, id=f"ai-{uuid.uuid4().hex[:8]}")


def turn(*calls: tuple[str, str, dict[str, Any]]) -> Turn:
    """A scripted turn from (tool call id, tool, arguments) each: the id is not kept, as a
    real model keeps none."""
    return [(name, args) for _, name, args in calls]


DONE: Turn = []
