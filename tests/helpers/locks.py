"""Locks held from outside the code under test, as an operator's stray ``sqlite3`` shell or
a long migration on PostgreSQL would hold them: from another connection of this process,
or from another process, released when the block ends."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import psycopg

if TYPE_CHECKING:
    from sidecar.config import Config

ROOT = Path(__file__).resolve().parents[2]


class _Held(Protocol):
    def close(self) -> None: ...


def _hold(kind: str, target: str, statement: str) -> _Held:
    """A connection (``kind`` sqlite: to a file; postgres: to a DSN) in the transaction
    that ``statement`` opened; closing it ends the transaction."""
    if kind == "sqlite":
        lite = sqlite3.connect(target, isolation_level=None, timeout=30)
        lite.execute(statement)
        return lite
    conn = psycopg.connect(target)
    conn.execute(statement)
    return conn


@contextlib.contextmanager
def lock_held(kind: str, target: str, statement: str) -> Iterator[subprocess.Popen[str]]:
    """Run ``statement`` in another process (``kind`` sqlite: a file path; postgres: a DSN)
    and keep its transaction open until the block ends."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.locks", kind, target, statement],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "held"
        yield process
    finally:
        process.kill()
        process.wait(10)


def _ledger_lock(config: Config) -> tuple[str, str, str]:
    if config.audit_dsn:
        return "postgres", config.audit_dsn, "LOCK TABLE audit_chains IN ACCESS EXCLUSIVE MODE"
    return "sqlite", str(config.audit_path), "BEGIN EXCLUSIVE"


@contextlib.contextmanager
def ledger_locked(config: Config, *, by_another_process: bool = False) -> Iterator[None]:
    """``config``'s audit ledger (PostgreSQL or SQLite) locked against every writer until
    the block ends: from another connection of this process, which takes the lock at
    once, or ``by_another_process``."""
    if by_another_process:
        with lock_held(*_ledger_lock(config)):
            yield
        return
    held = _hold(*_ledger_lock(config))
    try:
        yield
    finally:
        held.close()


if __name__ == "__main__":
    held = _hold(sys.argv[1], sys.argv[2], sys.argv[3])  # kept: collected, it would let go
    print("held", flush=True)
    sys.stdin.read()  # until the test closes our stdin (or kills us)
    held.close()
