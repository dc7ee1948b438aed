"""A real PostgreSQL server for tests: scripts/postgres.sh starts one on loopback.

Each test gets a database of its own, so tests never see each other's rows.
ACTONCE_TEST_PG_DSN names an existing server instead (its database is the
template for the per-test ones' connection settings).
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
from functools import cache
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]


@cache
def server_dsn() -> str:
    """The DSN of the test server's maintenance database, starting it if needed."""
    given = os.environ.get("ACTONCE_TEST_PG_DSN")
    if given:
        return given
    out = subprocess.run(
        [str(ROOT / "scripts" / "postgres.sh"), "start"],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return out.stdout.strip().splitlines()[-1]


def fresh_database(label: str = "t") -> str:
    """Create an empty database and return its DSN."""
    base = server_dsn()
    name = re.sub(r"[^a-z0-9_]", "_", f"{label}_{secrets.token_hex(4)}".lower())[:60]
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return (
        re.sub(r"/[^/?]*(\?|$)", f"/{name}\\1", base, count=1)
        if "/" in base.split("@")[-1]
        else f"{base}/{name}"
    )


def drop_database(dsn: str) -> None:
    name = dsn.rsplit("/", 1)[-1].split("?", 1)[0]
    with psycopg.connect(server_dsn(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
