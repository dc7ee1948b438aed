"""Fixtures: a running sidecar with the embedded store, on real SQLite files in tmp_path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import RunningSidecar, sidecar_config, start_sidecar


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[RunningSidecar]:
    running = start_sidecar(sidecar_config(tmp_path / "data", send_allowlist=frozenset({"pager"})))
    try:
        yield running
    finally:
        running.stop()
