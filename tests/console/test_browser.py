"""The console in a real browser: headless Chromium (Debian's, with its chromedriver).

Through the runs list to a run with a step in doubt and its timeline; resolving
the step, through the console's script (the form as JSON), is refused without the
operator's token and recorded with it; the timeline then shows the decision, and
a later attempt's answer from it.
Screenshots go to tests/console/screenshots/ (not committed).
"""

from __future__ import annotations

import json
from pathlib import Path

from actonce_api.v1 import types_pb2
from selenium import webdriver
from selenium.webdriver.common.by import By

from tests.console.browsers import fill, shoot, wait
from tests.console.scenario import RUN, TOKEN, finish_run, make_ledger, start_console
from tests.harness import sidecar_config
from tests.server.processes import run_cli


def test_an_operator_finds_and_resolves_a_step_in_doubt(
    browser: webdriver.Chrome, tmp_path: Path
) -> None:
    config = sidecar_config(tmp_path / "data")
    step_id = make_ledger(config, tmp_path)
    console = start_console(config, tmp_path)
    try:
        # The runs list: the run with the step in doubt says so.
        browser.get(console.url + "/")
        assert "Runs" in browser.title
        row = browser.find_element(By.XPATH, f"//tr[.//a[text()='{RUN}']]")
        assert "1 pending" in row.text and "already applied" in row.text
        assert "1" in browser.find_element(By.CSS_SELECTOR, "header.top .count").text
        shoot(browser, "1-runs")

        # Its timeline: the banner, the attempts, the retry that found its writes applied.
        row.find_element(By.LINK_TEXT, RUN).click()
        assert browser.current_url.endswith(f"/runs/{RUN}")
        banner = browser.find_element(By.CSS_SELECTOR, ".banner.doubt")
        assert "needs a person" in banner.text and "charge_card" in banner.text
        attempts = browser.find_elements(By.CSS_SELECTOR, ".attempt")
        assert len(attempts) == 2
        assert "fenced by A2" in attempts[0].text and "lease until" in attempts[0].text
        assert browser.find_elements(By.CSS_SELECTOR, ".entry.state-already_applied")
        doubt = browser.find_element(By.CSS_SELECTOR, ".entry.step.state-in_doubt")
        assert step_id in doubt.text and "tok_visa" not in browser.page_source  # no payload
        shoot(browser, "2-run-in-doubt")

        # Resolving without the token is refused, and records nothing: the page the console
        # answered, put in place by its script, shows why and keeps what was typed.
        banner.find_element(By.LINK_TEXT, "resolve").click()
        fill(browser, step_id, token="")
        card = f"#item-{step_id}"
        error = wait(browser, lambda b: b.find_element(By.CSS_SELECTOR, f"{card} [role=alert]"))
        assert "token" in error.text
        # Still the pending page: no form was sent as the browser sends one.
        assert "/resolve" not in browser.current_url and "/pending" in browser.current_url
        kept = browser.find_element(By.CSS_SELECTOR, card)
        assert kept.find_element(By.CSS_SELECTOR, "input[value='ran']").is_selected()
        assert kept.find_element(By.NAME, "by").get_attribute("value") == "dana"
        reason = kept.find_element(By.NAME, "reason").get_attribute("value")
        assert reason == "PSP dashboard shows charge ch_3PqL"
        shoot(browser, "3-refused-without-token")
        assert run_cli("audit", "pending", "--audit-db", str(config.audit_path)).returncode == 3

        # With the token it is recorded, and the browser goes where the console's answer
        # says: the run's timeline, at the decision's own event.
        fill(browser, step_id, token=TOKEN)
        wait(browser, lambda b: f"/runs/{RUN}#event-" in b.current_url)
        anchor = browser.current_url.rpartition("#")[2]
        decision = wait(browser, lambda b: b.find_element(By.ID, anchor))
        assert "decision" in (decision.get_attribute("class") or "").split()
        assert not browser.find_elements(By.CSS_SELECTOR, ".banner.doubt")
        assert "Operator decision: ran" in decision.text and "dana" in decision.text
        assert "decided: ran" in browser.find_element(By.CSS_SELECTOR, ".entry.step").text
        assert run_cli("audit", "pending", "--audit-db", str(config.audit_path)).returncode == 0

        # A later attempt answers from the decision; the timeline shows all three attempts.
        answer = finish_run(config, tmp_path)
        assert answer.outcome == types_pb2.OUTCOME_ALREADY_APPLIED
        assert json.loads(answer.result_json) == {"charge": "ch_3PqL", "status": "succeeded"}
        browser.get(f"{console.url}/runs/{RUN}")
        assert len(browser.find_elements(By.CSS_SELECTOR, ".attempt")) == 3
        browser.set_window_size(1280, 900)
        shoot(browser, "4-run-timeline")
        browser.get(console.url + "/pending")
        assert "Nothing needs a person" in browser.page_source
        shoot(browser, "5-pending-empty")

        # The runs filter is a GET form: the browser sends it itself, the script leaves it be.
        browser.get(console.url + "/")
        browser.find_element(By.NAME, "rule").send_keys("digest")
        browser.find_element(By.CSS_SELECTOR, "form.filters button[type='submit']").click()
        wait(browser, lambda b: "rule=digest" in b.current_url)
        links = browser.find_elements(By.CSS_SELECTOR, "a.run-link")
        assert [a.text for a in links] == ["run-digest"]
    finally:
        console.stop()
    verified = run_cli("audit", "verify", "--audit-db", str(config.audit_path))
    assert verified.returncode == 0, verified.stdout
