"""The console in a real browser: headless Chromium (Debian's, with its chromedriver).

Through the runs list to a run with a step in doubt and its timeline; resolving
the step is refused without the operator's token and recorded with it; the
timeline then shows the decision, and a later attempt's answer from it.
Screenshots go to tests/console/screenshots/ (not committed).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from actonce_api.v1 import types_pb2
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from tests.console.scenario import RUN, TOKEN, finish_run, make_ledger, start_console
from tests.harness import sidecar_config
from tests.server.processes import run_cli

SHOTS = Path(__file__).parent / "screenshots"


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    # `make test` installs Debian's chromium and chromium-driver where they are missing.
    driver_path = shutil.which("chromedriver")
    assert driver_path, (
        "chromedriver is not installed: run `make browser` (apt-get install chromium-driver)"
    )
    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1280,900", "--force-device-scale-factor=1"):  # fmt: skip
        options.add_argument(flag)
    chromium = shutil.which("chromium")
    if chromium:
        options.binary_location = chromium
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def shoot(driver: webdriver.Chrome, name: str) -> Path:
    SHOTS.mkdir(exist_ok=True)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1280, max(600, min(int(height) + 20, 4000)))
    # Two animation frames: the page is laid out again at its new size before the shot.
    driver.execute_async_script(
        "const done = arguments[0];"
        "requestAnimationFrame(() => requestAnimationFrame(() => done()));"
    )
    path = SHOTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


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


def fill(browser: webdriver.Chrome, step_id: str, *, token: str) -> None:
    card = browser.find_element(By.ID, f"item-{step_id}")
    details = card.find_element(By.CSS_SELECTOR, "details.resolve")
    if not details.get_attribute("open"):
        details.find_element(By.TAG_NAME, "summary").click()
    card.find_element(By.CSS_SELECTOR, "input[value='ran']").click()
    result = card.find_element(By.NAME, "result_json")
    result.clear()
    result.send_keys('{"charge": "ch_3PqL", "status": "succeeded"}')
    for name, value in (("by", "dana"), ("reason", "PSP dashboard shows charge ch_3PqL"),
                        ("token", token)):  # fmt: skip
        field = card.find_element(By.NAME, name)
        field.clear()
        if value:
            field.send_keys(value)
    card.find_element(By.CSS_SELECTOR, "button[type='submit']").click()
