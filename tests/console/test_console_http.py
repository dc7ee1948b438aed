"""The console over HTTP on both ledger backends: pages, JSON, access and forged forms."""

from __future__ import annotations

import http.cookiejar
import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from sidecar.console.app import create_app
from sidecar.console.chain import ChainWatch
from sidecar.ledger.sqlite import read_events
from tests.conftest import MakeConfig
from tests.console.scenario import RUN, TOKEN, Console, make_ledger, start_console
from tests.harness import sidecar_config
from tests.server.processes import run_cli


class Browser:
    """A cookie-keeping HTTP client that posts forms as the console's script does: JSON."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
        )

    def get(self, path: str) -> tuple[int, str]:
        try:
            with self.opener.open(self.base + path, timeout=10) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def json(self, path: str) -> Any:
        status, body = self.get(path)
        assert status == 200, body
        return json.loads(body)

    def post(self, path: str, fields: dict[str, str]) -> tuple[int, str]:
        request = urllib.request.Request(
            self.base + path,
            data=json.dumps(fields).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with self.opener.open(request, timeout=10) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "no form token on the page"
    return found.group(1)


def location_of(code: int, body: str) -> str:
    """Where a taken POST sends the console's script next."""
    assert code == 200, body[:500]
    location = json.loads(body)["location"]
    assert isinstance(location, str) and location.startswith("/")
    return location


@pytest.fixture
def console(make_config: MakeConfig, tmp_path: Path) -> Iterator[tuple[Console, str, list[str]]]:
    config = make_config(tmp_path / "data")
    step_id = make_ledger(config, tmp_path)
    flags = (
        ["--audit-dsn", config.audit_dsn]
        if config.audit_dsn
        else ["--audit-db", str(config.audit_path)]
    )
    running = start_console(config, tmp_path)
    try:
        yield running, step_id, flags
    finally:
        running.stop()


def test_runs_run_and_pending_as_json_and_pages(console: tuple[Console, str, list[str]]) -> None:
    running, step_id, _flags = console
    client = Browser(running.url)
    runs = client.json("/api/runs")["runs"]
    assert [r["run_id"] for r in runs] == [RUN, "run-digest"]
    refund = runs[0]
    assert refund["pending"] == 1 and refund["attempts"] == 2
    assert refund["writes"] == {"applied": 4, "already_applied": 3, "failed": 1}
    assert [r["run_id"] for r in client.json("/api/runs?rule=digest")["runs"]] == ["run-digest"]
    assert [r["run_id"] for r in client.json("/api/runs?pending=1")["runs"]] == [RUN]
    assert client.json("/api/runs?q=nothing-like-it")["runs"] == []

    run = client.json(f"/api/runs/{RUN}")
    assert [p["id"] for p in run["pending"]] == [step_id]
    phases = [e["phase"] for e in run["events"]]
    assert phases[0] == "attempt_begin" and phases.count("attempt_begin") == 2
    pending = client.json("/api/pending")["pending"]
    assert [(p["id"], p["kind"], p["tool"]) for p in pending] == [
        (step_id, "step_in_doubt", "charge_card")
    ]
    status = client.json("/api/status")
    assert status["chain"]["state"] == "intact" and status["events"] == len(
        client.json("/api/runs/run-digest")["events"]
    ) + len(run["events"])

    for path in ("/", f"/runs/{RUN}", "/pending", "/?outcome=failed&since=2000-01-01T00:00"):
        code, page = client.get(path)
        assert code == 200, path
        assert "tok_visa" not in page and "Refund approved" not in page  # never a payload
    code, page = client.get("/runs/no-such-run")
    assert code == 404
    assert client.get("/api/runs/no-such-run")[0] == 404


def test_resolving_needs_the_token_and_the_form_token(
    console: tuple[Console, str, list[str]],
) -> None:
    running, step_id, flags = console
    client = Browser(running.url)
    _, page = client.get("/pending")
    fields = {"decision": "did_not_run", "by": "dana", "reason": "no charge at the PSP"}

    # A form posted from elsewhere carries no form token of this session: refused.
    forged = Browser(running.url)
    code, _ = forged.post(f"/pending/{step_id}/resolve", {**fields, "token": TOKEN})
    assert code == 403
    code, _ = client.post(f"/pending/{step_id}/resolve", {**fields, "token": TOKEN, "csrf": "x"})
    assert code == 403
    # The right form token but a wrong operator token: refused too.
    code, body = client.post(
        f"/pending/{step_id}/resolve", {**fields, "token": "guess", "csrf": csrf_of(page)}
    )
    assert code == 403 and "token" in body
    assert run_cli("audit", "pending", *flags).returncode == 3  # nothing was recorded

    location = location_of(
        *client.post(
            f"/pending/{step_id}/resolve", {**fields, "token": TOKEN, "csrf": csrf_of(page)}
        )
    )
    # The run's timeline, at the decision's own event.
    path, _, anchor = location.partition("#")
    assert path == f"/runs/{RUN}" and anchor.startswith("event-")
    code, timeline = client.get(path)
    assert code == 200 and f'<li class="entry decision" id="{anchor}">' in timeline
    assert "Operator decision: did not run" in timeline
    assert run_cli("audit", "pending", *flags).returncode == 0
    code, body = client.post(
        f"/pending/{step_id}/resolve", {**fields, "token": TOKEN, "csrf": csrf_of(page)}
    )
    assert code == 409 and "already decided" in body
    assert run_cli("audit", "verify", *flags).returncode == 0


def test_a_console_without_a_token_reads_on_loopback_and_refuses_to_resolve(
    tmp_path: Path,
) -> None:
    config = sidecar_config(tmp_path / "data")
    step_id = make_ledger(config, tmp_path)
    running = start_console(config, tmp_path, token=False)
    try:
        client = Browser(running.url)
        code, page = client.get("/pending")
        assert code == 200 and "actonce audit resolve" in page
        code, body = client.post(
            f"/pending/{step_id}/resolve",
            {"decision": "did_not_run", "by": "a", "reason": "r", "csrf": csrf_of(page)},
        )
        assert code == 403 and "--token-file" in body
    finally:
        running.stop()
    refused = run_cli(
        "console", "--listen", "0.0.0.0:0", "--audit-db", str(config.audit_path), timeout=20
    )
    assert refused.returncode == 2 and "--token-file" in refused.stderr


def test_a_client_beyond_loopback_needs_the_token(tmp_path: Path) -> None:
    # Starlette's test client calls the app as a client at a non-loopback address would,
    # by a name the console was told it is reached by.
    from sidecar.console.app import console_policy
    from sidecar.ledger.operator import open_operator_ledger
    from sidecar.ops.http_guard import parse_allowed_hosts

    config = sidecar_config(tmp_path / "data")
    make_ledger(config, tmp_path)
    assert list(read_events(config.audit_path))
    ledger = open_operator_ledger(config.audit_path, None)
    chain = ChainWatch(lambda: (_ for _ in ()).throw(RuntimeError("not checked here")))
    try:
        for token in (None, TOKEN):
            policy = console_policy(parse_allowed_hosts("console.example"))
            app = create_app(ledger, token=token, chain=chain, policy=policy)
            with TestClient(
                app, base_url="http://console.example", client=("203.0.113.9", 5000)
            ) as remote:
                answer = remote.get("/api/pending")
                assert answer.status_code == (403 if token is None else 401)
                answer = remote.get("/", follow_redirects=False)
                assert answer.status_code == (403 if token is None else 303)
                if token is None:
                    continue
                assert (
                    remote.get(
                        "/api/pending", headers={"Authorization": f"Bearer {TOKEN}"}
                    ).status_code
                    == 200
                )
                form = remote.get("/sign-in").text
                wrong = remote.post("/sign-in", json={"token": "guess", "csrf": csrf_of(form)})
                assert wrong.status_code == 403 and "not the operator" in wrong.text
                assert remote.get("/api/pending").status_code == 401
                signed = remote.post("/sign-in", json={"token": TOKEN, "csrf": csrf_of(form)})
                assert (signed.status_code, signed.json()) == (200, {"location": "/"})
                assert remote.get("/api/pending").status_code == 200
    finally:
        ledger.close()


def test_a_run_id_with_url_characters_links_to_its_own_page(tmp_path: Path) -> None:
    import asyncio
    import html

    from sidecar.ledger.base import AuditEvent, Phase
    from sidecar.ledger.operator import open_operator_ledger
    from sidecar.ledger.sqlite import SqliteLedger

    run_id = "team a/run #5?x=1&y"

    async def write() -> None:
        ledger = SqliteLedger(tmp_path / "audit.db")
        try:
            await ledger.append(
                AuditEvent(run_id, "a1", "BeginAttempt", Phase.ATTEMPT_BEGIN, rule="r")
            )
        finally:
            await ledger.close()

    asyncio.run(write())
    ledger = open_operator_ledger(tmp_path / "audit.db", None)
    chain = ChainWatch(lambda: (_ for _ in ()).throw(RuntimeError("not checked here")))
    try:
        app = create_app(ledger, token=None, chain=chain)
        with TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 5000)) as local:
            runs = local.get("/").text
            href = re.search(r'class="run-link" href="([^"]+)"', runs)
            assert href is not None
            page = local.get(html.unescape(href.group(1)))
            assert page.status_code == 200 and html.escape(run_id) in page.text
    finally:
        ledger.close()


def test_every_page_shows_the_chain_status_and_names_the_first_bad_event(tmp_path: Path) -> None:
    import sqlite3

    from sidecar.ledger.audit_command import open_reader
    from sidecar.ledger.operator import open_operator_ledger

    config = sidecar_config(tmp_path / "data")
    make_ledger(config, tmp_path)
    ledger = open_operator_ledger(config.audit_path, None)
    chain = ChainWatch(lambda: open_reader({"audit_db": config.audit_path}))
    try:
        app = create_app(ledger, token=None, chain=chain)
        with TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 5000)) as local:
            assert chain.check_now()["state"] == "intact"
            assert "chain intact" in local.get("/").text
            conn = sqlite3.connect(config.audit_path)
            conn.execute("UPDATE audit_events SET outcome = 'OUTCOME_SKIPPED' WHERE seq = 5")
            conn.commit()
            conn.close()
            verdict = chain.check_now()
            assert (verdict["state"], verdict["first_bad"]) == ("tampered", 5)
            page = local.get(f"/runs/{RUN}").text
            assert "chain broken at event #5" in page and "does not verify" in page
            assert local.get("/api/status").json()["chain"]["first_bad"] == 5
    finally:
        ledger.close()
