"""LangGraph tools whose writes land once however the graph is retried (the
``langgraph`` extra; docs/langgraph.md).

    actonce = Actonce(client, rule="billing")

    @actonce.tool
    def open_ticket(title: str, call: ToolCall) -> str:
        \"\"\"Open a ticket.\"\"\"
        return call.attempt.create("ticket", {"title": title}).id

    tools = ToolNode([open_ticket], handle_tool_errors=handle_tool_error)
    graph.add_node("tools", tools, retry_policy=retry_policy())
    deliver(app, run_id, thread_id, {"messages": [...]})

Each run of a tool call begins an attempt of the queue's run (``run_id``, handed
down by :func:`deliver`), scoped to the tool call's id, from the checkpoint the
tool's task runs from (``runtime.execution_info.checkpoint_id``: inside a tool,
the config's ``checkpoint_id`` is None), and ends it when the tool returns.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import GraphInterrupt
from langgraph.prebuilt import ToolRuntime
from langgraph.pregel import Pregel
from langgraph.types import Command, RetryPolicy

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
    "RUN_ID_KEY",
    "Actonce",
    "ToolCall",
    "deliver",
    "handle_tool_error",
    "is_retryable",
    "refused_message",
    "retry_policy",
]

RUN_ID_KEY = "actonce_run_id"
"""The key of the queue's run id in the graph's ``configurable`` (and in the
metadata of each checkpoint the run saves), set by :func:`deliver`."""


class Actonce:
    """Makes tools of functions: each run of each tool call is one attempt.

    ``rule`` names the automation the runs belong to (the sidecar's send
    allowlist and the audit name it); ``lease`` bounds each attempt.
    """

    def __init__(self, client: Client, rule: str, *, lease: timedelta | None = None) -> None:
        self.client = client
        self.rule = rule
        self.lease = lease

    def tool(self, func: Callable[..., Any]) -> BaseTool:
        """A LangChain tool of ``func``, named after it and described by its
        docstring, which takes one :class:`ToolCall` parameter besides the
        model's arguments."""
        if inspect.iscoroutinefunction(func):
            raise TypeError("actonce tools are plain functions; LangGraph runs them in threads")
        context, signature = context_parameter(func)
        if "runtime" in signature.parameters:
            raise TypeError(f"{func.__qualname__}: 'runtime' is the parameter actonce injects")
        runtime = inspect.Parameter(
            "runtime", inspect.Parameter.KEYWORD_ONLY, annotation=ToolRuntime
        )
        wrapped = signature.replace(parameters=[*signature.parameters.values(), runtime])

        @functools.wraps(func)
        def run(*args: Any, runtime: ToolRuntime, **kwargs: Any) -> Any:
            attempt = self._begin(runtime)
            call = ToolCall(attempt, attempt.scope, interrupts=(GraphInterrupt,))
            try:
                result = func(*args, **{context: call}, **kwargs)
            except BaseException:
                end_quietly(attempt)
                raise
            attempt.end()
            return result

        del run.__wrapped__  # the tool's schema is the wrapper's signature, not func's
        run.__signature__ = wrapped  # type: ignore[attr-defined]
        run.__annotations__ = annotations_of(wrapped)
        return StructuredTool.from_function(
            run, name=func.__name__, description=inspect.getdoc(func)
        )

    def _begin(self, runtime: ToolRuntime) -> Attempt:
        run_id = (runtime.config.get("configurable") or {}).get(RUN_ID_KEY)
        if not run_id:
            raise RuntimeError(
                f"no queue run id in the graph's config: run the graph with deliver(), "
                f"or set configurable[{RUN_ID_KEY!r}]"
            )
        info = runtime.execution_info
        if runtime.tool_call_id is None or info is None:
            raise RuntimeError("an actonce tool runs inside a graph's ToolNode, not on its own")
        deadline = None if self.lease is None else datetime.now(UTC) + self.lease
        return self.client.begin(
            str(run_id), self.rule, info.checkpoint_id,
            scope=runtime.tool_call_id, lease_deadline=deadline,
        )  # fmt: skip


def retry_policy(
    *, transient: tuple[type[Exception], ...] = (), max_attempts: int = 3, **kwargs: Any
) -> RetryPolicy:
    """A node's RetryPolicy that retries RETRYABLE actonce errors, and the
    ``transient`` errors of the tools' own downstream calls (a connection reset,
    say), and nothing else. Each retry begins a fresh attempt per tool call, so
    its writes are the first try's writes, made once."""

    def retry_on(error: Exception) -> bool:
        return is_retryable(error) or (
            isinstance(error, transient) and not isinstance(error, ActonceError)
        )

    return RetryPolicy(max_attempts=max_attempts, retry_on=retry_on, **kwargs)


def handle_tool_error(error: Exception) -> str:
    """``ToolNode(handle_tool_errors=handle_tool_error)``: a REFUSED call (bad
    input, an artifact not found) goes back to the model as the tool's message,
    which it can correct; every other error is raised, for the node's retry
    policy and then the queue."""
    message = refused_message(error)
    if message is None:
        raise error
    return message


def deliver(
    app: Pregel[Any, Any, Any, Any],
    run_id: str,
    thread_id: str,
    input: Any,
    *,
    config: RunnableConfig | None = None,
) -> Any:
    """Run one delivery of the queue's run ``run_id`` on the graph's thread.

    The first delivery starts the run with ``input``. A redelivery of a run the
    thread already holds resumes it from its last checkpoint instead (its
    tool calls keep their ids, so each tool call's writes are found once), or,
    when it finished, returns its final state; while the run waits in an
    ``interrupt()``, it returns the state with its ``__interrupt__``. A
    ``Command(resume=...)`` as ``input`` resumes the interrupted run.

    Every checkpoint is saved before the next step runs (``durability="sync"``):
    a run resumed from an older checkpoint would call the model again, which
    names its tool calls anew, and every write would be new. The checkpointer
    must outlive the worker, so an in-memory one is refused.
    """
    checkpointer = app.checkpointer
    if not isinstance(checkpointer, BaseCheckpointSaver) or isinstance(checkpointer, InMemorySaver):
        raise ValueError(
            "deliver() needs the graph compiled with a durable checkpointer "
            "(SQLite, PostgreSQL): a redelivery resumes from it"
        )
    given: Mapping[str, Any] = config or {}
    run_config: RunnableConfig = {
        **given,  # type: ignore[typeddict-item]
        "configurable": {**given.get("configurable", {}), "thread_id": thread_id,
                         RUN_ID_KEY: run_id},
        "metadata": {**given.get("metadata", {}), RUN_ID_KEY: run_id},
    }  # fmt: skip
    if isinstance(input, Command):
        return app.invoke(input, run_config, durability="sync")
    state = app.get_state(run_config)
    if (state.metadata or {}).get(RUN_ID_KEY) == run_id:
        if state.interrupts:
            return {**state.values, "__interrupt__": list(state.interrupts)}
        if not state.next:
            return state.values
        return app.invoke(None, run_config, durability="sync")
    return app.invoke(input, run_config, durability="sync")
