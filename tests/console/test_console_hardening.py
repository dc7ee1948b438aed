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

import httpx2
import pytest

from sidecar.ledger.sqlite import read_events
from tests.console.scenario import RUN, TOKEN, Console, make_ledger, start_console
from tests.console.test_console_http import csrf_of
from tests.harness import free_port, sidecar_config
from tests.helpers.http import Answer, call, parse_answer, raw_request
from tests.server.processes import run_cli, start_cli

PAGE_HEADERS = {
    "content-security-policy": "default-src 'none'; style-src 'self'; img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "cache-control": "no-store",
    "referrer-policy": "same-origin",
}
DECISION = {"decision": "did_not_run", "reason": "no charge at the PSP", "token": TOKEN}


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


def test_forms_posted_from_another_origin_or_as_another_type_record_nothing(
    tmp_path: Path,
) -> None:
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
                answer = browser.post(resolve, data=fields, headers={"origin": origin})
                assert answer.status_code == 403
                assert answer.json()["reason"] == "ORIGIN_NOT_ALLOWED"
            for media_type in ("text/plain", "application/json", "multipart/form-data; boundary=b"):
                answer = browser.post(
                    resolve,
                    content=json.dumps(fields).encode(),
                    headers={"content-type": media_type},
                )
                assert answer.status_code == 415, media_type
                assert answer.json()["reason"] == "UNSUPPORTED_MEDIA_TYPE"
            answer = browser.post(
                "/sign-in",
                data={"token": TOKEN, "csrf": fields["csrf"]},
                headers={"origin": "http://evil.example"},
            )
            assert answer.status_code == 403
            assert pending_count(config.audit_path) == 1  # nothing was recorded
            # The same form from the console's own page is taken.
            answer = browser.post(
                resolve, data=fields, headers={"origin": console.url}, follow_redirects=False
            )
            assert answer.status_code == 303
        assert pending_count(config.audit_path) == 0
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
            "rebound": call(port, "GET", "/", host="evil.example"),
            "wrong type": call(port, "POST", "/sign-in", headers=[("Content-Type", "text/plain")]),
        }
        assert {k: a.status for k, a in answers.items()} == {
            "runs": 200,
            "run": 200,
            "no run": 404,
            "pending": 200,
            "api": 200,
            "static": 200,
            "sign-in": 200,
            "rebound": 421,
            "wrong type": 415,
        }
        for name, answer in answers.items():
            assert {k: answer.headers.get(k) for k in PAGE_HEADERS} == PAGE_HEADERS, name
            assert "server" not in answer.headers
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
        form = [("Content-Type", "application/x-www-form-urlencoded")]
        body = b"token=" + b"x" * (3 << 20)
        refused(
            call(port_of(console), "POST", "/sign-in", headers=form, body=body),
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
                answer = browser.post(f"/pending/{step_id}/resolve", data=fields)
                assert answer.status_code == 403 and "named no operator" in answer.text
                assert pending_count(config.audit_path) == 1
            else:
                assert 'name="by"' in page and "dana@example.com" not in page
            answer = browser.post(
                f"/pending/{step_id}/resolve", data=fields, headers=signed_in, follow_redirects=True
            )
            assert answer.status_code == 200, answer.text
            run_page = answer.text
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
