"""The MCP front's HTTP refusals, told in JSON-RPC on its MCP endpoint.

Every layer before a route (the HTTP guard's 421, 403, 415, 413 and 400, the API token's
401, a capability's 403) answers the sidecar's one refusal body, ``{"reason",
"failure_class", "message"}`` (sidecar.ops.http_guard.refusal_body). An MCP client reads
a non-2xx answer to its request as a JSON-RPC error when its body is one, and otherwise
shows a stand-in ("Server returned an error response", -32603) that hides why. So on the
MCP endpoint (``/mcp`` and what is under it) such a body is also a JSON-RPC error: the
same fields, and beside them ``jsonrpc``, ``id`` (null: the request was refused before
its id was read) and ``error`` with the refusal's words as its ``message`` and its reason
and class as its ``data``. A client of ``/attempts`` reads the same fields as before, and
a body that is JSON-RPC already (the SDK's own) passes as it is.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

# JSON-RPC's range for errors a server defines: the request was refused, not malformed.
REFUSED_CODE = -32000
_REFUSAL_FIELDS = frozenset({"reason", "failure_class", "message"})


def is_mcp_endpoint(path: str) -> bool:
    """Whether ``path`` is the MCP endpoint's, where a JSON-RPC client reads the answer."""
    return path == "/mcp" or path.startswith("/mcp/")


def as_json_rpc(body: bytes, status: int) -> bytes:
    """``body``, when it is the sidecar's refusal, with a JSON-RPC error beside its fields;
    any other body as it is."""
    try:
        refusal = json.loads(body)
    except ValueError:
        return body
    if not isinstance(refusal, dict) or set(refusal) != _REFUSAL_FIELDS:
        return body
    error = {
        "code": REFUSED_CODE,
        "message": f"{refusal['reason']} ({refusal['failure_class']}): {refusal['message']}",
        "data": {**refusal, "http_status": status},
    }
    return json.dumps({**refusal, "jsonrpc": "2.0", "id": None, "error": error}).encode()


class JsonRpcRefusals:
    """Pure ASGI: on the MCP endpoint, a refusal's body also a JSON-RPC error. Only an
    answer of status 400 or more is held to be rewritten; every other passes through."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_mcp_endpoint(str(scope.get("path", ""))):
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        chunks: list[bytes] = []

        async def told(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start" and message["status"] >= 400:
                start = message
                return
            if start is None or message["type"] != "http.response.body":
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            body = as_json_rpc(b"".join(chunks), start["status"])
            headers = [(k, v) for k, v in start.get("headers", []) if k != b"content-length"]
            headers.append((b"content-length", str(len(body)).encode()))
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, told)
