"""The payments server the gateway's tests run in a process of their own, killed after."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fronts.mcp.charges import Charges
from tests.harness import free_port

StartCharges = Callable[..., Charges]


@pytest.fixture
def start_charges(tmp_path: Path) -> Iterator[StartCharges]:
    """Start a payments server (``charge_seconds``, ``busy_first`` as Charges takes them);
    every one started is killed when the test ends."""
    started: list[Charges] = []

    def start(name: str = "payments", **settings: Any) -> Charges:
        upstream = Charges(tmp_path / f"{name}.log", free_port(), **settings).start()
        started.append(upstream)
        return upstream

    yield start
    for upstream in started:
        upstream.kill()


@pytest.fixture
def payments(start_charges: StartCharges) -> Charges:
    # The first set_status is answered "busy": a transient error.
    return start_charges(busy_first=1)


@pytest.fixture
def slow_payments(start_charges: StartCharges) -> Charges:
    return start_charges("slow", charge_seconds=4)
