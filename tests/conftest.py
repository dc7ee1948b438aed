"""Fixtures: running sidecars on real backends.

Every behavioural test that takes ``sidecar`` or ``make_config`` runs twice:
on the embedded default (SQLite files in tmp_path) and on PostgreSQL (a
fresh database for the ledger and one for the reference store, on a real
server that scripts/postgres.sh starts).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sidecar.config import Config
from tests.harness import RunningSidecar, sidecar_config, start_sidecar
from tests.helpers import postgres as pg
from tests.helpers.otlp import otlp_receiver  # noqa: F401  (the OTLP receiver, for any test)

MakeConfig = Callable[..., Config]


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_config(backend: str, tmp_path: Path) -> Iterator[MakeConfig]:
    """Build sidecar configurations on this test's backend; databases are dropped after."""
    made: list[str] = []

    def make(data_dir: Path | None = None, **overrides: Any) -> Config:
        if backend == "postgres":
            if "audit_dsn" not in overrides:
                overrides["audit_dsn"] = pg.fresh_database("ledger")
                made.append(overrides["audit_dsn"])
            if "store_dsn" not in overrides and not overrides.get("store_target"):
                overrides["store_dsn"] = pg.fresh_database("store")
                made.append(overrides["store_dsn"])
        return sidecar_config(data_dir or tmp_path / f"data{len(made)}", **overrides)

    yield make
    for dsn in made:
        pg.drop_database(dsn)


@pytest.fixture
def sidecar(make_config: MakeConfig, tmp_path: Path) -> Iterator[RunningSidecar]:
    running = start_sidecar(make_config(tmp_path / "data", send_allowlist=frozenset({"pager"})))
    try:
        yield running
    finally:
        running.stop()
