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

import ipaddress
import json
import re
from collections.abc import Awaitable, Callable, Iterable, MutableMapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import structlog

from sidecar import defaults
from sidecar.errors import FailureClass

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

JSON = "application/json"
# Names a caller on this host uses; any port.
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "[::1]"})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
DEFAULT_PORTS = {"http": 80, "https": 443}

# The MCP front answers JSON only: nothing of it may be framed, sniffed, kept or referred.
API_HEADERS: tuple[tuple[str, str], ...] = (
    ("content-security-policy", "default-src 'none'; frame-ancestors 'none'"),
    ("x-frame-options", "DENY"),
    ("x-content-type-options", "nosniff"),
    ("cache-control", "no-store"),
    ("referrer-policy", "no-referrer"),
)


# -- what an operator may allow ---------------------------------------------------------


@dataclass(frozen=True)
class AllowedHost:
    """A name callers use to reach the front: any port, or one."""

    name: str  # lower case; an IPv6 address in brackets
    port: int | None = None

    def matches(self, name: str, port: int | None) -> bool:
        return name == self.name and (self.port is None or port == self.port)


def parse_allowed_hosts(text: str) -> tuple[AllowedHost, ...]:
    """``NAME`` or ``NAME:PORT``, comma-separated (a flag's or a variable's value)."""
    hosts = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        split = _split_host(item)
        if split is None or "/" in item or "@" in item:
            raise ValueError(f"{item!r}: expected NAME or NAME:PORT (no scheme, no path)")
        hosts.append(AllowedHost(*split))
    if not hosts:
        raise ValueError("names no host")
    return tuple(hosts)


def parse_allowed_origins(text: str) -> tuple[str, ...]:
    """``http://NAME[:PORT]`` or ``https://...``, comma-separated; each kept normalized."""
    origins = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        parts = _origin_parts(item)
        if parts is None:
            raise ValueError(f"{item!r}: expected SCHEME://NAME[:PORT] (http or https, no path)")
        origins.append(_origin_text(*parts))
    if not origins:
        raise ValueError("names no origin")
    return tuple(origins)


def is_loopback_listen(host: str) -> bool:
    """Whether a front listening on ``host`` is reached from this host alone."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def beyond_loopback_problem(listen: str, hosts: Sequence[AllowedHost], flag: str) -> str | None:
    """What start-up must say when a front listens beyond loopback and allows no name that
    its callers could send there; None when there is nothing to say."""
    host = listen.rpartition(":")[0]
    if is_loopback_listen(host) or hosts:
        return None
    return (
        f"{listen} is not loopback: name the hosts its callers reach it by with {flag} "
        f"(e.g. {flag} actonce.agents.svc.cluster.local); requests naming any other "
        "host are refused"
    )


@dataclass(frozen=True)
class RequestPolicy:
    """What one front takes: the names it answers to, the media types of its writes, its
    limits, and the headers of its answers."""

    hosts: tuple[AllowedHost, ...] = ()
    origins: tuple[str, ...] = ()
    # Media types of the requests that may change something (POST).
    media_types: frozenset[str] = frozenset({JSON})
    max_body_bytes: int = defaults.HTTP_MAX_BODY_BYTES
    max_nesting: int = defaults.HTTP_MAX_NESTING
    headers: tuple[tuple[str, str], ...] = API_HEADERS
    # The flags that widen hosts and origins, named in refusals.
    hosts_flag: str = "--mcp-allowed-hosts"
    origins_flag: str = "--mcp-allowed-origins"
    _origins: frozenset[tuple[str, str, int]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        parsed = (_origin_parts(origin) for origin in self.origins)
        object.__setattr__(self, "_origins", frozenset(p for p in parsed if p is not None))

    def host_allowed(self, value: str) -> bool:
        split = _split_host(value)
        if split is None:
            return False
        name, port = split
        return name in LOOPBACK_NAMES or any(h.matches(name, port) for h in self.hosts)

    def origin_allowed(self, value: str) -> bool:
        parts = _origin_parts(value)
        if parts is None:
            return False
        _scheme, name, port = parts
        if name in LOOPBACK_NAMES or parts in self._origins:
            return True
        # A page served through an allowed name is this front's own page.
        return any(h.matches(name, port) for h in self.hosts)


def _split_host(value: str) -> tuple[str, int | None] | None:
    """A Host header's (name, port), lower case; None when it is not NAME[:PORT]."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[: end + 1], value[end + 1 :]
        try:
            ipaddress.IPv6Address(name[1:-1])
        except ValueError:
            return None
        if rest and not rest.startswith(":"):
            return None
        port_text = rest[1:] if rest else None
    else:
        name, sep, port_text_or_empty = value.partition(":")
        port_text = port_text_or_empty if sep else None
        if not _NAME.fullmatch(name):
            return None
    if port_text is None:
        return name, None
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        return None
    return name, int(port_text)


_NAME = re.compile(r"[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?")


def _origin_parts(value: str) -> tuple[str, str, int] | None:
    """An origin's (scheme, name, port), the port defaulted; None for ``null`` or anything
    that is not SCHEME://NAME[:PORT]."""
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or parts.path or parts.query or parts.fragment:
        return None
    if parts.username is not None or parts.password is not None:
        return None
    split = _split_host(parts.netloc)
    if split is None:
        return None
    return parts.scheme, split[0], port if port is not None else DEFAULT_PORTS[parts.scheme]


def _origin_text(scheme: str, name: str, port: int) -> str:
    return f"{scheme}://{name}" + ("" if DEFAULT_PORTS[scheme] == port else f":{port}")


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
