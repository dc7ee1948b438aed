"""The console's routes: each page and its JSON twin under /api/, and the two forms.

A page and its twin are one handler: the path says which answer it gives. Resolving an
item reads as its phases: the form as the console's script posts it, the operator's token
and name, the decision and its result, then the decision appended to the ledger.
"""

from __future__ import annotations

import hmac
from typing import Any
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from sidecar.console import timeline
from sidecar.console.access import same_token
from sidecar.console.forms import (
    UNREADABLE,
    int_param,
    names_nothing,
    page_link,
    posted_fields,
    run_filter,
    taken,
)
from sidecar.console.rendering import HERE, Pages
from sidecar.console.sessions import CSRF, Sessions
from sidecar.console.state import PAGE_SIZE, PENDING_SHOWN, RUN_PAGE_EVENTS, ConsoleState
from sidecar.errors import InvalidArgument
from sidecar.ledger.operator_queries import OUTCOMES, RunFilter, RunsPage
from sidecar.ledger.pending import Decision, DecisionRefused
from sidecar.ops.auth import TokenFile
from sidecar.rules import canonical


class _Refused(Exception):
    """A resolve form refused before anything was recorded: its status and what it says."""

    def __init__(self, status: int, message: str, *, keep_fields: bool = True) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.keep_fields = keep_fields


class ConsoleRoutes:
    """The handlers, over the state they share and the pages they render."""

    def __init__(
        self, state: ConsoleState, pages: Pages, api_token: TokenFile | None, sessions: Sessions
    ) -> None:
        self.state = state
        self.pages = pages
        self.api_token = api_token
        self.sessions = sessions

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/", self.runs),
            Route("/runs/{run_id:path}", self.run),
            Route("/pending", self.pending_page),
            Route("/pending/{item_id}/resolve", self.resolve, methods=["POST"]),
            Route("/sign-in", self.sign_in, methods=["GET", "POST"]),
            Route("/sign-out", self.sign_out, methods=["POST"]),
            Route("/api/runs", self.runs),
            Route("/api/runs/{run_id:path}", self.run),
            Route("/api/pending", self.pending_page),
            Route("/api/status", self.status),
            Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
        ]

    # -- reading ---------------------------------------------------------------------------

    async def runs(self, request: Request) -> Response:
        filters, offset = run_filter(request)
        result = await run_in_threadpool(_runs_page, self.state, filters, offset)
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
            self.pages.page,
            request,
            "runs.html",
            {
                "page": result,
                "filters": filters,
                "outcomes": list(OUTCOMES),
                "total_runs": self.state.ledger.run_count(),
                "prev": page_link(query, max(offset - PAGE_SIZE, 0)) if offset else "",
                "next": page_link(query, offset + PAGE_SIZE) if result.more else "",
            },
        )

    async def run(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        after = int_param(request.query_params.get("after"), 0)
        events, items = await run_in_threadpool(_run_events, self.state, run_id, after)
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
            message = {"message": f"No run {run_id} in the ledger."}
            return await run_in_threadpool(self.pages.page, request, "error.html", message, 404)
        view = timeline.build(run_id, events, {i.id for i in items})
        later = events[-1].seq if len(events) == RUN_PAGE_EVENTS else 0
        return await run_in_threadpool(
            self.pages.page,
            request,
            "run.html",
            {"run": view, "items": items, "later": later, "after": after},
        )

    async def pending_page(self, request: Request) -> Response:
        items = await run_in_threadpool(self.state.pending)
        flying = await run_in_threadpool(self.state.in_flight)
        if request.url.path.startswith("/api/"):
            return JSONResponse(
                {
                    "pending": [i.as_json() for i in items],
                    "in_flight": [{**f.item.as_json(), "note": f.note} for f in flying],
                }
            )
        shown = {"items": items[:PENDING_SHOWN], "total": len(items), "in_flight": flying}
        return await run_in_threadpool(self.pages.page, request, "pending.html", shown)

    async def status(self, request: Request) -> Response:
        state = self.state
        verdict = state.chain.verdict()
        head = await run_in_threadpool(state.ledger.head)
        size = await run_in_threadpool(state.ledger.size_bytes)
        return JSONResponse({"chain": verdict, "events": head[0], "size_bytes": size})

    # -- resolving -------------------------------------------------------------------------

    async def resolve(self, request: Request) -> Response:
        item_id = request.path_params["item_id"]
        fields = await posted_fields(request)
        try:
            if fields is None:
                raise _Refused(400, UNREADABLE, keep_fields=False)
            self._check_form(request, item_id, fields)
            by = self._operator_name(request, fields)
            decision, result_json, digest = _decision_of(fields)
            stored = await run_in_threadpool(
                lambda: self.state.ledger.resolve(
                    item_id,
                    decision,
                    by=by,
                    reason=fields.get("reason", "").strip(),
                    result_json=result_json,
                    digest=digest,
                    by_header=self.state.operator_header or "",
                )
            )
        except _Refused as refused:
            kept = fields if fields is not None and refused.keep_fields else {}
            return await self._refuse(request, refused.status, refused.message, item_id, kept)
        except DecisionRefused as exc:
            return await self._refuse(request, 409, str(exc), item_id, fields or {})
        return taken(f"/runs/{quote(stored.event.run_id)}#event-{stored.seq}")

    def _check_form(self, request: Request, item_id: str, fields: dict[str, str]) -> None:
        """The form is the console's own, from this browser's session, with the token."""
        if names_nothing(item_id, *fields.values()):
            raise _Refused(
                400, "The form holds a NUL character: nothing was recorded.", keep_fields=False
            )
        expected = request.session.get("csrf")
        if not expected or not hmac.compare_digest(fields.get("csrf", ""), str(expected)):
            raise _Refused(
                403, "The form expired or came from elsewhere: reload the page and try again."
            )
        if self.state.token is None:
            raise _Refused(
                403,
                "Resolving from the console needs the console "
                "started with --token-file; use actonce audit resolve.",
            )
        if not same_token(fields.get("token", ""), self.state.token):
            raise _Refused(403, "Wrong or missing operator token: nothing was recorded.")

    def _operator_name(self, request: Request, fields: dict[str, str]) -> str:
        """Who decides: the sign-in proxy's name when there is one, else the form's."""
        if self.state.operator_header is None:
            return fields.get("by", "").strip()
        signed_in = self.state.operator(request)
        if signed_in is None:
            raise _Refused(
                403,
                "The sign-in proxy named no operator: open the console through it. "
                "Nothing was recorded.",
            )
        return signed_in

    async def _refuse(
        self, request: Request, status: int, message: str, item_id: str, fields: dict[str, str]
    ) -> Response:
        items = await run_in_threadpool(self.state.pending)
        kept = {k: v for k, v in fields.items() if k in ("by", "reason", "result_json", "decision")}
        return await run_in_threadpool(
            self.pages.page,
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

    # -- signing in ------------------------------------------------------------------------

    async def sign_in(self, request: Request) -> Response:
        if request.method != "POST":
            return self.pages.sign_in(request)
        fields = await posted_fields(request)
        if fields is None:
            return self.pages.sign_in(request, UNREADABLE, 400)
        given = fields.get("token", "")
        csrf = fields.get("csrf", "")
        expected = str(request.session.get("csrf", ""))
        operator = same_token(given, self.state.token)
        api_token = self.api_token
        api = api_token is not None and api_token.matches(given.encode())
        if expected and hmac.compare_digest(csrf, expected) and (operator or api):
            # Signed in with the API token, a session passes that token's gate alone.
            self.sessions.sign_in(request.session, operator=operator)
            return taken("/")
        nor = ", nor the API token" if api_token is not None else ""
        return self.pages.sign_in(request, f"That is not the operator's token{nor}.", 403)

    async def sign_out(self, request: Request) -> Response:
        """End this browser's session: with the form token, as every POST here, so that
        another site cannot sign its visitor out."""
        fields = await posted_fields(request)
        expected = str(request.session.get(CSRF, ""))
        csrf = (fields or {}).get("csrf", "")
        if not expected or not hmac.compare_digest(csrf, expected):
            message = "The form expired or came from elsewhere: reload the page and try again."
            return JSONResponse(
                {"reason": "FORM_EXPIRED", "failure_class": "REFUSED", "message": message},
                status_code=403,
            )
        self.sessions.sign_out(request.session)
        return taken("/sign-in")


def _decision_of(fields: dict[str, str]) -> tuple[Decision, str, str]:
    """The decision the form takes, with its result (a step that ran) and the result's
    digest, the result in canonical form."""
    try:
        decision = Decision(fields.get("decision", ""))
    except ValueError:
        raise _Refused(400, "Choose a decision.") from None
    result_json = fields.get("result_json", "").strip()
    if decision is not Decision.RAN or not result_json:
        return decision, "", ""
    try:
        _value, form_bytes = canonical.parse_canonical(result_json, "result_json")
    except InvalidArgument:
        raise _Refused(400, "The result is not valid JSON.") from None
    return decision, form_bytes.decode(), canonical.digest(form_bytes)


def _runs_page(state: ConsoleState, filters: RunFilter, offset: int) -> Any:
    if names_nothing(filters.run_id, filters.rule):
        return RunsPage([], offset, PAGE_SIZE, more=False)
    counts: dict[str, int] = {}
    for item in state.pending():
        counts[item.run_id] = counts.get(item.run_id, 0) + 1
    return state.ledger.runs_page(filters, offset=offset, limit=PAGE_SIZE, pending_runs=counts)


def _run_events(state: ConsoleState, run_id: str, after: int) -> tuple[list[Any], list[Any]]:
    if names_nothing(run_id):
        return [], []
    events = state.ledger.run_events(run_id, after=after, limit=RUN_PAGE_EVENTS)
    items = [i for i in state.pending() if i.run_id == run_id]
    return events, items
