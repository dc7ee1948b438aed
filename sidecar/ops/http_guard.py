"""What every HTTP front checks before a request reaches a route: the MCP front and the console.

A browser is the caller these rules are for. A page on any site can make the browser send
requests to a loopback port, and a name the page's own DNS points at 127.0.0.1 (DNS
rebinding) makes them same-origin for the browser. So, on every route:

- ``Host`` must name this front: the loopback names (``127.0.0.1``, ``localhost``,
  ``[::1]``, any port) and the names the operator configured; nothing else, wherever the
  front listens.
- ``Origin``, when sent (a browser sends it on every POST, and on every cross-origin
  request), must be a loopback origin, the origin of an allowed host, or one the operator
  configured. ``null`` (an opaque origin: a sandboxed frame, a ``data:`` page) never is.
- A request that may change something (any method but GET, HEAD and OPTIONS) must carry the
  media type its front takes. A page on another site can POST ``text/plain`` without asking
  the server first (no CORS preflight), never ``application/json``.
- The body is read whole before a route sees it, up to a limit, and a JSON body nested
  deeper than a limit is refused before anything parses it (a parser's recursion is not a
  limit: 50,000 brackets made one raise).

Each refusal answers JSON ``{"reason", "failure_class", "message"}``, the shape of the MCP
front's ``/attempts`` errors, with ``Connection: close`` (a body left unread is not read),
and every answer carries the hardening headers (:class:`ResponseHeaders`).

Pure ASGI middleware, outermost first: :func:`middleware` gives the layers; a front appends
its own (a token check, sessions) after them.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from itertools import accumulate
from typing import TYPE_CHECKING, Any

import structlog

from sidecar.errors import FailureClass

# What a front is configured with, importable from here beside the layers that apply it.
from sidecar.ops.http_policy import API_HEADERS as API_HEADERS
from sidecar.ops.http_policy import JSON as JSON
from sidecar.ops.http_policy import AllowedHost as AllowedHost
from sidecar.ops.http_policy import RequestPolicy as RequestPolicy
from sidecar.ops.http_policy import beyond_loopback_problem as beyond_loopback_problem
from sidecar.ops.http_policy import is_loopback_listen as is_loopback_listen
from sidecar.ops.http_policy import parse_allowed_hosts as parse_allowed_hosts
from sidecar.ops.http_policy import parse_allowed_origins as parse_allowed_origins

if TYPE_CHECKING:
    # Starlette comes with the HTTP fronts' extras (mcp, console); the command line and the
    # gRPC server, which import this module for its settings, serve without them.
    from starlette.middleware import Middleware

log = structlog.get_logger()

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


# -- nesting ----------------------------------------------------------------------------

_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def depth_past(body: bytes, limit: int) -> int:
    """How deep the arrays and objects of a JSON text nest, when deeper than ``limit``;
    0 when they do not. Read without parsing (parsing first is what a hostile depth breaks).

    Each step runs at C speed: the counts, the replacements, the split at quotes,
    ``translate``, ``accumulate`` and ``max``. A regular expression over the strings held
    the event loop for a quarter of a second on a 2 MiB body of escapes; now the dearest
    body is 2 MiB of brackets, a tenth of what canonicalizing a valid 1 MiB field costs,
    and an ordinary call's body costs a microsecond. Malformed text gets an answer too;
    its parser refuses it afterwards.
    """
    if body.count(b"[") + body.count(b"{") <= limit:
        return 0  # it cannot nest deeper than it opens
    # Escaped backslashes, then escaped quotes, go first: no quote left ends a string early.
    plain = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    outside = b"".join(plain.split(b'"')[::2])  # every other piece is inside a string
    brackets = outside.translate(None, _NOT_BRACKETS)
    if brackets.count(b"[") + brackets.count(b"{") <= limit:
        return 0
    depth = max(accumulate(map(_STEP.__getitem__, brackets)))
    return depth if depth > limit else 0


# -- answers ----------------------------------------------------------------------------


def refusal_body(reason: str, failure_class: FailureClass, message: str) -> bytes:
    """The JSON every HTTP refusal of the sidecar carries."""
    return json.dumps(
        {"reason": reason, "failure_class": failure_class.value, "message": message}
    ).encode()


@dataclass(frozen=True)
class Refusal:
    status: int
    reason: str
    failure_class: FailureClass
    message: str

    async def send(self, send: Send) -> None:
        body = refusal_body(self.reason, self.failure_class, self.message)
        await send(
            {
                "type": "http.response.start",
                "status": self.status,
                "headers": [
                    (b"content-type", JSON.encode()),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


# -- the layers -------------------------------------------------------------------------


class ResponseHeaders:
    """Adds the policy's hardening headers to every answer that does not set its own."""

    def __init__(self, app: App, headers: Iterable[tuple[str, str]]) -> None:
        self.app = app
        self.headers = [(name.encode(), value.encode()) for name, value in headers]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                extra = [(n, v) for n, v in self.headers if n not in present]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_headers)


class RequestGuard:
    """Host, Origin, media type, body size and nesting, in that order: the first rule a
    request breaks answers it, and the route never sees it."""

    def __init__(self, app: App, policy: RequestPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        checked = await self._check(scope, receive)
        if checked is None:
            return  # the client went away: nobody to answer
        if isinstance(checked, Refusal):
            log.info("http_refused", path=scope.get("path", ""), reason=checked.reason)
            await checked.send(send)
            return
        await self.app(scope, _replay(checked, receive), send)

    async def _check(self, scope: Scope, receive: Receive) -> bytes | Refusal | None:
        """The body of a request that keeps every rule, or the first refusal; None when the
        client went away before its body was whole."""
        headers = _headers(scope)
        refusal = self._refusal_of_head(scope, headers)
        if refusal is not None:
            if refusal.status != 413:
                # Take the body the client sends before answering (bounded as any body is):
                # a connection closed over bytes it never read is reset, and the reset can
                # drop the refusal before the client reads it.
                await self._read_body(receive)
            return refusal
        body = await self._read_body(receive)
        if body is None or isinstance(body, Refusal):
            return body
        return self._refusal_of_body(headers, body) or body

    def _refusal_of_head(self, scope: Scope, headers: dict[str, str]) -> Refusal | None:
        policy = self.policy
        if not policy.host_allowed(headers.get("host", "")):
            return Refusal(
                421,
                "HOST_NOT_ALLOWED",
                FailureClass.PERMANENT,
                "the request's Host is not a name this server answers to: loopback names, "
                f"and those its operator allows with {policy.hosts_flag}",
            )
        origin = headers.get("origin")
        if origin is not None and not policy.origin_allowed(origin):
            return Refusal(
                403,
                "ORIGIN_NOT_ALLOWED",
                FailureClass.PERMANENT,
                "requests from pages of this origin are refused: loopback origins, those of "
                f"the allowed hosts, and those its operator allows with {policy.origins_flag}",
            )
        writes = scope["method"] not in SAFE_METHODS
        if writes and _media_type(headers) not in policy.media_types:
            taken = " or ".join(sorted(policy.media_types))
            return Refusal(
                415,
                "UNSUPPORTED_MEDIA_TYPE",
                FailureClass.REFUSED,
                f"a {scope['method']} here takes Content-Type {taken}",
            )
        declared = headers.get("content-length", "0")
        if declared.isdigit() and int(declared) > policy.max_body_bytes:
            return self._too_large()
        return None

    async def _read_body(self, receive: Receive) -> bytes | Refusal | None:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.policy.max_body_bytes:
                return self._too_large()
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    def _refusal_of_body(self, headers: dict[str, str], body: bytes) -> Refusal | None:
        media_type = _media_type(headers)
        if not body or not (media_type == JSON or media_type.endswith("+json")):
            return None
        depth = depth_past(body, self.policy.max_nesting)
        if depth:
            return Refusal(
                400,
                "INVALID_ARGUMENT",
                FailureClass.REFUSED,
                f"body: nests {depth} levels; the limit is {self.policy.max_nesting}",
            )
        return None

    def _too_large(self) -> Refusal:
        return Refusal(
            413,
            "BODY_TOO_LARGE",
            FailureClass.REFUSED,
            f"body: the limit is {self.policy.max_body_bytes} bytes",
        )


def _headers(scope: Scope) -> dict[str, str]:
    # The first of a repeated header; latin-1 as HTTP's bytes are.
    found: dict[str, str] = {}
    for name, value in scope.get("headers", []):
        found.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
    return found


def _media_type(headers: dict[str, str]) -> str:
    return headers.get("content-type", "").split(";")[0].strip().lower()


def _replay(body: bytes, receive: Receive) -> Receive:
    """The body once, as one message; then the connection's own messages (a disconnect)."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed


def middleware(policy: RequestPolicy) -> list[Middleware]:
    """The layers every HTTP front starts with, outermost first: headers on every answer,
    refusals included, then the request's checks."""
    from starlette.middleware import Middleware

    return [
        Middleware(ResponseHeaders, headers=policy.headers),
        Middleware(RequestGuard, policy=policy),
    ]
