"""The console's web application: Starlette routes, Jinja2 pages, and their JSON twins.

Pages are rendered on the server, and reading them needs no JavaScript. A form that
changes something is posted by the console's one script (static/console.js) as JSON, the
only type a POST here takes: a page of another site can make a browser send a form's
encodings anywhere without asking first, never JSON. A POST that is taken answers
``{"location": URL}``, where the script goes next; one that is refused answers its page
again, the refusal shown and the fields kept, which the script puts in place. Access:

- reading is open to clients on loopback (a port-forward arrives there); any
  other client needs the operator's token, as ``Authorization: Bearer`` or
  through the sign-in form, and without a token nobody else gets in at all;
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

Longer than most modules, on purpose: each page and its JSON twin are one route
here, with the access rules beside them.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from sidecar.console import timeline
from sidecar.console.chain import ChainWatch
from sidecar.errors import InvalidArgument
from sidecar.ledger.operator import (
    OUTCOMES,
    InFlight,
    OperatorLedger,
    PendingTracker,
    RunFilter,
    RunsPage,
)
from sidecar.ledger.pending import Decision, DecisionRefused, PendingItem
from sidecar.ops import auth, http_guard
from sidecar.ops.auth import TokenFile
from sidecar.rules import canonical

HERE = Path(__file__).parent
PAGE_SIZE = 50
RUN_PAGE_EVENTS = 2000
PENDING_SHOWN = 200  # the newest; `actonce audit pending` and /api/pending list them all
MAX_OPERATOR_BYTES = canonical.MAX_NAME_BYTES
SQL_INT_MAX = 2**63 - 1

# Pages of the console's own, styled by its own stylesheet, scripted by its own script
# (nothing inline), which fetches from here alone: no frame, forms posted here only. A
# same-origin referrer, not none: a browser sends `Origin: null` on a POST from a page
# whose policy is no-referrer, and the guard refuses that origin.
PAGE_HEADERS: tuple[tuple[str, str], ...] = (
    ("content-security-policy",
     "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; "
     "img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
    ("x-frame-options", "DENY"),
    ("x-content-type-options", "nosniff"),
    ("cache-control", "no-store"),
    ("referrer-policy", "same-origin"),
)  # fmt: skip


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


@dataclass
class ConsoleState:
    """What the routes share: the ledger, what is pending in it, the token, the chain's watcher."""

    ledger: OperatorLedger
    token: str | None
    chain: ChainWatch
    # The header a sign-in proxy names the operator in; None: the operator types a name.
    operator_header: str | None = None
    tracker: PendingTracker = field(init=False)

    def __post_init__(self) -> None:
        self.tracker = PendingTracker(self.ledger)

    def pending(self) -> list[PendingItem]:
        return self.tracker.items()

    def operator(self, request: Request) -> str | None:
        """Who the sign-in proxy says sends ``request``; None when no proxy is configured
        or it named nobody usable."""
        if self.operator_header is None:
            return None
        name = request.headers.get(self.operator_header, "").strip()
        if not name or len(name.encode()) > MAX_OPERATOR_BYTES or not name.isprintable():
            return None
        return name

    def in_flight(self) -> list[InFlight]:
        return self.tracker.in_flight()


def _is_loopback(host: str | None) -> bool:
    if not host:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _same_token(given: str, token: str | None) -> bool:
    return token is not None and hmac.compare_digest(given.encode(), token.encode())


def csrf_token(request: Request) -> str:
    session = request.session
    if "csrf" not in session:
        session["csrf"] = secrets.token_urlsafe(32)
    return str(session["csrf"])


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
) -> Starlette:
    state = ConsoleState(ledger, token, chain, operator_header=operator_header)
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.globals["lanes"] = timeline.LANES
    # A link from each traced entry to the trace viewer (--trace-url-template).
    templates.env.globals["trace_url"] = (
        partial(trace_url, trace_url_template) if trace_url_template else None
    )
    templates.env.filters["clock"] = _clock
    templates.env.filters["short"] = _short
    templates.env.filters["bytes"] = _bytes

    def page(request: Request, name: str, context: dict[str, Any], status: int = 200) -> Response:
        items = state.pending()
        base = {
            "chain": state.chain.verdict(),
            "head": state.ledger.head()[0],
            "size": state.ledger.size_bytes(),
            "pending_count": len(items),
            "csrf": csrf_token(request),
            "token_set": state.token is not None,
            "proxy_signs_in": state.operator_header is not None,
            "operator": state.operator(request),
        }
        return templates.TemplateResponse(request, name, {**base, **context}, status_code=status)

    async def runs(request: Request) -> Response:
        filters, offset = _run_filter(request)
        result = await run_in_threadpool(_runs_page, state, filters, offset)
        if request.url.path.startswith("/api/"):
            return JSONResponse(
                {
                    "runs": [r.as_json() for r in result.runs],
                    "offset": result.offset,
                    "limit": result.limit,
                    "more": result.more,
                }
            )
        query = {k: v for k, v in request.query_params.items() if k != "offset"}
        return await run_in_threadpool(
            page,
            request,
            "runs.html",
            {
                "page": result,
                "filters": filters,
                "outcomes": list(OUTCOMES),
                "total_runs": state.ledger.run_count(),
                "prev": _link(query, max(offset - PAGE_SIZE, 0)) if offset else "",
                "next": _link(query, offset + PAGE_SIZE) if result.more else "",
            },
        )

    async def run(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        after = _int(request.query_params.get("after"), 0)
        events, items = await run_in_threadpool(_run_events, state, run_id, after)
        if request.url.path.startswith("/api/"):
            if not events and after == 0:
                return JSONResponse({"error": f"no run {run_id}"}, status_code=404)
            return JSONResponse(
                {
                    "run_id": run_id,
                    "pending": [i.as_json() for i in items],
                    "events": [timeline.event_json(e) for e in events],
                    "more": len(events) == RUN_PAGE_EVENTS,
                }
            )
        if not events and after == 0:
            return await run_in_threadpool(
                page, request, "error.html", {"message": f"No run {run_id} in the ledger."}, 404
            )
        view = timeline.build(run_id, events, {i.id for i in items})
        later = events[-1].seq if len(events) == RUN_PAGE_EVENTS else 0
        return await run_in_threadpool(
            page,
            request,
            "run.html",
            {"run": view, "items": items, "later": later, "after": after},
        )

    async def pending_page(request: Request) -> Response:
        items = await run_in_threadpool(state.pending)
        flying = await run_in_threadpool(state.in_flight)
        if request.url.path.startswith("/api/"):
            return JSONResponse(
                {
                    "pending": [i.as_json() for i in items],
                    "in_flight": [{**f.item.as_json(), "note": f.note} for f in flying],
                }
            )
        shown = {"items": items[:PENDING_SHOWN], "total": len(items), "in_flight": flying}
        return await run_in_threadpool(page, request, "pending.html", shown)

    async def resolve(request: Request) -> Response:
        item_id = request.path_params["item_id"]
        fields = await posted_fields(request)
        if fields is None:
            return await _refuse(request, 400, UNREADABLE, item_id, {})
        if _names_nothing(item_id, *fields.values()):
            return await _refuse(
                request,
                400,
                "The form holds a NUL character: nothing was recorded.",
                item_id,
                {},
            )
        expected = request.session.get("csrf")
        if not expected or not hmac.compare_digest(fields.get("csrf", ""), str(expected)):
            return await _refuse(
                request,
                403,
                "The form expired or came from elsewhere: reload the page and try again.",
                item_id,
                fields,
            )
        if state.token is None:
            return await _refuse(
                request,
                403,
                "Resolving from the console needs the console "
                "started with --token-file; use actonce audit resolve.",
                item_id,
                fields,
            )
        if not _same_token(fields.get("token", ""), state.token):
            return await _refuse(
                request,
                403,
                "Wrong or missing operator token: nothing was recorded.",
                item_id,
                fields,
            )
        by = fields.get("by", "").strip()
        if state.operator_header is not None:
            signed_in = state.operator(request)
            if signed_in is None:
                return await _refuse(
                    request,
                    403,
                    "The sign-in proxy named no operator: open the console through it. "
                    "Nothing was recorded.",
                    item_id,
                    fields,
                )
            by = signed_in
        try:
            decision = Decision(fields.get("decision", ""))
        except ValueError:
            return await _refuse(request, 400, "Choose a decision.", item_id, fields)
        result_json = fields.get("result_json", "").strip()
        if decision is not Decision.RAN:
            result_json = ""
        digest = ""
        if result_json:
            try:
                _value, form_bytes = canonical.parse_canonical(result_json, "result_json")
            except InvalidArgument:
                return await _refuse(request, 400, "The result is not valid JSON.", item_id, fields)
            result_json, digest = form_bytes.decode(), canonical.digest(form_bytes)
        try:
            stored = await run_in_threadpool(
                lambda: state.ledger.resolve(
                    item_id,
                    decision,
                    by=by,
                    reason=fields.get("reason", "").strip(),
                    result_json=result_json,
                    digest=digest,
                    by_header=state.operator_header or "",
                )
            )
        except DecisionRefused as exc:
            return await _refuse(request, 409, str(exc), item_id, fields)
        return taken(f"/runs/{quote(stored.event.run_id)}#event-{stored.seq}")

    async def _refuse(
        request: Request, status: int, message: str, item_id: str, fields: dict[str, str]
    ) -> Response:
        items = await run_in_threadpool(state.pending)
        kept = {k: v for k, v in fields.items() if k in ("by", "reason", "result_json", "decision")}
        return await run_in_threadpool(
            page,
            request,
            "pending.html",
            {
                "items": items[:PENDING_SHOWN],
                "total": len(items),
                "error": message,
                "error_item": item_id,
                "kept": kept,
            },
            status,
        )

    async def status(request: Request) -> Response:
        verdict = state.chain.verdict()
        head = await run_in_threadpool(state.ledger.head)
        size = await run_in_threadpool(state.ledger.size_bytes)
        return JSONResponse({"chain": verdict, "events": head[0], "size_bytes": size})

    def sign_in_page(request: Request, error: str = "", status: int = 200) -> Response:
        return templates.TemplateResponse(
            request,
            "sign_in.html",
            {"csrf": csrf_token(request), "error": error, "api_token": api_token is not None},
            status_code=status,
        )

    async def sign_in(request: Request) -> Response:
        if request.method != "POST":
            return sign_in_page(request)
        fields = await posted_fields(request)
        if fields is None:
            return sign_in_page(request, UNREADABLE, 400)
        given = fields.get("token", "")
        csrf = fields.get("csrf", "")
        expected = str(request.session.get("csrf", ""))
        operator = _same_token(given, token)
        api = api_token is not None and api_token.matches(given.encode())
        if expected and hmac.compare_digest(csrf, expected) and (operator or api):
            # Signed in with the API token, a session passes that token's gate alone.
            request.session[SIGNED_IN if operator else API_SIGNED_IN] = True
            return taken("/")
        nor = ", nor the API token" if api_token is not None else ""
        return sign_in_page(request, f"That is not the operator's token{nor}.", 403)

    routes = [
        Route("/", runs),
        Route("/runs/{run_id:path}", run),
        Route("/pending", pending_page),
        Route("/pending/{item_id}/resolve", resolve, methods=["POST"]),
        Route("/sign-in", sign_in, methods=["GET", "POST"]),
        Route("/api/runs", runs),
        Route("/api/runs/{run_id:path}", run),
        Route("/api/pending", pending_page),
        Route("/api/status", status),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    middleware = [
        # Outermost first: the guard's layers, then the console's own.
        *http_guard.middleware(policy or console_policy()),
        Middleware(
            SessionMiddleware,
            secret_key=session_secret or secrets.token_urlsafe(32),
            session_cookie="actonce_console",
            same_site="strict",
        ),
        *_api_token_gate(api_token, token),
        Middleware(AccessMiddleware, token=token),
    ]
    app = Starlette(routes=routes, middleware=middleware)
    app.state.console = state
    return app


class AccessMiddleware:
    """Loopback reads freely; anyone else needs the token (header or signed-in session)."""

    def __init__(self, app: Any, token: str | None) -> None:
        self.app = app
        self.token = token

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
        if header.startswith("Bearer ") and _same_token(header[7:], self.token):
            return True
        return bool(request.session.get(SIGNED_IN))


# Session keys: signed in with the operator's token, or with the API token.
SIGNED_IN = "signed_in"
API_SIGNED_IN = "api_signed_in"


def _api_token_gate(api_token: TokenFile | None, token: str | None) -> list[Middleware]:
    """With an API token, a gate before AccessMiddleware: both must let a request in.

    The gate lets in a request that carries the API token or the operator's, or whose
    session signed in with either; the sign-in form and the stylesheet show nothing and
    need neither. A page it refuses sends the browser to the sign-in form; /api/ gets 401.
    """
    if api_token is None:
        return []

    def admit(scope: auth.Scope) -> bool:
        session = scope.get("session") or {}
        if session.get(SIGNED_IN) or session.get(API_SIGNED_IN):
            return True
        given = auth.http_bearer(scope)
        return given is not None and _same_token(given.decode("utf-8", "replace"), token)

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


UNREADABLE = (
    "The form did not come as the console's page sends it (a JSON object of text fields): "
    "nothing was recorded. Reload the page and try again."
)


async def posted_fields(request: Request) -> dict[str, str] | None:
    """A form's fields as the console's script posts them, a JSON object of strings; None
    for any other body. The guard has checked the type, the size and the nesting."""
    try:
        value = json.loads(await request.body())
    except ValueError:  # not JSON, or not UTF-8
        return None
    if not isinstance(value, dict) or not all(_is_text(v) for v in value.values()):
        return None
    return value


def _is_text(value: object) -> bool:
    # A lone surrogate (an escape such as "\ud800") is no text: it has no UTF-8 to compare.
    if not isinstance(value, str):
        return False
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def taken(location: str) -> Response:
    """A POST that was taken: where the console's script goes next. Named, not redirected
    to: a fetch follows a redirect itself, and hides the fragment (the decision's event)."""
    return JSONResponse({"location": location})


def _names_nothing(*texts: str) -> bool:
    """Whether an id or filter holds a NUL: the ledger holds no such id (the sidecar refuses
    them as input), and PostgreSQL cannot even be asked about one."""
    return any("\x00" in text for text in texts)


def _runs_page(state: ConsoleState, filters: RunFilter, offset: int) -> Any:
    if _names_nothing(filters.run_id, filters.rule):
        return RunsPage([], offset, PAGE_SIZE, more=False)
    counts: dict[str, int] = {}
    for item in state.pending():
        counts[item.run_id] = counts.get(item.run_id, 0) + 1
    return state.ledger.runs_page(filters, offset=offset, limit=PAGE_SIZE, pending_runs=counts)


def _run_events(state: ConsoleState, run_id: str, after: int) -> tuple[list[Any], list[Any]]:
    if _names_nothing(run_id):
        return [], []
    events = state.ledger.run_events(run_id, after=after, limit=RUN_PAGE_EVENTS)
    items = [i for i in state.pending() if i.run_id == run_id]
    return events, items


def _run_filter(request: Request) -> tuple[RunFilter, int]:
    q = request.query_params
    outcome = q.get("outcome", "")
    filters = RunFilter(
        run_id=q.get("q", "").strip(),
        rule=q.get("rule", "").strip(),
        since=_iso(q.get("since", "")),
        until=_iso(q.get("until", "")),
        outcome=outcome if outcome in OUTCOMES else "",
        pending_only=q.get("pending", "") in ("1", "on", "true"),
    )
    return filters, max(_int(q.get("offset"), 0), 0)


def _iso(text: str) -> str:
    # A datetime-local field gives "2026-11-30T08:00" with no zone: the ledger's times are UTC.
    text = text.strip()
    if not text:
        return ""
    try:
        return datetime.fromisoformat(text).isoformat()
    except ValueError:
        return ""


def _int(text: str | None, default: int) -> int:
    try:
        value = int(text) if text else default
    except ValueError:
        return default
    # The ledger's SQL takes 64-bit integers: beyond them there is no page to show anyway.
    return max(-SQL_INT_MAX, min(value, SQL_INT_MAX))


def _link(query: dict[str, str], offset: int) -> str:
    return "/?" + urlencode({**query, "offset": offset})


def trace_url(template: str, trace_id: str) -> str:
    """The trace viewer's page of ``trace_id``: the template with ``{trace_id}`` filled in."""
    return template.replace("{trace_id}", quote(trace_id, safe=""))


def _clock(ts: str) -> str:
    return ts[11:23] if len(ts) >= 23 else ts


def _short(text: str, keep: int = 12) -> str:
    return text if len(text) <= keep + 1 else text[:keep] + "…"


def _bytes(size: int) -> str:
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"
