"""What the framework integrations share: one tool call's attempt, and its steps.

An agent framework runs each tool call of a model turn on its own, and retries
it on its own (a node's retry policy, a runner that runs a tool again). Each
run of a tool call begins a fresh attempt of the queue's run, scoped to the tool
call's id: sibling tool calls never fence each other, a retry of one fences only
its own earlier try, and its writes derive the ids its earlier try derived
(docs/derived-ids.md, "Scopes").

A tool that calls a system of its own (a card processor, a ticketing API)
brackets that call as a step with :meth:`ToolCall.step`: the sidecar records
that the call began and what it returned, hands the result back to a later try
instead of calling again, and hands the step's id to the call as the
idempotency key of the downstream API.
"""

from __future__ import annotations

import contextlib
import inspect
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, cast

from actonce_client import deliveries
from actonce_client.aio import AsyncAttempt, AsyncClient
from actonce_client.client import Attempt, Client, Effect
from actonce_client.errors import ActonceError

T = TypeVar("T")


@dataclass(frozen=True)
class ToolCall:
    """One try of one tool call: its attempt, and the steps it brackets.

    A tool declares a parameter of this type (any name); the integration passes
    it, and the model never sees it.
    """

    attempt: Attempt
    """The attempt this try of the tool call writes with."""
    tool_call_id: str
    """The framework's id of the tool call: the attempt's scope."""
    interrupts: tuple[type[BaseException], ...] = ()
    """What the framework raises to pause the run before a step acted (LangGraph's
    ``interrupt()``): such a step is aborted, and runs when the run resumes."""

    def step(
        self,
        tool: str,
        args: Any,
        call: Callable[[str], T],
        *,
        effect: Effect | str = Effect.NON_IDEMPOTENT_WRITE,
        not_made: tuple[type[BaseException], ...] = (),
    ) -> T:
        """``call(idempotency_key)``, made at most once across the run's tries.

        ``tool`` and ``args`` name the call (with the scope and checkpoint, they
        derive the step's id, which is the idempotency key handed to ``call``).
        When an earlier try ended the step, its recorded result is returned and
        ``call`` is not made. ``call``'s result is recorded, so it must be JSON.

        ``not_made`` lists the errors ``call`` raises only when it provably did
        not act (a connection refused before the request was sent, a refusal
        the downstream API answers before charging): the step is aborted and a
        later try makes it. Any other error leaves the step begun: a later try
        of a NON_IDEMPOTENT_WRITE is refused as IN_DOUBT (for a person to decide),
        while an IDEMPOTENT_WRITE, whose downstream API honours the key, is made
        again with the same key.
        """
        begun = self.attempt.begin_step(tool, effect, args)
        if begun.done:
            return cast(T, begun.result)
        try:
            result = call(begun.id)
        except self.interrupts:
            self.attempt.abort_step(begun.id, "interrupted before the call")
            raise
        except not_made as error:
            self.attempt.abort_step(begun.id, f"not made: {type(error).__name__}")
            raise
        self.attempt.end_step(begun.id, result)
        return result


@dataclass(frozen=True)
class AsyncToolCall:
    """One try of one tool call of an ``async def`` tool: :class:`ToolCall`, awaited."""

    attempt: AsyncAttempt
    """The attempt this try of the tool call writes with."""
    tool_call_id: str
    """The framework's id of the tool call: the attempt's scope."""
    interrupts: tuple[type[BaseException], ...] = ()

    async def step(
        self,
        tool: str,
        args: Any,
        call: Callable[[str], Awaitable[T]],
        *,
        effect: Effect | str = Effect.NON_IDEMPOTENT_WRITE,
        not_made: tuple[type[BaseException], ...] = (),
    ) -> T:
        """``await call(idempotency_key)``, made at most once across the run's tries, as
        :meth:`ToolCall.step` makes its call. The step begins when the call is about to
        be sent, in the same task, so a kill elsewhere leaves it begun only if it may
        have acted."""
        begun = await self.attempt.begin_step(tool, effect, args)
        if begun.done:
            return cast(T, begun.result)
        try:
            result = await call(begun.id)
        except self.interrupts:
            await self.attempt.abort_step(begun.id, "interrupted before the call")
            raise
        except not_made as error:
            await self.attempt.abort_step(begun.id, f"not made: {type(error).__name__}")
            raise
        await self.attempt.end_step(begun.id, result)
        return result


class ToolAttempts:
    """How a tool of an integration begins each try of a tool call: a scoped attempt of the
    current delivery (which fences it and bounds its lease), or, run outside one, of the
    run alone."""

    def __init__(self, client: Client, rule: str, lease: timedelta | None) -> None:
        self.client = client
        self.rule = rule
        self.lease = lease

    def _deadline(self) -> datetime | None:
        return None if self.lease is None else datetime.now(UTC) + self.lease

    def begin(
        self, run_id: str, scope: str, checkpoint: str, delivery: deliveries.Delivery | None
    ) -> Attempt:
        if delivery is not None:
            return delivery.begin_tool(self.client, scope, checkpoint, self._deadline())
        return self.client.begin(run_id, self.rule, checkpoint, scope=scope,
                                 lease_deadline=self._deadline())  # fmt: skip

    async def abegin(
        self, run_id: str, scope: str, checkpoint: str, delivery: deliveries.Delivery | None
    ) -> tuple[AsyncAttempt, AsyncClient | None]:
        """The try's attempt, and the client made for it (to close) outside a delivery."""
        if delivery is not None:
            return await delivery.abegin_tool(scope, checkpoint, self._deadline()), None
        made = AsyncClient.like(self.client)
        attempt = await made.begin(run_id, self.rule, checkpoint, scope=scope,
                                   lease_deadline=self._deadline())  # fmt: skip
        return attempt, made


def is_retryable(error: BaseException) -> bool:
    """Whether a retry of the tool call is safe and may help: a RETRYABLE actonce
    error. Never IN_DOUBT or AUDIT_PERSISTENCE_FAILED (UNKNOWN), FORBIDDEN
    (PERMANENT) or a refusal, which a framework's default retries would retry."""
    return isinstance(error, ActonceError) and error.retryable


def retry_may_help(error: BaseException, transient: tuple[type[Exception], ...] = ()) -> bool:
    """Whether an integration tries a tool call again after ``error``: a RETRYABLE actonce
    error but ATTEMPT_FENCED (a newer delivery fenced this one, and every retry would meet
    the fence again: it ends the delivery), or one of the tool's own ``transient`` errors
    of its downstream calls (a connection reset, say)."""
    if isinstance(error, ActonceError):
        return error.retryable and error.reason != "ATTEMPT_FENCED"
    return isinstance(error, transient)


def refused_message(error: BaseException) -> str | None:
    """What the model is told of a REFUSED call (bad input, an artifact not found),
    which it can correct; None for every other error, which is not the model's."""
    if isinstance(error, ActonceError) and error.refused:
        return f"refused: {error.reason}: {error.message}"
    return None


def end_quietly(attempt: Attempt) -> None:
    """End a try that failed. The tool's own error is the one to raise: a fenced or
    unknown attempt cannot be ended, and a later try begins its own anyway."""
    with contextlib.suppress(ActonceError):
        attempt.end()


async def aend_quietly(attempt: AsyncAttempt) -> None:
    """:func:`end_quietly`, awaited."""
    with contextlib.suppress(ActonceError):
        await attempt.end()


def context_parameter(func: Callable[..., Any]) -> tuple[str, inspect.Signature]:
    """The name of ``func``'s ToolCall parameter, and its signature without it,
    every annotation resolved (so that a wrapper defined elsewhere can carry it)."""
    hints = typing.get_type_hints(func, include_extras=True)
    signature = inspect.signature(func)
    wanted = AsyncToolCall if inspect.iscoroutinefunction(func) else ToolCall
    found = [name for name in signature.parameters if hints.get(name) is wanted]
    if len(found) != 1:
        raise TypeError(
            f"{func.__qualname__} must take exactly one parameter of type {wanted.__name__}"
            + (" (an async def tool's)" if wanted is AsyncToolCall else "")
        )
    parameters = [
        p.replace(annotation=hints.get(p.name, p.annotation))
        for p in signature.parameters.values()
        if p.name != found[0]
    ]
    return found[0], signature.replace(
        parameters=parameters, return_annotation=hints.get("return", signature.return_annotation)
    )


def annotations_of(signature: inspect.Signature) -> dict[str, Any]:
    """``__annotations__`` for a function of ``signature``."""
    found = {
        name: p.annotation
        for name, p in signature.parameters.items()
        if p.annotation is not inspect.Parameter.empty
    }
    if signature.return_annotation is not inspect.Signature.empty:
        found["return"] = signature.return_annotation
    return found
