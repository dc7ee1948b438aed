"""The console in a real browser: headless Chromium (Debian's, with its chromedriver).

Through the runs list to a run with a step in doubt and its timeline; resolving
the step is refused without the operator's token and recorded with it; the
timeline then shows the decision, and a later attempt's answer from it.
Screenshots go to tests/console/screenshots/ (not committed).
"""

from __future__ import annotations

import json
from pathlib import Path

from actonce_api.v1 import types_pb2
from selenium import webdriver
from selenium.webdriver.common.by import By

from tests.console.browsers import fill, shoot
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

        # Resolving without the token is refused, and records nothing.
        banner.find_element(By.LINK_TEXT, "resolve").click()
        fill(browser, step_id, token="")
        error = browser.find_element(By.CSS_SELECTOR, ".error")
        assert "token" in error.text
        shoot(browser, "3-refused-without-token")
        assert run_cli("audit", "pending", "--audit-db", str(config.audit_path)).returncode == 3

        # With the token it is recorded, and the browser lands on the run's timeline.
        fill(browser, step_id, token=TOKEN)
        assert f"/runs/{RUN}" in browser.current_url
        assert not browser.find_elements(By.CSS_SELECTOR, ".banner.doubt")
        decision = browser.find_element(By.CSS_SELECTOR, ".entry.decision")
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
    finally:
        console.stop()
    verified = run_cli("audit", "verify", "--audit-db", str(config.audit_path))
    assert verified.returncode == 0, verified.stdout
