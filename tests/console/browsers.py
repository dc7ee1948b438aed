"""Headless Chromium (Debian's, with its chromedriver) for the console's browser tests, and
what an operator does in it. Screenshots go to tests/console/screenshots/ (not committed).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

T = TypeVar("T")

SHOTS = Path(__file__).parent / "screenshots"


@contextmanager
def chromium(*flags: str) -> Iterator[webdriver.Chrome]:
    # `make test` installs Debian's chromium and chromium-driver where they are missing.
    driver_path = shutil.which("chromedriver")
    assert driver_path, (
        "chromedriver is not installed: run `make browser` (apt-get install chromium-driver)"
    )
    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1280,900", "--force-device-scale-factor=1", *flags):  # fmt: skip
        options.add_argument(flag)
    binary = shutil.which("chromium")
    if binary:
        options.binary_location = binary
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


def wait(
    browser: webdriver.Chrome, until: Callable[[webdriver.Chrome], T], seconds: float = 15
) -> T:
    """What ``until`` gives once it is truthy: the console's script answers a form after
    its fetch, not as a navigation the driver waits for by itself."""
    ignored = (NoSuchElementException, StaleElementReferenceException)
    return WebDriverWait(browser, seconds, ignored_exceptions=ignored).until(until)


def fill(browser: webdriver.Chrome, step_id: str, *, token: str, by: str | None = "dana") -> None:
    card = browser.find_element(By.ID, f"item-{step_id}")
    details = card.find_element(By.CSS_SELECTOR, "details.resolve")
    if not details.get_attribute("open"):
        details.find_element(By.TAG_NAME, "summary").click()
    card.find_element(By.CSS_SELECTOR, "input[value='ran']").click()
    result = card.find_element(By.NAME, "result_json")
    result.clear()
    result.send_keys('{"charge": "ch_3PqL", "status": "succeeded"}')
    typed = [("reason", "PSP dashboard shows charge ch_3PqL"), ("token", token)]
    for name, value in [("by", by), *typed] if by is not None else typed:
        field = card.find_element(By.NAME, name)
        field.clear()
        if value:
            field.send_keys(value)
    card.find_element(By.CSS_SELECTOR, "button[type='submit']").click()
