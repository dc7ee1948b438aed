"""The console's web application: Starlette routes, Jinja2 pages, and their JSON twins.

Pages are rendered on the server, and reading them needs no JavaScript. A form that
changes something is posted by the console's one script (static/console.js) as JSON, the
only type a POST here takes: a page of another site can make a browser send a form's
encodings anywhere without asking first, never JSON. A POST that is taken answers
``{"location": URL}``, where the script goes next; one that is refused answers its page
again, the refusal shown and the fields kept, which the script puts in place. Access:

- reading is open to clients on loopback (a port-forward arrives there); any
  other client needs the operator's token, as ``Authorization: Bearer`` or
  through the sign-in form, and without a token nobody else gets in at all; a session
  signed in lasts 12 hours at most, ends when the token it signed in with is rotated,
  and signs out (:mod:`~sidecar.console.sessions`);
- resolving needs the token every time, typed into the form, and a form token
  bound to the browser's session (a request forged by another site has neither);
- behind a sign-in proxy (``--operator-header``), the operator is who the proxy's header
  names, recorded in the decision; the header is trusted only when so configured;
- with an API token (``--api-token-file``), every request needs it as well, on top of
  the rules above: as ``Authorization: Bearer``, or a session signed in with it. The
  operator's token stands for it; it opens nothing the rules above keep closed;
- before any of that, the HTTP guard (sidecar.ops.http_guard): Host and Origin on every
  route (a name rebound to loopback reaches nothing), ``application/json`` on every POST,
  the body's size and nesting; and the hardening headers on every answer.

The console reads the ledger through OperatorLedger, whose queries page in SQL,
and appends nothing but an operator's decisions; it is never on a write's path.

Here the application is put together; its parts are modules of their own: who gets in
(:mod:`~sidecar.console.access`), what a request asks (:mod:`~sidecar.console.forms`),
the routes (:mod:`~sidecar.console.routes`) and the pages they render
(:mod:`~sidecar.console.rendering`).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware

from sidecar.console.access import AccessMiddleware, api_token_gate, console_policy
from sidecar.console.chain import ChainWatch
from sidecar.console.rendering import Pages
from sidecar.console.routes import ConsoleRoutes
from sidecar.console.sessions import MAX_SESSION_SECONDS, Sessions
from sidecar.console.state import ConsoleState
from sidecar.ledger.operator_queries import OperatorLedger
from sidecar.ops import http_guard
from sidecar.ops.auth import TokenFile

# The policy stays importable from here, beside the application it guards.
__all__ = ["ConsoleState", "console_policy", "create_app"]


def create_app(
    ledger: OperatorLedger,
    *,
    token: str | None,
    chain: ChainWatch,
    session_secret: str | None = None,
    trace_url_template: str | None = None,
    policy: http_guard.RequestPolicy | None = None,
    operator_header: str | None = None,
    api_token: TokenFile | None = None,
    clock: Callable[[], float] = time.time,
) -> Starlette:
    state = ConsoleState(ledger, token, chain, operator_header=operator_header)
    sessions = Sessions(token, api_token, clock=clock)
    pages = Pages(
        state,
        sessions,
        trace_url_template=trace_url_template,
        api_token_set=api_token is not None,
    )
    routes = ConsoleRoutes(state, pages, api_token, sessions)
    middleware = [
        # Outermost first: the guard's layers, then the console's own.
        *http_guard.middleware(policy or console_policy()),
        Middleware(
            SessionMiddleware,
            secret_key=session_secret or secrets.token_urlsafe(32),
            session_cookie="actonce_console",
            same_site="strict",
            # The cookie's life; the sign-in's own is kept in the session (sessions.py).
            max_age=MAX_SESSION_SECONDS,
        ),
        *api_token_gate(api_token, token, sessions),
        Middleware(AccessMiddleware, token=token, sessions=sessions),
    ]
    app = Starlette(routes=routes.routes(), middleware=middleware)
    app.state.console = state
    return app
