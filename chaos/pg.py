"""PostgreSQL for chaos seeds: a server from scripts/postgres.sh, a fresh database per use.

The long mode runs on a private server of its own (another data folder and port), so that
hundreds of seeds do not load the server every other test run on this machine shares.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
PRIVATE_DIR = "/tmp/actonce-chaos-pg"
PRIVATE_PORT = "55439"


def server_dsn(*, private: bool) -> str:
    """Start (or reuse) the server and return its maintenance DSN.

    ``private`` picks the chaos server; otherwise the shared test server, or the one
    ACTONCE_TEST_PG_DSN names.
    """
    env = dict(os.environ)
    if private:
        env["ACTONCE_PG_DIR"] = env.get("ACTONCE_CHAOS_PG_DIR", PRIVATE_DIR)
        env["ACTONCE_PG_PORT"] = env.get("ACTONCE_CHAOS_PG_PORT", PRIVATE_PORT)
    elif env.get("ACTONCE_TEST_PG_DSN"):
        return env["ACTONCE_TEST_PG_DSN"]
    out = subprocess.run(
        [str(ROOT / "scripts" / "postgres.sh"), "start"],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    return out.stdout.strip().splitlines()[-1]


def fresh_database(server: str, label: str) -> str:
    """An empty database on ``server``; its DSN."""
    name = re.sub(r"[^a-z0-9_]", "_", f"chaos_{label}_{secrets.token_hex(4)}".lower())[:60]
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return re.sub(r"/[^/?]*(\?|$)", f"/{name}\\1", server, count=1)


def drop_database(server: str, dsn: str) -> None:
    name = dsn.rsplit("/", 1)[-1].split("?", 1)[0]
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
