"""Cross-cutting concerns of every call, kept out of the handlers.

LogContextInterceptor starts each call with fresh log context bound to the
RPC and the attempt, so that every line a call logs names them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import structlog

log = structlog.get_logger()


class LogContextInterceptor(grpc.aio.ServerInterceptor):
    """Bind ``rpc`` and ``attempt_id`` for the life of each unary call."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        rpc = str(handler_call_details.method).rsplit("/", 1)[-1]
        inner = handler.unary_unary

        async def bound(request: Any, context: grpc.aio.ServicerContext) -> Any:
            structlog.contextvars.clear_contextvars()
            structlog.contextvars.bind_contextvars(rpc=rpc)
            attempt_id = getattr(request, "attempt_id", "")
            if attempt_id:
                structlog.contextvars.bind_contextvars(attempt_id=attempt_id)
            return await inner(request, context)

        return grpc.unary_unary_rpc_method_handler(
            bound,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
