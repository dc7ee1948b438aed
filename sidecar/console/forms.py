"""What a request to the console asks: a posted form's fields, a page's query.

Bad input is never an error page here: a form that is not the console's own is None, a
filter or number that does not parse is the default, and an id holding a NUL names nothing.
"""

from __future__ import annotations

import json
from datetime import datetime
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sidecar.ledger.operator_queries import OUTCOMES, RunFilter

SQL_INT_MAX = 2**63 - 1


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


def names_nothing(*texts: str) -> bool:
    """Whether an id or filter holds a NUL: the ledger holds no such id (the sidecar refuses
    them as input), and PostgreSQL cannot even be asked about one."""
    return any("\x00" in text for text in texts)


def run_filter(request: Request) -> tuple[RunFilter, int]:
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
    return filters, max(int_param(q.get("offset"), 0), 0)


def _iso(text: str) -> str:
    # A datetime-local field gives "2026-11-30T08:00" with no zone: the ledger's times are UTC.
    text = text.strip()
    if not text:
        return ""
    try:
        return datetime.fromisoformat(text).isoformat()
    except ValueError:
        return ""


def int_param(text: str | None, default: int) -> int:
    try:
        value = int(text) if text else default
    except ValueError:
        return default
    # The ledger's SQL takes 64-bit integers: beyond them there is no page to show anyway.
    return max(-SQL_INT_MAX, min(value, SQL_INT_MAX))


def page_link(query: dict[str, str], offset: int) -> str:
    return "/?" + urlencode({**query, "offset": offset})
