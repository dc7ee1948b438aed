"""The interceptors' hold on grpc.aio: behaviours read from handlers, contexts handed on."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any
from unittest.mock import create_autospec

import grpc
import pytest

from sidecar.fronts.grpc.interceptors import ForwardingContext, behavior_of


def test_behavior_of_refuses_a_synchronous_servers_behaviour() -> None:
    def answer(request: Any, context: grpc.ServicerContext) -> Any:
        return request

    with pytest.raises(TypeError, match="not a unary coroutine function"):
        behavior_of(grpc.unary_unary_rpc_method_handler(answer))


def test_behavior_of_hands_back_the_coroutine_function() -> None:
    async def answer(request: Any, context: Any) -> Any:
        return request

    assert behavior_of(grpc.unary_unary_rpc_method_handler(answer)) is answer


def test_forwarding_context_hands_every_method_to_the_calls_own() -> None:
    inner = create_autospec(grpc.aio.ServicerContext, instance=True)
    forwarding = ForwardingContext(inner)
    names = [
        name
        for name, _ in inspect.getmembers(grpc.aio.ServicerContext, inspect.isfunction)
        if not name.startswith("_")
    ]
    assert "abort_with_status" in names and "time_remaining" in names
    for name in names:
        arguments = [object()] * (len(inspect.signature(getattr(inner, name)).parameters))
        made = getattr(forwarding, name)(*arguments)
        if inspect.iscoroutine(made):
            asyncio.run(made)
        getattr(inner, name).assert_called_once_with(*arguments)


def test_a_methods_wrapped_handler_is_built_once_and_decides_per_call() -> None:
    from sidecar.fronts.grpc.interceptors import RunActionsInterceptor

    seen: list[str] = []

    class Counting(RunActionsInterceptor):
        def wrap(self, rpc: str, handler: Any) -> Any:
            inner = behavior_of(handler)

            async def counted(request: Any, context: Any) -> Any:
                seen.append(rpc)
                return await inner(request, context)

            return counted

    async def answer(request: Any, context: Any) -> Any:
        return request

    looked_up: list[str] = []

    async def continuation(details: Any) -> Any:
        looked_up.append(details.method)
        return grpc.unary_unary_rpc_method_handler(answer)

    class Details(grpc.HandlerCallDetails):
        method = "/actonce.v1.RunActionsService/Notice"
        invocation_metadata = ()

    async def two_calls() -> None:
        interceptor = Counting()
        first = await interceptor.intercept_service(continuation, Details())
        second = await interceptor.intercept_service(continuation, Details())
        assert first is second
        assert first is not None and second is not None
        context = create_autospec(grpc.aio.ServicerContext, instance=True)
        assert await behavior_of(first)("a", context) == "a"
        assert await behavior_of(second)("b", context) == "b"

    asyncio.run(two_calls())
    # The chain below was asked once; the wrapped behaviour still ran for each call.
    assert looked_up == ["/actonce.v1.RunActionsService/Notice"]
    assert seen == ["Notice", "Notice"]
