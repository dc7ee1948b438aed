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
