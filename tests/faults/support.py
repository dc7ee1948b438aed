"""Real faults for the fault tests: another process holding a lock, a store process of its own.

A lock is held by a separate Python process, as an operator's stray ``sqlite3`` shell or a
long migration on PostgreSQL would hold it, and released by ending that process.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from chaos.checker import read_postgres_store, read_sqlite_store
from tests.harness import Refusal, free_port, refusal, wait_serving

_HOLD = """
import sys
kind, target, statement = sys.argv[1], sys.argv[2], sys.argv[3]
if kind == "sqlite":
    import sqlite3
    conn = sqlite3.connect(target, isolation_level=None, timeout=30)
    conn.execute(statement)
else:
    import psycopg
    conn = psycopg.connect(target)
    conn.execute(statement)
print("held", flush=True)
sys.stdin.read()  # until the test closes our stdin (or kills us)
"""


@contextlib.contextmanager
def lock_held(kind: str, target: str, statement: str) -> Iterator[subprocess.Popen[str]]:
    """Run ``statement`` in another process (``kind`` sqlite: a file path; postgres: a DSN)
    and keep its transaction open until the block ends."""
    process = subprocess.Popen(
        [sys.executable, "-c", _HOLD, kind, target, statement],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "held"
        yield process
    finally:
        process.kill()
        process.wait(10)


@contextlib.contextmanager
def ledger_lock(config: Any) -> Iterator[None]:
    """The audit ledger locked against writers by another process."""
    if config.audit_dsn:
        with lock_held("postgres", config.audit_dsn,
                       "BEGIN; LOCK TABLE audit_head IN ACCESS EXCLUSIVE MODE"):  # fmt: skip
            yield
    else:
        with lock_held("sqlite", str(config.audit_path), "BEGIN EXCLUSIVE"):
            yield


@dataclass
class StoreProcess:
    """``actonce store`` in a child process."""

    process: subprocess.Popen[bytes]
    port: int

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)


def spawn_store(data_dir: Path, log_path: Path, *, dsn: str | None = None,
                port: int = 0) -> StoreProcess:  # fmt: skip
    """Start ``actonce store`` and wait until it is SERVING."""
    port = port or free_port()
    args = [sys.executable, "-m", "sidecar.cli", "store", "--listen", f"127.0.0.1:{port}",
            "--data-dir", str(data_dir), "--log-format", "json"]  # fmt: skip
    if dsn:
        args += ["--store-dsn", dsn]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACTONCE_")}
    with log_path.open("ab") as log:
        process = subprocess.Popen(args, stdout=log, stderr=log, env=env)
    store = StoreProcess(process, port)
    try:
        wait_serving(store.target, process)
    except RuntimeError:
        store.stop()
        raise
    return store


def outcome_of(call: Any, request: Any, timeout: float = 30) -> Any | Refusal:
    """The answer to a call, or its refusal decoded."""
    try:
        return call(request, timeout=timeout)
    except grpc.RpcError as error:
        return refusal(error)


def wait_for(predicate: Any, timeout: float = 30.0, every: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every)
    return bool(predicate())


def data(n: int) -> str:
    return json.dumps({"n": n})


def stored_by_n(config: Any, kind: str) -> dict[int, list[str]]:
    """The store's artifacts of ``kind`` made by ``data(n)``, read from its database: n -> ids."""
    if config.store_dsn:
        rows = read_postgres_store(config.store_dsn)
    else:
        rows = read_sqlite_store(config.data_dir / "store.db")
    found: dict[int, list[str]] = {}
    for artifact_id, (artifact_kind, _version, data_json, _archived) in rows.artifacts.items():
        if artifact_kind == kind:
            found.setdefault(json.loads(data_json)["n"], []).append(artifact_id)
    return found
