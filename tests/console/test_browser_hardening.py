"""The console and the MCP front against what a real browser sends: a sign-in proxy's header,
signing in through the console's script, parallel tool calls on a run's page, and pages of
other sites, also through names rebound to 127.0.0.1 (Chromium's host resolver rules stand
for the attacker's DNS), posting forms to the console or calling the MCP front.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import grpc
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc
from actonce_api.v1 import types_pb2
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from sidecar.ledger.sqlite import read_events
from tests.console.browsers import chromium, fill, shoot, wait
from tests.console.scenario import RUN, TOKEN, make_ledger, start_console
from tests.harness import free_port, sidecar_config, spawn_sidecar, start_sidecar
from tests.server.processes import run_cli

OPERATOR = "dana@example.com"
API_TOKEN = "api-t0ken-5b8e"


def test_the_operator_the_sign_in_proxy_names_is_recorded(
    browser: webdriver.Chrome, tmp_path: Path
) -> None:
    config = sidecar_config(tmp_path / "data")
    step_id = make_ledger(config, tmp_path)
    console = start_console(config, tmp_path, flags=["--operator-header", "X-Forwarded-Email"])
    try:
        # What a sign-in proxy (oauth2-proxy, say) adds to each request it lets through.
        browser.execute_cdp_cmd("Network.enable", {})
        browser.execute_cdp_cmd(
            "Network.setExtraHTTPHeaders", {"headers": {"X-Forwarded-Email": OPERATOR}}
        )
        browser.get(f"{console.url}/pending")
        assert OPERATOR in browser.find_element(By.CSS_SELECTOR, "header.top .operator-name").text
        card = browser.find_element(By.ID, f"item-{step_id}")
        card.find_element(By.TAG_NAME, "summary").click()
        assert f"Deciding as {OPERATOR}" in card.find_element(By.CSS_SELECTOR, ".operator").text
        assert not card.find_elements(By.NAME, "by")  # nobody types a name
        shoot(browser, "6-signed-in-by-the-proxy")
        fill(browser, step_id, token=TOKEN, by=None)
        wait(browser, lambda b: f"/runs/{RUN}#event-" in b.current_url)
        decision = wait(browser, lambda b: b.find_element(By.CSS_SELECTOR, ".entry.decision"))
        assert f"by {OPERATOR} (signed in)" in decision.text
    finally:
        console.stop()
    [decided] = [e.event for e in read_events(config.audit_path) if e.event.phase == "decision"]
    assert (decided.detail["by"], decided.detail["by_header"]) == (OPERATOR, "x-forwarded-email")
    assert run_cli("audit", "verify", "--audit-db", str(config.audit_path)).returncode == 0


def test_a_browser_signs_in_through_the_page(browser: webdriver.Chrome, tmp_path: Path) -> None:
    # With an API token even loopback reads need a session: the sign-in form makes one.
    config = sidecar_config(tmp_path / "data")
    make_ledger(config, tmp_path)
    console = start_console(config, tmp_path, api_token=API_TOKEN)
    try:
        browser.get(f"{console.url}/pending")
        wait(browser, lambda b: b.current_url.endswith("/sign-in"))
        typed = browser.find_element(By.NAME, "token")
        typed.send_keys("not-the-token")
        browser.find_element(By.CSS_SELECTOR, "button[type='submit']").click()
        error = wait(browser, lambda b: b.find_element(By.CSS_SELECTOR, "[role=alert]"))
        assert "nor the API token" in error.text
        assert browser.current_url.endswith("/sign-in")
        shoot(browser, "8-sign-in-refused")
        browser.find_element(By.NAME, "token").send_keys(API_TOKEN)
        browser.find_element(By.CSS_SELECTOR, "button[type='submit']").click()
        wait(browser, lambda b: b.current_url == f"{console.url}/")
        assert wait(browser, lambda b: b.find_element(By.LINK_TEXT, RUN))
        browser.get(f"{console.url}/pending")  # the session holds
        assert "Needs a person" in browser.page_source
    finally:
        console.stop()


def test_a_run_page_groups_parallel_tool_calls_by_scope(
    browser: webdriver.Chrome, tmp_path: Path
) -> None:
    config = sidecar_config(tmp_path / "data")
    sidecar = start_sidecar(config)
    try:
        stub = sidecar.stub

        def begin(scope: str) -> str:
            request = pb.BeginAttemptRequest(
                run_id="run-tools", rule="triage", checkpoint="c", scope=scope
            )
            return str(stub.BeginAttempt(request).attempt_id)

        def create(attempt: str, title: str) -> None:
            stub.Create(
                pb.CreateRequest(
                    attempt_id=attempt, kind="ticket", data_json=json.dumps({"title": title})
                )
            )

        delivery = begin("")
        lookup, refund = begin("call_lookup"), begin("call_refund")
        create(lookup, "lookup 1")  # the two calls' writes interleave
        create(refund, "refund 1")
        create(lookup, "lookup 2")
        retried = begin("call_refund")  # the refund call again: fences its older attempt only
        create(retried, "refund 1")
        for attempt in (lookup, retried, delivery):
            stub.EndAttempt(pb.EndAttemptRequest(attempt_id=attempt))
    finally:
        sidecar.stop()
    console = start_console(config, tmp_path)
    try:
        browser.get(f"{console.url}/runs/run-tools")
        groups = browser.find_elements(By.CSS_SELECTOR, "section.scope")
        heads = [g.find_element(By.CSS_SELECTOR, "h2.scope-head") for g in groups]
        assert heads[0].text.startswith("Unscoped attempts")
        named = [h.find_element(By.CSS_SELECTOR, ".mono").text for h in heads[1:]]
        assert named == ["call_lookup", "call_refund"]
        counts = [len(g.find_elements(By.CSS_SELECTOR, ".attempt")) for g in groups]
        assert counts == [1, 1, 2]
        refund_group = groups[2]
        chips = {c.text for c in refund_group.find_elements(By.CSS_SELECTOR, ".timeline .chip")}
        assert chips == {"A3", "A4"}  # its attempts' entries, and no other call's
        assert "fenced by A4" in refund_group.find_elements(By.CSS_SELECTOR, ".attempt")[0].text
        assert refund_group.find_elements(By.CSS_SELECTOR, ".entry.state-already_applied")
        lookup_writes = groups[1].find_elements(By.CSS_SELECTOR, ".entry.write")
        assert len(lookup_writes) == 2
        shoot(browser, "7-run-scopes")
    finally:
        console.stop()


# -- pages of other sites ---------------------------------------------------------------


@contextmanager
def site(pages: Mapping[str, str]) -> Iterator[int]:
    """A web server of some other site, serving each page at its path; its port."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages.get(self.path, "").encode()
            self.send_response(200 if self.path in pages else 404)
            self.send_header("content-type", "text/html; charset=utf-8")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


ATTACK = """<!doctype html><title>cat pictures</title><script>
const front = "http://127.0.0.1:%(mcp)d";
const begin = JSON.stringify({run_id: "%(run)s", rule: "payments", checkpoint: "cp-1"});
const tried = [
  // No preflight for these: a text/plain body, sent blind (no-cors).
  fetch(front + "/attempts", {method: "POST", mode: "no-cors", body: begin}),
  fetch(front + "/attempts/%(attempt)s/end", {method: "POST", mode: "no-cors", body: "{}"}),
  // JSON asks first (a CORS preflight), and is told no.
  fetch(front + "/attempts", {method: "POST", body: begin,
                              headers: {"Content-Type": "application/json"}}),
];
Promise.allSettled(tried).then((settled) => {
  document.title = "done: " + settled.map((s) => s.status).join(",");
});
</script>"""

# The attacker's script once the page's own name points at 127.0.0.1: same-origin now.
REBOUND = """
const done = arguments[arguments.length - 1];
const call = (path, body) => fetch(path, {method: "POST", body: body,
    headers: {"Content-Type": "application/json"}}).then(async (r) => [r.status, await r.text()]);
Promise.all([
  call("/attempts", JSON.stringify({run_id: arguments[0], rule: "payments", checkpoint: "cp-1"})),
  call("/attempts/" + arguments[1] + "/end", "{}"),
]).then(done, (e) => done(String(e)));
"""


def test_pages_on_other_sites_reach_neither_front(tmp_path: Path) -> None:
    config = sidecar_config(tmp_path / "data")
    mcp = free_port()
    sidecar = spawn_sidecar(config, tmp_path / "serve.log", "--mcp-listen", f"127.0.0.1:{mcp}")
    channel = grpc.insecure_channel(sidecar.target)
    with ExitStack() as stack:
        stack.callback(sidecar.stop)
        stack.callback(channel.close)
        stub = pb_grpc.RunActionsServiceStub(channel)
        agent = stub.BeginAttempt(
            pb.BeginAttemptRequest(run_id="pay-7781", rule="payments", checkpoint="cp-1")
        ).attempt_id
        console = start_console(config, tmp_path, token=False)
        stack.callback(console.stop)
        page = ATTACK % {"mcp": mcp, "run": "pay-7781", "attempt": agent}
        rules = "MAP evil.example 127.0.0.1, MAP rebound.example 127.0.0.1"
        with site({"/": page}) as evil, chromium(f"--host-resolver-rules={rules}") as browser:
            browser.get(f"http://evil.example:{evil}/")
            WebDriverWait(browser, 20).until(lambda b: b.title.startswith("done"))
            # The blind ones "succeed" as no-cors requests do (opaque answers); the one
            # that asked first was refused its preflight.
            assert browser.title == "done: fulfilled,fulfilled,rejected"

            # Rebound: the console's own pages, by the attacker's name, hold nothing.
            console_port = console.url.rsplit(":", 1)[1]
            browser.get(f"http://rebound.example:{console_port}/api/runs")
            assert "HOST_NOT_ALLOWED" in browser.page_source
            assert "pay-7781" not in browser.page_source and "att_" not in browser.page_source
            # And the MCP front, same-origin for the attacker's script by now. That script
            # came with a page the attacker served before rebinding its name, under no CSP of
            # the front's (whose default-src 'none' would stop it here, before the front's
            # own rules were tried).
            browser.execute_cdp_cmd("Page.setBypassCSP", {"enabled": True})
            browser.get(f"http://rebound.example:{mcp}/")
            answers = browser.execute_async_script(REBOUND, "pay-7781", agent)
            assert isinstance(answers, list), answers
            assert [status for status, _ in answers] == [421, 421], answers
        # Nothing began, nothing ended: the agent's attempt goes on, unfenced.
        created = stub.Create(pb.CreateRequest(attempt_id=agent, kind="charge", data_json="{}"))
        assert created.outcome == types_pb2.OUTCOME_APPLIED
        stub.EndAttempt(pb.EndAttemptRequest(attempt_id=agent))
    begun = [
        e.event.attempt_id
        for e in read_events(config.audit_path)
        if e.event.run_id == "pay-7781" and e.event.phase == "attempt_begin"
    ]
    assert begun == [agent]


# A page that posts a form to the console as soon as it loads, as a browser posts any form:
# the fields of a decision, the operator's token among them (say it leaked); no form token,
# which no other page can read.
FORGED = """<!doctype html><title>cat pictures</title>
<form method="post" action="%(action)s" enctype="%(enctype)s">
<input name="decision" value="did_not_run"><input name="by" value="mallory">
<input name="reason" value="forged"><input name="token" value="%(token)s">
</form><script>document.forms[0].submit()</script>"""

# And the requests its script may send: blind (no-cors, which drops the JSON type), and JSON,
# which asks the console first (a CORS preflight) and is told nothing it could use.
FETCHES = """<!doctype html><title>cat pictures</title><script>
const body = JSON.stringify({decision: "did_not_run", by: "mallory", reason: "forged",
                             token: "%(token)s"});
const json = {"Content-Type": "application/json"};
Promise.allSettled([
  fetch("%(action)s", {method: "POST", mode: "no-cors", headers: json, body: body}),
  fetch("%(action)s", {method: "POST", headers: json, body: body}),
]).then((settled) => {
  document.title = "done: " + settled.map((s) => s.status).join(",");
});
</script>"""


def test_forms_that_pages_of_other_sites_post_to_the_console_record_nothing(
    tmp_path: Path,
) -> None:
    config = sidecar_config(tmp_path / "data")
    step_id = make_ledger(config, tmp_path)
    console = start_console(config, tmp_path)
    action = f"{console.url}/pending/{step_id}/resolve"
    enctypes = ["application/x-www-form-urlencoded", "text/plain", "multipart/form-data"]
    pages = {
        f"/{n}": FORGED % {"action": action, "enctype": enctype, "token": TOKEN}
        for n, enctype in enumerate(enctypes)
    }
    pages["/fetch"] = FETCHES % {"action": action, "token": TOKEN}
    try:
        rules = "MAP evil.example 127.0.0.1"
        with site(pages) as port, chromium(f"--host-resolver-rules={rules}") as browser:
            # Another port of this host: an origin the console allows (a loopback one), so
            # that the media type is the rule left to refuse it.
            for path in [f"/{n}" for n in range(len(enctypes))]:
                browser.get(f"http://127.0.0.1:{port}{path}")
                wait(browser, lambda b: b.current_url == action)
                assert "UNSUPPORTED_MEDIA_TYPE" in browser.page_source, path
            browser.get(f"http://127.0.0.1:{port}/fetch")
            wait(browser, lambda b: b.title.startswith("done"))
            assert browser.title == "done: fulfilled,rejected"
            # A page of another site: refused for its origin first.
            browser.get(f"http://evil.example:{port}/0")
            wait(browser, lambda b: b.current_url == action)
            assert "ORIGIN_NOT_ALLOWED" in browser.page_source
    finally:
        console.stop()
    assert not [e for e in read_events(config.audit_path) if e.event.phase == "decision"]
    assert run_cli("audit", "pending", "--audit-db", str(config.audit_path)).returncode == 3
