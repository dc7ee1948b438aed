"""A console session ends when the token it signed in with is rotated, after 12 hours however
busy, and when its browser signs out: the real application, over a real ledger, called by
Starlette's client as a browser (on loopback, or at another address by an allowed name)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from sidecar.console.app import console_policy, create_app
from sidecar.console.chain import ChainWatch
from sidecar.console.sessions import MAX_SESSION_SECONDS
from sidecar.ledger.operator import open_operator_ledger
from sidecar.ledger.operator_queries import OperatorLedger
from sidecar.ops.auth import TokenFile
from sidecar.ops.http_guard import parse_allowed_hosts
from tests.console.scenario import TOKEN, make_ledger
from tests.console.test_console_http import csrf_of
from tests.harness import sidecar_config

API_TOKEN = "api-token-one"


class Clock:
    """The time the console sees, moved by the test."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[OperatorLedger]:
    config = sidecar_config(tmp_path / "data")
    make_ledger(config, tmp_path)
    opened = open_operator_ledger(config.audit_path, None)
    try:
        yield opened
    finally:
        opened.close()


def _chain() -> ChainWatch:
    return ChainWatch(lambda: (_ for _ in ()).throw(RuntimeError("not checked here")))


def _sign_in(client: TestClient, token: str) -> None:
    csrf = csrf_of(client.get("/sign-in").text)
    answer = client.post("/sign-in", json={"token": token, "csrf": csrf})
    assert answer.status_code == 200 and answer.json() == {"location": "/"}, answer.text


def test_rotating_the_api_token_ends_the_sessions_signed_in_with_it(
    tmp_path: Path, ledger: OperatorLedger
) -> None:
    clock = Clock()
    path = tmp_path / "api.token"
    path.write_text(API_TOKEN + "\n")
    api_token = TokenFile(path, clock=clock)
    app = create_app(ledger, token=TOKEN, chain=_chain(), api_token=api_token, clock=clock)
    with TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 5000)) as browser:
        assert browser.get("/api/pending").status_code == 401
        _sign_in(browser, API_TOKEN)
        assert browser.get("/api/pending").status_code == 200
        fresh = tmp_path / "api.token.new"
        fresh.write_text("api-token-two\n")
        os.replace(fresh, path)  # as the kubelet swaps a Secret's files
        clock.now += 2  # past the file's next look
        # The session ends at once, while the old token itself is still taken for a moment
        # from callers that read their file late.
        assert browser.get("/api/pending").status_code == 401
        old = {"authorization": f"Bearer {API_TOKEN}"}
        assert browser.get("/api/pending", headers=old).status_code == 200
        _sign_in(browser, "api-token-two")
        assert browser.get("/api/pending").status_code == 200


def test_a_session_lasts_twelve_hours_however_busy(ledger: OperatorLedger) -> None:
    clock = Clock()
    policy = console_policy(parse_allowed_hosts("console.example"))
    app = create_app(ledger, token=TOKEN, chain=_chain(), policy=policy, clock=clock)
    with TestClient(app, base_url="http://console.example", client=("203.0.113.9", 5000)) as remote:
        _sign_in(remote, TOKEN)
        # Busy all along: every answer signs the cookie again, and the sign-in still ages.
        while clock.now < 1_000_000.0 + MAX_SESSION_SECONDS - 3600:
            clock.now += 3600
            assert remote.get("/api/pending").status_code == 200
        clock.now += 3601
        assert remote.get("/api/pending").status_code == 401
        page = remote.get("/pending", follow_redirects=False)
        assert page.status_code == 303 and page.headers["location"] == "/sign-in"
        _sign_in(remote, TOKEN)
        assert remote.get("/api/pending").status_code == 200


def test_signing_out_ends_the_session_and_needs_the_form_token(ledger: OperatorLedger) -> None:
    policy = console_policy(parse_allowed_hosts("console.example"))
    app = create_app(ledger, token=TOKEN, chain=_chain(), policy=policy)
    with TestClient(app, base_url="http://console.example", client=("203.0.113.9", 5000)) as remote:
        _sign_in(remote, TOKEN)
        page = remote.get("/").text
        assert 'action="/sign-out"' in page
        # Another site's form has no form token: the session stays.
        forged = remote.post("/sign-out", json={"csrf": "guessed"})
        assert forged.status_code == 403 and forged.json()["reason"] == "FORM_EXPIRED"
        assert remote.get("/api/pending").status_code == 200
        taken = remote.post("/sign-out", json={"csrf": csrf_of(page)})
        assert taken.status_code == 200 and taken.json() == {"location": "/sign-in"}
        assert remote.get("/api/pending").status_code == 401
