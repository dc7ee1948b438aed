"""Debian's PgBouncer in front of a test server (`make pgbouncer` installs it): the pooler
large PostgreSQL shops put between a fleet and its server.

A :class:`Pooler` runs one pgbouncer process of its own on a free port, in transaction mode
by default (each transaction may go to another server connection, and no session's state
survives it), as the server's user when the tests run as root (pgbouncer refuses root).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.harness import free_port

BINARY = "/usr/sbin/pgbouncer"


def available() -> bool:
    return Path(BINARY).exists() or shutil.which("pgbouncer") is not None


class Pooler:
    """A pgbouncer process in front of the server ``server_dsn`` names; ``settings`` go into
    its ``[pgbouncer]`` section (``pool_mode``, ``max_client_conn``, ...), ``database`` into
    its databases' line (``connect_query``, ...)."""

    def __init__(
        self, server_dsn: str, *, database: dict[str, str] | None = None, **settings: Any
    ) -> None:
        parts = conninfo_to_dict(server_dsn)
        self._server = (str(parts.get("host", "127.0.0.1")), int(str(parts.get("port", 5432))))
        self._user = str(parts.get("user", "postgres"))
        self._database = database or {}
        self.port = free_port()
        self._settings = {
            "pool_mode": "transaction",
            "max_client_conn": 2000,
            "default_pool_size": 20,
            **settings,
        }
        self._folder = Path(tempfile.mkdtemp(prefix="actonce-pgbouncer-", dir="/tmp"))
        self._process: subprocess.Popen[bytes] | None = None

    def dsn(self, server_dsn: str) -> str:
        """``server_dsn`` (a postgresql:// URI of a database on the pooled server) through
        the pooler."""
        host, port = self._server
        return server_dsn.replace(f"@{host}:{port}/", f"@127.0.0.1:{self.port}/", 1)

    def start(self) -> Pooler:
        host, port = self._server
        lines = [
            "[databases]",
            " ".join([f"* = host={host} port={port}", *self._database_settings()]),
            "[pgbouncer]",
            "listen_addr = 127.0.0.1",
            f"listen_port = {self.port}",
            "unix_socket_dir =",
            "auth_type = trust",
            f"auth_file = {self._folder / 'users.txt'}",
            f"admin_users = {self._user}",
            f"logfile = {self._folder / 'pgbouncer.log'}",
            *(f"{name} = {value}" for name, value in self._settings.items()),
        ]
        (self._folder / "pgbouncer.ini").write_text("\n".join(lines) + "\n")
        (self._folder / "users.txt").write_text(f'"{self._user}" ""\n')
        binary = BINARY if Path(BINARY).exists() else "pgbouncer"
        command = [binary, str(self._folder / "pgbouncer.ini")]
        if os.getuid() == 0:
            shutil.chown(self._folder, "postgres")
            for name in ("pgbouncer.ini", "users.txt"):
                shutil.chown(self._folder / name, "postgres")
            command = ["runuser", "-u", "postgres", "--", *command]
        self._process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self._wait_listening()
        return self

    def _wait_listening(self) -> None:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                with psycopg.connect(self.admin_dsn(), autocommit=True, connect_timeout=2):
                    return
            except psycopg.Error:
                assert self._process is not None
                if self._process.poll() is not None:
                    raise RuntimeError(f"pgbouncer stopped: {self.log()}") from None
                time.sleep(0.1)
        raise RuntimeError(f"pgbouncer did not listen: {self.log()}")

    def _database_settings(self) -> list[str]:
        return [f"{name}={value}" for name, value in self._database.items()]

    def admin_dsn(self) -> str:
        return make_conninfo(
            "", host="127.0.0.1", port=str(self.port), user=self._user, dbname="pgbouncer"
        )

    def admin(self, command: str) -> list[tuple[Any, ...]]:
        """A command of pgbouncer's console (SHOW POOLS, PAUSE, ...): its rows."""
        with psycopg.connect(self.admin_dsn(), autocommit=True, prepare_threshold=None) as conn:
            cur = conn.execute(command)
            return list(cur.fetchall()) if cur.description else []

    def log(self) -> str:
        path = self._folder / "pgbouncer.log"
        return path.read_text()[-2000:] if path.exists() else ""

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(10)
        shutil.rmtree(self._folder, ignore_errors=True)

    def __enter__(self) -> Pooler:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
