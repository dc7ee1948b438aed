"""The console with an API token: every route needs it, on top of the console's own rules.

The routes come from the app's own table, so that a page added later is checked too. The
token closes what was open (loopback reads) and opens nothing that was closed: a client
beyond loopback still needs the operator's token, and resolving still needs it typed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.routing import Mount, Route
from starlette.testclient import TestClient

from sidecar.console.app import console_policy, create_app
from sidecar.console.chain import ChainWatch
from sidecar.ledger.base import AuditEvent, Phase
from sidecar.ledger.operator import OperatorLedger, open_operator_ledger
from sidecar.ledger.sqlite import SqliteLedger
from sidecar.ops import auth
from sidecar.ops.http_guard import parse_allowed_hosts
from tests.console.test_console_http import csrf_of

API_TOKEN = "api-t0ken-91c4"
OPERATOR = "op-t0ken-2d7e"
LOCAL = ("127.0.0.1", 5000)
REMOTE = ("203.0.113.9", 5000)
LOCAL_URL, REMOTE_URL = "http://127.0.0.1", "http://console.example"
# What the console's script sends: a POST of any other type is refused before the token is
# looked at (sidecar.ops.http_guard).
JSON_TYPE = {"content-type": "application/json"}
OPEN = ("/sign-in", "/static/console.css")


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[OperatorLedger]:
    async def write() -> None:
        written = SqliteLedger(tmp_path / "audit.db")
        try:
            await written.append(
                AuditEvent("run-1", "a1", "BeginAttempt", Phase.ATTEMPT_BEGIN, rule="r")
            )
        finally:
            await written.close()

    asyncio.run(write())
    opened = open_operator_ledger(tmp_path / "audit.db", None)
    try:
        yield opened
    finally:
        opened.close()


def console(
    ledger: OperatorLedger, tmp_path: Path, *, operator: str | None = OPERATOR
) -> Starlette:
    token_file = tmp_path / "api.token"
    token_file.write_text(API_TOKEN + "\n")
    chain = ChainWatch(lambda: (_ for _ in ()).throw(RuntimeError("not checked here")))
    # Reached as 127.0.0.1 on loopback, and as console.example from beyond it.
    policy = console_policy(parse_allowed_hosts("console.example"))
    return create_app(
        ledger, token=operator, chain=chain, api_token=auth.TokenFile(token_file), policy=policy
    )


def requests_of(app: Starlette) -> list[tuple[str, str]]:
    """(method, path) of every route, its parameters filled in."""
    found: list[tuple[str, str]] = []
    for route in app.routes:
        if isinstance(route, Mount):
            found.append(("GET", route.path + "/console.css"))
            continue
        assert isinstance(route, Route)
        path = route.path
        for name in route.param_convertors:
            path = path.replace("{" + name + "}", "run-1")
        found += [(method, path) for method in sorted((route.methods or {"GET"}) - {"HEAD"})]
    return found


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def test_every_route_but_sign_in_refuses_a_request_without_the_api_token(
    ledger: OperatorLedger, tmp_path: Path
) -> None:
    app = console(ledger, tmp_path)
    routes = requests_of(app)
    assert {path for _m, path in routes} >= {"/", "/api/runs", "/pending", "/sign-in"}
    with TestClient(app, base_url=LOCAL_URL, client=LOCAL) as local:
        for method, path in routes:
            if path in OPEN:
                continue
            for headers in ({}, bearer("not-the-token"), bearer(API_TOKEN[:-1])):
                sent = {**headers, **JSON_TYPE} if method == "POST" else headers
                answer = local.request(method, path, headers=sent, follow_redirects=False)
                if path.startswith("/api/"):
                    assert answer.status_code == 401, (method, path)
                    assert answer.json()["reason"] == "UNAUTHENTICATED"
                else:
                    assert answer.status_code == 303, (method, path)
                    assert answer.headers["location"] == "/sign-in"
        for path in ("/", "/api/runs", "/api/runs/run-1", "/pending", "/api/status"):
            assert local.get(path, headers=bearer(API_TOKEN)).status_code == 200, path
            # The operator's token is worth more than the API token: it passes too.
            assert local.get(path, headers=bearer(OPERATOR)).status_code == 200, path
        for path in OPEN:
            assert local.get(path).status_code == 200, path


def test_the_api_token_opens_nothing_the_console_kept_closed(
    ledger: OperatorLedger, tmp_path: Path
) -> None:
    for operator in (OPERATOR, None):
        app = console(ledger, tmp_path, operator=operator)
        with TestClient(app, base_url=REMOTE_URL, client=REMOTE) as remote:
            answer = remote.get("/api/runs", headers=bearer(API_TOKEN))
            # Beyond loopback: the operator's token, as before; without one, nobody.
            assert answer.status_code == (401 if operator else 403)
            if operator:
                assert remote.get("/api/runs", headers=bearer(OPERATOR)).status_code == 200
        with TestClient(app, base_url=LOCAL_URL, client=LOCAL) as local:
            form = local.get("/sign-in").text  # the session's form token
            fields = {"csrf": csrf_of(form), "token": API_TOKEN, "decision": "ran", "by": "ops"}
            refused = local.post("/pending/step-1/resolve", headers=bearer(API_TOKEN), json=fields)
            # Resolving needs the operator's token typed in; the API token is not it.
            assert refused.status_code == 403
            expected = "Wrong or missing operator token" if operator else "--token-file"
            assert expected in refused.text


def test_a_browser_signs_in_with_the_api_token(ledger: OperatorLedger, tmp_path: Path) -> None:
    app = console(ledger, tmp_path, operator=None)
    with TestClient(app, base_url=LOCAL_URL, client=LOCAL) as local:
        assert local.get("/", follow_redirects=False).status_code == 303
        form = local.get("/sign-in").text
        assert "API token" in form
        wrong = local.post("/sign-in", json={"token": "guess", "csrf": csrf_of(form)})
        assert wrong.status_code == 403 and "nor the API token" in wrong.text
        assert local.get("/", follow_redirects=False).status_code == 303
        signed = local.post("/sign-in", json={"token": API_TOKEN, "csrf": csrf_of(form)})
        assert (signed.status_code, signed.json()) == (200, {"location": "/"})
        assert local.get("/").status_code == 200
        assert local.get("/api/runs").status_code == 200
    with TestClient(app, base_url=REMOTE_URL, client=REMOTE) as remote:
        form = remote.get("/sign-in").text  # beyond loopback with no operator token: nothing
        assert "API token" not in form
