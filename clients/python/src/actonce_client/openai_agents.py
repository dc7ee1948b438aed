"""OpenAI Agents SDK function tools whose writes land once however the run is
retried (the ``openai-agents`` extra; docs/openai-agents.md).

    actonce = Actonce(client, rule="billing")

    @actonce.tool
    def open_ticket(title: str, call: ToolCall) -> str:
        \"\"\"Open a ticket.\"\"\"
        return call.attempt.create("ticket", {"title": title}).id

    agent = Agent(name="billing", tools=[open_ticket], ...)
    result = deliver(agent, run_id, "The disk is full")

Each run of a tool call begins an attempt of the queue's run (``run_id``, handed
down by :func:`deliver` or :func:`queue_run`), scoped to the tool call's id
(``ToolContext.tool_call_id``), and ends it when the tool returns. A tool call
the tool retries (``retries``), or that a run resumed from its ``RunState``
makes again, fences only its own earlier try and writes what it wrote, once.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, cast, overload

from agents import Agent, FunctionTool, RunContextWrapper, Runner, RunResult, function_tool
from agents.tool import ToolErrorFunction
from agents.tool_context import ToolContext

from actonce_client.client import Attempt, Client
from actonce_client.errors import ActonceError
from actonce_client.tool_calls import (
    ToolCall,
    annotations_of,
    context_parameter,
    end_quietly,
    is_retryable,
    refused_message,
)

__all__ = [
    "Actonce",
    "ToolCall",
    "deliver",
    "handle_tool_error",
    "is_retryable",
    "queue_run",
]

_run_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "actonce_queue_run_id", default=None
)


@contextmanager
def queue_run(run_id: str) -> Iterator[None]:
    """Within it, actonce tools write as attempts of the queue's run ``run_id``
    (a run started with ``Runner.run`` inside it; :func:`deliver` does this)."""
    token = _run_id.set(run_id)
    try:
        yield
    finally:
        _run_id.reset(token)


def deliver(agent: Agent[Any], run_id: str, input: Any, **run_options: Any) -> RunResult:
    """Run one delivery of the queue's run ``run_id``: ``Runner.run_sync`` with
    ``input`` (a ``RunState`` resumes a run paused for approval)."""
    with queue_run(run_id):
        return Runner.run_sync(agent, input, **run_options)


def handle_tool_error(context: RunContextWrapper[Any], error: Exception) -> str | None:
    """A function tool's ``failure_error_function``: a REFUSED call goes back to
    the model, which can correct it; every other error is raised out of the run,
    for the queue (the SDK's default would hand the model an IN_DOUBT, say)."""
    return refused_message(error)


class Actonce:
    """Makes function tools of functions: each run of each tool call is one attempt.

    ``rule`` names the automation the runs belong to; ``lease`` bounds each attempt.
    """

    def __init__(self, client: Client, rule: str, *, lease: timedelta | None = None) -> None:
        self.client = client
        self.rule = rule
        self.lease = lease

    @overload
    def tool(self, func: Callable[..., Any], /) -> FunctionTool: ...
    @overload
    def tool(
        self,
        func: None = None,
        /,
        *,
        retries: int = 0,
        transient: tuple[type[Exception], ...] = (),
        needs_approval: bool = False,
    ) -> Callable[[Callable[..., Any]], FunctionTool]: ...

    def tool(
        self,
        func: Callable[..., Any] | None = None,
        /,
        *,
        retries: int = 0,
        transient: tuple[type[Exception], ...] = (),
        needs_approval: bool = False,
    ) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
        """A function tool of ``func``, named after it and described by its
        docstring, which takes one :class:`ToolCall` parameter besides the
        model's arguments.

        The tool call is tried again, up to ``retries`` times, after a RETRYABLE
        actonce error or one of the ``transient`` errors of its own downstream
        calls, each try a fresh attempt; never after any other error.
        ``needs_approval`` pauses the run for a person before the call is made
        (the SDK's approval); see docs/openai-agents.md.
        """

        def make(f: Callable[..., Any]) -> FunctionTool:
            return self._make_tool(f, retries, transient, needs_approval)

        return make if func is None else make(func)

    def _make_tool(
        self,
        func: Callable[..., Any],
        retries: int,
        transient: tuple[type[Exception], ...],
        needs_approval: bool,
    ) -> FunctionTool:
        if inspect.iscoroutinefunction(func):
            raise TypeError("actonce tools are plain functions; the SDK runs them in threads")
        context, signature = context_parameter(func)
        if "tool_context" in signature.parameters:
            raise TypeError(f"{func.__qualname__}: 'tool_context' is the parameter actonce adds")
        first = inspect.Parameter(
            "tool_context", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=ToolContext[Any]
        )
        wrapped = signature.replace(parameters=[first, *signature.parameters.values()])

        def may_retry(error: Exception) -> bool:
            return is_retryable(error) or (
                isinstance(error, transient) and not isinstance(error, ActonceError)
            )

        @functools.wraps(func)
        def run(tool_context: ToolContext[Any], *args: Any, **kwargs: Any) -> Any:
            tries = 0
            while True:
                tries += 1
                attempt = self._begin(tool_context)
                try:
                    result = func(*args, **{context: ToolCall(attempt, attempt.scope)}, **kwargs)
                except Exception as error:
                    end_quietly(attempt)
                    if tries <= retries and may_retry(error):
                        continue
                    raise
                except BaseException:
                    end_quietly(attempt)
                    raise
                attempt.end()
                return result

        del run.__wrapped__  # the tool's schema is the wrapper's signature, not func's
        run.__signature__ = wrapped  # type: ignore[attr-defined]
        run.__annotations__ = annotations_of(wrapped)
        # The SDK raises the tool's error when the formatter answers None, which
        # ToolErrorFunction's type does not say.
        refusals_only = cast(ToolErrorFunction, handle_tool_error)
        return function_tool(
            run, failure_error_function=refusals_only, needs_approval=needs_approval
        )

    def _begin(self, tool_context: ToolContext[Any]) -> Attempt:
        run_id = _run_id.get()
        if not run_id:
            raise RuntimeError(
                "no queue run id: run the agent with deliver(), or inside queue_run(run_id)"
            )
        deadline = None if self.lease is None else datetime.now(UTC) + self.lease
        return self.client.begin(
            run_id, self.rule, "", scope=tool_context.tool_call_id, lease_deadline=deadline
        )
