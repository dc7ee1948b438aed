"""Who the console lets in: the HTTP guard's policy, the operator's token, sessions, the API token.

Reading is open to clients on loopback; any other client needs the operator's token, as
``Authorization: Bearer`` or through the sign-in form (:class:`AccessMiddleware`). With an
API token, a gate before it asks for that token as well (:func:`api_token_gate`).
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from sidecar.console.sessions import CSRF, Sessions
from sidecar.ops import auth, http_guard
from sidecar.ops.auth import TokenFile

# Pages of the console's own, styled by its own stylesheet, scripted by its own script
# (nothing inline), which fetches from here alone: no frame, forms posted here only. A
# same-origin referrer, not none: a browser sends `Origin: null` on a POST from a page
# whose policy is no-referrer, and the guard refuses that origin.
PAGE_HEADERS: tuple[tuple[str, str], ...] = (
    (
        "content-security-policy",
        "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; "
        "img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    ("x-frame-options", "DENY"),
    ("x-content-type-options", "nosniff"),
    ("cache-control", "no-store"),
    ("referrer-policy", "same-origin"),
)


def console_policy(
    hosts: tuple[http_guard.AllowedHost, ...] = (), origins: tuple[str, ...] = ()
) -> http_guard.RequestPolicy:
    """What the console takes: JSON on a POST, as its script sends its forms; its pages'
    headers."""
    return http_guard.RequestPolicy(
        hosts=hosts,
        origins=origins,
        media_types=frozenset({http_guard.JSON}),
        headers=PAGE_HEADERS,
        hosts_flag="--allowed-hosts",
        origins_flag="--allowed-origins",
    )


def _is_loopback(host: str | None) -> bool:
    if not host:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def same_token(given: str, token: str | None) -> bool:
    return token is not None and hmac.compare_digest(given.encode(), token.encode())


def csrf_token(request: Request) -> str:
    session = request.session
    if CSRF not in session:
        session[CSRF] = secrets.token_urlsafe(32)
    return str(session[CSRF])


class AccessMiddleware:
    """Loopback reads freely; anyone else needs the token (header or signed-in session)."""

    def __init__(self, app: Any, token: str | None, sessions: Sessions) -> None:
        self.app = app
        self.token = token
        self.sessions = sessions

    async def __call__(
        self, scope: dict[str, Any], receive: Callable[[], Awaitable[Any]], send: Any
    ) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        if self._allowed(request):
            await self.app(scope, receive, send)
            return
        if self.token is None:
            response: Response = Response(
                "The console answers loopback only unless it has a token (--token-file).\n",
                status_code=403,
                media_type="text/plain",
            )
        elif scope["path"].startswith("/api/"):
            response = JSONResponse({"error": "needs the operator's token"}, status_code=401)
        else:
            response = RedirectResponse("/sign-in", status_code=303)
        await response(scope, receive, send)

    def _allowed(self, request: Request) -> bool:
        if _is_loopback(request.client.host if request.client else None):
            return True
        if self.token is None:
            return False
        if request.url.path in ("/sign-in",) or request.url.path.startswith("/static/"):
            return True
        header = request.headers.get("authorization", "")
        if header.startswith("Bearer ") and same_token(header[7:], self.token):
            return True
        return self.sessions.operator(request.session)


def api_token_gate(
    api_token: TokenFile | None, token: str | None, sessions: Sessions
) -> list[Middleware]:
    """With an API token, a gate before AccessMiddleware: both must let a request in.

    The gate lets in a request that carries the API token or the operator's, or whose
    session signed in with either; the sign-in form and the stylesheet show nothing and
    need neither. A page it refuses sends the browser to the sign-in form; /api/ gets 401.
    """
    if api_token is None:
        return []

    def admit(scope: auth.Scope) -> bool:
        session = scope.get("session") or {}
        if sessions.operator(session) or sessions.api(session):
            return True
        given = auth.http_bearer(scope)
        return given is not None and same_token(given.decode("utf-8", "replace"), token)

    return [
        Middleware(
            auth.ApiTokenMiddleware,
            token=api_token,
            exempt=lambda path: path == "/sign-in" or path.startswith("/static/"),
            admit=admit,
            refuse=_refuse_without_api_token,
        )
    ]


async def _refuse_without_api_token(
    scope: auth.Scope, receive: auth.Receive, send: auth.Send
) -> None:
    if scope["type"] == "http" and not str(scope.get("path", "")).startswith("/api/"):
        await RedirectResponse("/sign-in", status_code=303)(scope, receive, send)
        return
    await auth.refuse_http(scope, receive, send)
