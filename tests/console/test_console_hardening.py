"""The console refuses what a page on another site, or a rebound name, sends; it says so in
its headers; a sign-in proxy's header names the operator only when configured.

A real ``actonce console`` over a ledger that real sidecars wrote (tests.console.scenario),
requests written byte for byte over sockets or sent by httpx2.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from urllib.parse import urlencode

import httpx2
import pytest
from starlette.routing import Route
from starlette.testclient import TestClient

from sidecar.console.app import console_policy, create_app
from sidecar.console.chain import ChainWatch
from sidecar.ledger.operator import open_operator_ledger
from sidecar.ledger.sqlite import read_events
from sidecar.ops.http_guard import parse_allowed_hosts
from tests.console.scenario import RUN, TOKEN, Console, make_ledger, start_console
from tests.console.test_console_http import csrf_of
from tests.harness import free_port, sidecar_config
from tests.helpers.http import Answer, call, parse_answer, raw_request
from tests.server.processes import run_cli, start_cli

PAGE_HEADERS = {
    "content-security-policy": "default-src 'none'; script-src 'self'; connect-src 'self'; "
    "style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "cache-control": "no-store",
    "referrer-policy": "same-origin",
}
DECISION = {"decision": "did_not_run", "reason": "no charge at the PSP", "token": TOKEN}
JSON_TYPE = "application/json"
FORM_TYPE = "application/x-www-form-urlencoded"


def port_of(console: Console) -> int:
    return int(console.url.rsplit(":", 1)[1])


def refused(answer: Answer, status: int, reason: str) -> None:
    assert answer.status == status, (answer.status, answer.body[:300])
    assert answer.json()["reason"] == reason


def pending_count(audit_db: Path) -> int:
    listed = run_cli("audit", "pending", "--json", "--audit-db", str(audit_db))
    return len(listed.stdout.splitlines())


def decisions(audit_db: Path) -> list[dict[str, object]]:
    return [dict(e.event.detail) for e in read_events(audit_db) if e.event.phase == "decision"]


def test_a_rebound_name_reads_nothing_of_the_ledger(tmp_path: Path) -> None:
    config = sidecar_config(tmp_path / "data")
    make_ledger(config, tmp_path)
    console = start_console(config, tmp_path)
    try:
        port = port_of(console)
        paths = [
            "/",
            f"/runs/{RUN}",
            "/pending",
            "/api/runs",
            f"/api/runs/{RUN}",
            "/api/pending",
            "/api/status",
            "/sign-in",
            "/static/console.css",
        ]
        for path in paths:
            # A browser on this host, sent to a name the attacker's DNS points at 127.0.0.1.
            for host in (f"attacker.example:{port}", "attacker.example", f"127.0.0.2:{port}"):
                answer = call(port, "GET", path, host=host)
                refused(answer, 421, "HOST_NOT_ALLOWED")
                assert RUN.encode() not in answer.body and b"att_" not in answer.body
            assert call(port, "GET", path).status == 200, path
        assert RUN.encode() in call(port, "GET", "/api/runs", host=f"localhost:{port}").body
    finally:
        console.stop()


def test_posts_from_another_origin_or_of_another_type_record_nothing(tmp_path: Path) -> None:
    config = sidecar_config(tmp_path / "data")
    step_id = make_ledger(config, tmp_path)
    console = start_console(config, tmp_path)
    resolve = f"/pending/{step_id}/resolve"
    try:
        with httpx2.Client(base_url=console.url) as browser:
            fields = {**DECISION, "by": "dana", "csrf": csrf_of(browser.get("/pending").text)}
            for origin in (
                "http://evil.example",
                "null",
                f"http://localhost.evil:{port_of(console)}",
            ):
                answer = browser.post(resolve, json=fields, headers={"origin": origin})
                assert answer.status_code == 403
                assert answer.json()["reason"] == "ORIGIN_NOT_ALLOWED"
            # What a page of another site can make a browser send without asking first.
            for media_type, body in blind_bodies(fields).items():
                answer = browser.post(resolve, content=body, headers={"content-type": media_type})
                assert answer.status_code == 415, media_type
                assert answer.json()["reason"] == "UNSUPPORTED_MEDIA_TYPE"
            answer = browser.post(
                "/sign-in",
                json={"token": TOKEN, "csrf": fields["csrf"]},
                headers={"origin": "http://evil.example"},
            )
            assert answer.status_code == 403
            assert pending_count(config.audit_path) == 1  # nothing was recorded
            # The same fields from the console's own page, as its script posts them, are taken.
            answer = browser.post(resolve, json=fields, headers={"origin": console.url})
            assert answer.status_code == 200 and answer.json()["location"].startswith("/runs/")
        assert pending_count(config.audit_path) == 0
    finally:
        console.stop()


def blind_bodies(fields: dict[str, str]) -> dict[str, bytes]:
    """``fields`` in each encoding a browser posts across sites with no CORS preflight: a
    form's three enctypes, and a fetch's ``text/plain`` (what a JSON text is sent as
    ``no-cors``)."""
    boundary = "form-7MA4YWxkTrZu0gW"
    parts = "".join(
        f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'
        for k, v in fields.items()
    )
    return {
        "application/x-www-form-urlencoded": urlencode(fields).encode(),
        "text/plain": "".join(f"{k}={v}\r\n" for k, v in fields.items()).encode(),
        "text/plain;charset=UTF-8": json.dumps(fields).encode(),
        f"multipart/form-data; boundary={boundary}": f"{parts}--{boundary}--\r\n".encode(),
    }


def test_a_post_that_is_not_json_is_refused_on_every_route_and_changes_nothing(
    tmp_path: Path,
) -> None:
    # Beyond loopback, where signing in makes a session: Starlette's test client calls the
    # app as a client at another address would, by a name the console is told it has.
    config = sidecar_config(tmp_path / "data")
    step_id = make_ledger(config, tmp_path)
    ledger = open_operator_ledger(config.audit_path, None)
    chain = ChainWatch(lambda: (_ for _ in ()).throw(RuntimeError("not checked here")))
    policy = console_policy(parse_allowed_hosts("console.example"))
    app = create_app(ledger, token=TOKEN, chain=chain, policy=policy)
    posts = {
        route.path
        for route in app.routes
        if isinstance(route, Route) and "POST" in (route.methods or ())
    }
    # Each POST route, in the order a person takes them: signed in first.
    order = ["/sign-in", "/pending/{item_id}/resolve", "/sign-out"]
    assert posts == set(order), "a new POST route: add it here"
    try:
        with TestClient(
            app, base_url="http://console.example", client=("203.0.113.9", 5000)
        ) as remote:
            csrf = csrf_of(remote.get("/sign-in").text)
            bodies = {
                "/sign-in": {"token": TOKEN, "csrf": csrf},
                "/pending/{item_id}/resolve": {**DECISION, "by": "dana", "csrf": csrf},
                "/sign-out": {"csrf": csrf},
            }
            for route in order:
                path = route.replace("{item_id}", step_id)
                fields = bodies[route]
                recorded = decisions(config.audit_path)
                for media_type, body in {
                    **blind_bodies(fields),
                    "": json.dumps(fields).encode(),
                }.items():
                    headers = {"content-type": media_type} if media_type else {}
                    answer = remote.post(path, content=body, headers=headers)
                    assert answer.status_code == 415, (route, media_type)
                    assert answer.json() == {
                        "reason": "UNSUPPORTED_MEDIA_TYPE",
                        "failure_class": "REFUSED",
                        "message": "a POST here takes Content-Type application/json",
                    }
                    assert "set-cookie" not in answer.headers  # no session made, none changed
                    assert remote.get("/api/pending").status_code == (
                        401 if route == "/sign-in" else 200
                    )
                    assert decisions(config.audit_path) == recorded
                # The same fields as JSON are taken: the refusals above were the type's alone.
                answer = remote.post(path, json=fields)
                assert answer.status_code == 200, answer.text
                signed_out = route == "/sign-out"
                assert remote.get("/api/pending").status_code == (401 if signed_out else 200)
            [decision] = decisions(config.audit_path)
            assert decision["by"] == "dana"
    finally:
        ledger.close()


def test_a_json_body_that_is_not_an_object_of_text_fields_records_nothing(tmp_path: Path) -> None:
    config = sidecar_config(tmp_path / "data")
    step_id = make_ledger(config, tmp_path)
    console = start_console(config, tmp_path)
    try:
        with httpx2.Client(base_url=console.url) as browser:
            fields = {**DECISION, "by": "dana", "csrf": csrf_of(browser.get("/pending").text)}
            bodies = [
                b"",
                b"{",
                b"[]",
                b'"ran"',
                b"\xff\xfe",
                json.dumps({**fields, "decision": ["did_not_run"]}).encode(),
                json.dumps({**fields, "reason": None}).encode(),
                json.dumps({**fields, "reason": "\ud800"}).encode(),  # a lone surrogate
            ]
            json_type = {"content-type": "application/json"}
            for body in bodies:
                for path in (f"/pending/{step_id}/resolve", "/sign-in"):
                    answer = browser.post(path, content=body, headers=json_type)
                    assert answer.status_code == 400, (path, body, answer.text[:300])
                    assert "a JSON object of text fields" in answer.text
                    assert answer.headers["content-type"].startswith("text/html")
        assert pending_count(config.audit_path) == 1
    finally:
        console.stop()


def test_every_answer_carries_the_hardening_headers(tmp_path: Path) -> None:
    config = sidecar_config(tmp_path / "data")
    make_ledger(config, tmp_path)
    console = start_console(config, tmp_path)
    try:
        port = port_of(console)
        answers = {
            "runs": call(port, "GET", "/"),
            "run": call(port, "GET", f"/runs/{RUN}"),
            "no run": call(port, "GET", "/runs/nothing"),
            "pending": call(port, "GET", "/pending"),
            "api": call(port, "GET", "/api/runs"),
            "static": call(port, "GET", "/static/console.css"),
            "sign-in": call(port, "GET", "/sign-in"),
            "script": call(port, "GET", "/static/console.js"),
            "rebound": call(port, "GET", "/", host="evil.example"),
            "wrong type": call(port, "POST", "/sign-in", headers=[("Content-Type", "text/plain")]),
            "form": call(port, "POST", "/sign-in", headers=[("Content-Type", FORM_TYPE)]),
            "taken": call(
                port,
                "POST",
                "/sign-in",
                headers=[("Content-Type", JSON_TYPE)],
                body=b'{"token": "guess"}',
            ),
        }
        assert {k: a.status for k, a in answers.items()} == {
            "runs": 200,
            "run": 200,
            "no run": 404,
            "pending": 200,
            "api": 200,
            "static": 200,
            "sign-in": 200,
            "script": 200,
            "rebound": 421,
            "wrong type": 415,
            "form": 415,
            "taken": 403,
        }
        for name, answer in answers.items():
            assert {k: answer.headers.get(k) for k in PAGE_HEADERS} == PAGE_HEADERS, name
            assert "server" not in answer.headers
        # Served as a script, or the browser would not run it (nosniff).
        assert answers["script"].headers["content-type"].startswith("text/javascript")
    finally:
        console.stop()


def test_a_console_beyond_loopback_answers_the_names_it_is_given_alone(tmp_path: Path) -> None:
    config = sidecar_config(tmp_path / "data")
    make_ledger(config, tmp_path)
    token = tmp_path / "token"
    token.write_text(TOKEN)
    base = ["console", "--audit-db", str(config.audit_path), "--token-file", str(token)]
    stopped = run_cli(*base, "--listen", "0.0.0.0:0", timeout=20)
    assert stopped.returncode == 2 and len(stopped.stderr.splitlines()) == 1
    assert "--allowed-hosts" in stopped.stderr
    bad = run_cli(*base, "--listen", "0.0.0.0:0", "--allowed-hosts", "https://console.test")
    assert bad.returncode == 2 and "NAME or NAME:PORT" in bad.stderr
    port = free_port()
    served = start_cli(
        tmp_path / "console.log",
        *base,
        "--listen",
        f"0.0.0.0:{port}",
        "--allowed-hosts",
        "console.test",
        "--log-format",
        "json",
    )
    try:
        bearer = [("Authorization", f"Bearer {TOKEN}")]
        deadline = time.monotonic() + 20
        while True:
            try:
                answer = call(port, "GET", "/api/runs", host="console.test", headers=bearer)
                break
            except OSError:
                assert time.monotonic() < deadline, served.log()
                time.sleep(0.1)
        assert answer.status == 200 and RUN in answer.body.decode()
        refused(
            call(port, "GET", "/api/runs", host=f"evil.example:{port}", headers=bearer),
            421,
            "HOST_NOT_ALLOWED",
        )
    finally:
        served.stop()


def test_a_body_past_the_limit_is_refused(tmp_path: Path) -> None:
    config = sidecar_config(tmp_path / "data")
    make_ledger(config, tmp_path)
    console = start_console(config, tmp_path)
    try:
        body = b'{"token": "' + b"x" * (3 << 20) + b'"}'
        refused(
            call(
                port_of(console),
                "POST",
                "/sign-in",
                headers=[("Content-Type", JSON_TYPE)],
                body=body,
            ),
            413,
            "BODY_TOO_LARGE",
        )
    finally:
        console.stop()


def test_half_sent_requests_to_a_token_protected_console_are_cut(tmp_path: Path) -> None:
    # The defaults, as the command serves them: each head within 5 s.
    config = sidecar_config(tmp_path / "data")
    make_ledger(config, tmp_path)
    console = start_console(config, tmp_path)
    try:
        port = port_of(console)
        head = raw_request(
            "GET",
            "/api/runs",
            host=f"127.0.0.1:{port}",
            headers=[("Authorization", f"Bearer {TOKEN}")],
        )
        held = []
        for n in range(30):
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(head[: 10 + n])
            held.append(sock)
        began = time.monotonic()
        for sock in held:
            sock.settimeout(max(9 - (time.monotonic() - began), 0.1))
            said = bytearray()
            while chunk := sock.recv(4096):
                said += chunk
            assert parse_answer(bytes(said)).status == 408
            sock.close()
        assert time.monotonic() - began < 8
        assert call(port, "GET", "/api/status").status == 200
    finally:
        console.stop()


# -- the operator named by a sign-in proxy -----------------------------------------------


@pytest.mark.parametrize("configured", [True, False])
def test_the_sign_in_proxys_header_names_the_operator_only_when_configured(
    tmp_path: Path, configured: bool
) -> None:
    config = sidecar_config(tmp_path / "data")
    step_id = make_ledger(config, tmp_path)
    flags = ["--operator-header", "X-Forwarded-Email"] if configured else []
    console = start_console(config, tmp_path, flags=flags)
    signed_in = {"x-forwarded-email": "dana@example.com"}
    try:
        with httpx2.Client(base_url=console.url) as browser:
            page = browser.get("/pending", headers=signed_in).text
            fields = {**DECISION, "by": "mallory", "csrf": csrf_of(page)}
            if configured:
                assert "Deciding as <strong>dana@example.com</strong>" in page
                assert 'name="by"' not in page
                # Not through the proxy (a port-forward, say): nobody to record.
                answer = browser.post(f"/pending/{step_id}/resolve", json=fields)
                assert answer.status_code == 403 and "named no operator" in answer.text
                assert pending_count(config.audit_path) == 1
            else:
                assert 'name="by"' in page and "dana@example.com" not in page
            answer = browser.post(f"/pending/{step_id}/resolve", json=fields, headers=signed_in)
            assert answer.status_code == 200, answer.text
            run_page = browser.get(answer.json()["location"], headers=signed_in).text
    finally:
        console.stop()
    [decision] = decisions(config.audit_path)
    if configured:
        assert decision["by"] == "dana@example.com"
        assert decision["by_header"] == "x-forwarded-email"
        assert "by <strong>dana@example.com</strong> (signed in)" in run_page
    else:
        # Unconfigured, the header is any client's to send: the typed name is recorded.
        assert decision["by"] == "mallory" and "by_header" not in decision
    assert run_cli("audit", "verify", "--audit-db", str(config.audit_path)).returncode == 0


def test_an_operator_header_that_is_not_a_header_name_stops_start_up(tmp_path: Path) -> None:
    done = run_cli(
        "console", "--audit-db", str(tmp_path / "a.db"), "--operator-header", "X Forwarded: Email"
    )
    assert done.returncode == 2 and "--operator-header" in done.stderr
