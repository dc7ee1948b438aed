"""The console's tests: a real browser for those that take one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from selenium import webdriver

from tests.console.browsers import chromium


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    with chromium() as driver:
        yield driver
