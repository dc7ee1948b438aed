"""Real faults for the fault tests: a store process of its own, and reading what it kept.

Locks held by another process come from tests.helpers.locks.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc

from chaos.store_snapshot import read_postgres_store, read_sqlite_store
from sidecar.ledger import inspect
from sidecar.ledger.base import LedgerReader
from tests.harness import Refusal, ServerProcess, free_port, refusal
from tests.helpers.env import scrubbed_env
from tests.helpers.health import wait_serving


def spawn_store(data_dir: Path, log_path: Path, *, dsn: str | None = None,
                port: int = 0) -> ServerProcess:  # fmt: skip
    """Start ``actonce store`` and wait until it is SERVING."""
    port = port or free_port()
    args = [sys.executable, "-m", "sidecar.cli", "store", "--listen", f"127.0.0.1:{port}",
            "--data-dir", str(data_dir), "--log-format", "json"]  # fmt: skip
    if dsn:
        args += ["--store-dsn", dsn]
    with log_path.open("ab") as log:
        process = subprocess.Popen(args, stdout=log, stderr=log, env=scrubbed_env())
    store = ServerProcess(process, port, log_path)
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


def applied_in(reader: LedgerReader) -> set[str]:
    """The derived ids of the writes whose APPLIED outcome the ledger holds, once it is
    checked intact; the reader is closed after."""
    try:
        assert inspect.verify(reader).intact
        return {e.event.derived_id for e in reader.events() if e.event.outcome == "OUTCOME_APPLIED"}
    finally:
        reader.close()


def data(n: int) -> str:
    return json.dumps({"n": n})


def stored_by_n(config: Any, kind: str) -> dict[int, list[str]]:
    """The store's artifacts of ``kind`` made by ``data(n)``, read from its database: n -> ids."""
    if config.store_dsn:
        rows = read_postgres_store(config.store_dsn)
    else:
        rows = read_sqlite_store(config.store_path)
    found: dict[int, list[str]] = {}
    for artifact_id, (artifact_kind, _version, data_json, _archived) in rows.artifacts.items():
        if artifact_kind == kind:
            found.setdefault(json.loads(data_json)["n"], []).append(artifact_id)
    return found
