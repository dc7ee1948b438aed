"""PostgreSQL for the tests, the chaos harness and the benchmarks: servers that
scripts/postgres.sh runs on loopback, and a fresh database of their own for each user.

The shared test server (``server_dsn``) serves every test; ACTONCE_TEST_PG_DSN names an
existing server instead. A :class:`PrivateServer` has a data folder and port of its own, for
those who stop, restart, pause or freeze their server, or load it for long, without
touching the one everybody else uses.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "postgres.sh"


def _script(command: str, env: dict[str, str], prefix: Sequence[str] = ()) -> str:
    done = subprocess.run([*prefix, str(SCRIPT), command], env=env, check=True,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    return done.stdout.strip()


@dataclass(frozen=True)
class PrivateServer:
    """A server of its own: its data under ``folder``, listening on ``port``.

    ``prefix`` runs the script under another command (the benchmarks pin the server to a
    core with it). The folder must be one the server's user can reach: under /tmp itself.
    """

    folder: str
    port: int
    prefix: tuple[str, ...] = ()

    def run(self, command: str) -> str:
        """``scripts/postgres.sh COMMAND`` (start, stop, restart, pause, resume) on this
        server; what it printed."""
        env = {**os.environ, "ACTONCE_PG_DIR": self.folder, "ACTONCE_PG_PORT": str(self.port)}
        return _script(command, env, self.prefix)

    def start(self) -> str:
        """Start the server (or find it running); its maintenance DSN."""
        return self.run("start").splitlines()[-1]

    @property
    def data_dir(self) -> Path:
        return Path(self.folder) / "data"


@cache
def server_dsn() -> str:
    """The maintenance DSN of the shared test server, started if need be."""
    given = os.environ.get("ACTONCE_TEST_PG_DSN")
    if given:
        return given
    return _script("start", dict(os.environ)).splitlines()[-1]


def fresh_database(label: str = "t", *, server: str | None = None) -> str:
    """An empty database of a name of its own on ``server`` (a maintenance DSN; the shared
    test server by default); its DSN."""
    base = server or server_dsn()
    name = re.sub(r"[^a-z0-9_]", "_", f"{label}_{secrets.token_hex(4)}".lower())[:60]
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return (
        re.sub(r"/[^/?]*(\?|$)", f"/{name}\\1", base, count=1)
        if "/" in base.split("@")[-1]
        else f"{base}/{name}"
    )


def drop_database(dsn: str, *, server: str | None = None) -> None:
    """Drop the database ``dsn`` names, whoever is still connected to it."""
    name = dsn.rsplit("/", 1)[-1].split("?", 1)[0]
    with psycopg.connect(server or server_dsn(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
