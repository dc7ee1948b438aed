"""The console's pages: Jinja2 templates, what every page shows, and the filters they use."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from sidecar.console import timeline
from sidecar.console.access import csrf_token
from sidecar.console.sessions import Sessions
from sidecar.console.state import ConsoleState
from sidecar.ops.terminal import escaped

HERE = Path(__file__).parent


class Pages:
    """The console's pages, each rendered with what every page shows beside its own context:
    the chain's verdict, the ledger's head and size, what is pending, who is signed in."""

    def __init__(
        self,
        state: ConsoleState,
        sessions: Sessions,
        *,
        trace_url_template: str | None,
        api_token_set: bool,
    ) -> None:
        self.state = state
        self.sessions = sessions
        self.api_token_set = api_token_set
        templates = Jinja2Templates(directory=str(HERE / "templates"))
        templates.env.globals["lanes"] = timeline.LANES
        # A link from each traced entry to the trace viewer (--trace-url-template).
        templates.env.globals["trace_url"] = (
            partial(trace_url, trace_url_template) if trace_url_template else None
        )
        # Every value a page shows passes here before HTML escaping: run ids, rules, tools
        # and reasons are callers', and a control character shows as its escape (\x1b).
        # Newlines and tabs stay, for the recorded results the pages lay out.
        templates.env.finalize = _shown
        templates.env.filters["clock"] = _clock
        templates.env.filters["short"] = _short
        templates.env.filters["bytes"] = _bytes
        self.templates = templates

    def page(
        self, request: Request, name: str, context: dict[str, Any], status: int = 200
    ) -> Response:
        state = self.state
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
            "signed_in": self.sessions.operator(request.session)
            or self.sessions.api(request.session),
        }
        return self.templates.TemplateResponse(
            request, name, {**base, **context}, status_code=status
        )

    def sign_in(self, request: Request, error: str = "", status: int = 200) -> Response:
        return self.templates.TemplateResponse(
            request,
            "sign_in.html",
            {"csrf": csrf_token(request), "error": error, "api_token": self.api_token_set},
            status_code=status,
        )


def trace_url(template: str, trace_id: str) -> str:
    """The trace viewer's page of ``trace_id``: the template with ``{trace_id}`` filled in."""
    return template.replace("{trace_id}", quote(trace_id, safe=""))


def _shown(value: Any) -> Any:
    if isinstance(value, Markup):
        return value  # built by the templates themselves
    return escaped(value, keep="\n\t") if isinstance(value, str) else value


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
