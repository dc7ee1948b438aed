"""What a durable model turn is keyed by: the request the model was asked, in a form no
framework owns (docs/model-turns.md, with test vectors every client checks).

A delivery records each model response as a step (tool ``model_turn``) and a later
delivery replays it. The step's key is the turn's name (the model, or the agent) and the
digest of its request: the messages and the tools offered, each integration's own types
turned into the neutral form below, then RFC 8785 canonical JSON, then SHA-256. So a
redelivery gives each request the answer recorded for that same request, whatever the
order in which parallel branches reach the model, and however many requests either
delivery makes.

The neutral form keeps what the run asks and drops what is named or heard anew on every
delivery: a tool call is its name and arguments, never its id, and a tool's result is the
position of the call it answers among the request's tool calls, not what it says.

    {"messages": [{"role": "system" | "user" | "assistant" | ..., "content": "...",
                   "tool_calls": [{"name": "...", "arguments": <JSON>}],   # assistant
                   "parts": [<JSON>, ...]},                                # not text
                  {"role": "tool", "call": <int or null>}],
     "tools": [{"name": "...", "description": "...", "parameters": <JSON>}]}  # by name

Equal requests in one delivery are told apart by who asks (see :class:`ModelTurn`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import rfc8785

KEY_FORM = 1
"""The key's form: a change to the neutral form or to the digest is a new form."""
SAFE_INTEGER = 2**53 - 1


@dataclass(frozen=True)
class ToolCallForm:
    """One tool call an assistant message makes: its name and arguments, never its id."""

    name: str
    arguments: Any


@dataclass
class Conversation:
    """Builds a request's neutral messages from a framework's history, in order: the
    position of each tool call, by its framework id, for the results that answer it."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    _calls: dict[str, list[int]] = field(default_factory=dict)
    _made: int = 0

    def say(self, role: str, content: str, parts: Sequence[Any] = ()) -> None:
        """A message of ``role`` (system, user, or assistant text)."""
        message: dict[str, Any] = {"role": role, "content": content}
        if parts:
            message["parts"] = [plain(p) for p in parts]
        self.messages.append(message)

    def call(self, calls: Sequence[tuple[str | None, ToolCallForm]], content: str = "",
             *, join: bool = False) -> None:  # fmt: skip
        """An assistant message's tool calls (their framework ids beside them). ``join``:
        they belong to the assistant message just before, if the last message is one."""
        made = [{"name": c.name, "arguments": plain(c.arguments)} for _, c in calls]
        last = self.messages[-1] if self.messages else None
        if join and last is not None and last["role"] == "assistant":
            last.setdefault("tool_calls", []).extend(made)
        else:
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if made:
                message["tool_calls"] = made
            self.messages.append(message)
        for call_id, _ in calls:
            if call_id is not None:
                self._calls.setdefault(call_id, []).append(self._made)
            self._made += 1

    def answer(self, call_id: str | None) -> None:
        """A tool's result, for the call its framework names ``call_id``: the first call
        of that id not answered yet, by its position; null when no call has that id.

        What the result says is not part of it. It is the world's answer, not the run's
        question, and a redelivery may legitimately hear it otherwise: the write it made
        is ``ALREADY_APPLIED`` now, a clock moved, an upstream words its answer anew. A
        request keyed by it would miss its recorded turn, the model would be asked again,
        and its new tool calls would act a second time (the grid's MCP row did: a charge
        made twice). The turn the model took with that result is what a redelivery must
        replay, so a result is only the call it answers."""
        waiting = self._calls.get(call_id or "") or []
        position = waiting.pop(0) if waiting else None
        self.messages.append({"role": "tool", "call": position})


def arguments_of(text_or_value: Any) -> Any:
    """A tool call's arguments as JSON: JSON text parsed; text that is not JSON as it is."""
    if isinstance(text_or_value, str | bytes):
        try:
            return json.loads(text_or_value)
        except ValueError:
            return text_or_value if isinstance(text_or_value, str) else text_or_value.decode()
    return text_or_value


def tool_form(name: str, description: str | None, parameters: Any) -> dict[str, Any]:
    """A tool offered to the model."""
    return {"name": name, "description": description or "", "parameters": plain(parameters or {})}


def request_form(messages: list[dict[str, Any]], tools: Iterable[Mapping[str, Any]]) -> Any:
    """The neutral request: its messages as they come, its tools ordered by name (then by
    their canonical form), since the tools offered are a set."""
    offered = sorted((dict(t) for t in tools), key=lambda t: (str(t["name"]), canonical(t)))
    return {"messages": messages, "tools": offered}


def plain(value: Any) -> Any:
    """``value`` as the JSON the digest reads: objects' keys as text, tuples as arrays,
    an integer beyond 2^53 as the double JSON.parse would read, a value JSON has no form
    for as its text."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value if abs(value) <= SAFE_INTEGER else float(value)
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    return str(value)


def canonical(value: Any) -> bytes:
    """RFC 8785 canonical JSON of a plain value."""
    return bytes(rfc8785.dumps(value))


def request_digest(request: Any) -> str:
    """Hex SHA-256 of the request's canonical form."""
    return hashlib.sha256(canonical(request)).hexdigest()


def turn_key(name: str, request: Any) -> dict[str, Any]:
    """The step arguments a turn is recorded under."""
    return {"form": KEY_FORM, "model": name, "request": request_digest(request)}


@dataclass(frozen=True)
class ModelTurn:
    """One model call of a delivery: what it is recorded under, and who asks.

    ``key``: the turn's name and its request's digest (:func:`turn_key`). ``caller``: the
    framework's unit of work that asks (a LangGraph task, an asyncio task); None when
    there is none. ``legacy``: the positional key an earlier client recorded the same turn
    under (the name and the count of model answers in the request), looked for when no
    turn is recorded under ``key``, so that a run begun before an upgrade replays.

    **A node retry and two identical parallel requests.** Two requests with one digest
    are told apart by who asks them, not by when. Within one delivery, a caller that asks
    a request it already had answered gets that answer again, without a step: it is the
    same caller going over the same ground (a LangGraph node run again by its
    RetryPolicy keeps its task and the task's id), and a run must not act on two answers
    to one request, since the redelivery replays the first. A request from another
    caller (another ``Send`` branch, another agent run at once) is a request of its own:
    the sidecar counts the step's occurrences per key within the delivery's attempt, so
    two identical requests get two recorded turns, occurrence 0 and 1, in the order they
    reach the sidecar. A redelivery may hand them out the other way round: equal requests
    are interchangeable, since a turn's answer depends on nothing but what was asked.
    Order in time would not do: parallel branches of a fast model may not overlap, and a
    retry may run beside another branch. The Agents SDK and Pydantic AI have no unit that
    runs again after its model answered: their caller is the asyncio task the framework
    asks the model in (a run's, a request's), so equal requests there are turns of their
    own.
    """

    key: Mapping[str, Any]
    caller: Hashable | None = None
    legacy: Mapping[str, Any] | None = None

    @property
    def family(self) -> str:
        """The name the legacy keys of this turn's model are counted under."""
        found = self.legacy or {}
        return str(found.get("model", found.get("agent", "")))


def model_turn(
    name: str,
    request: Any,
    *,
    caller: Hashable | None = None,
    legacy: Mapping[str, Any] | None = None,
) -> ModelTurn:
    """A :class:`ModelTurn` of the neutral ``request`` (see :func:`request_form`)."""
    return ModelTurn(turn_key(name, request), caller, legacy)
