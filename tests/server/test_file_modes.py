"""Owner-only files, whatever the umask.

`actonce serve` under umask 002, on a data folder an earlier release left readable by all:
the folder is 0700, the ledger's and the store's SQLite files (with their WAL and
shared-memory files) 0600, and so are the sockets it listens on (`--listen unix:PATH`, the
embedded store's) and what `actonce audit prune --export` writes.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc

from tests.harness import begin
from tests.helpers.env import scrubbed_env
from tests.helpers.health import wait_serving


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _loose() -> None:
    os.umask(0o002)


@pytest.mark.parametrize("files", [("audit.db",), ("audit.db", "store.db")])
def test_every_file_the_sidecar_makes_is_its_owners_alone_under_umask_002(
    tmp_path: Path, files: tuple[str, ...]
) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    os.chmod(data, 0o755)
    for name in files:  # as an earlier release left them (empty), one file or two
        (data / name).touch(mode=0o644)
        os.chmod(data / name, 0o644)
    listen = tmp_path / "sock" / "actonce.sock"
    listen.parent.mkdir()
    args = [sys.executable, "-m", "sidecar.cli", "serve", "--listen", f"unix:{listen}",
            "--data-dir", str(data), "--log-format", "json"]  # fmt: skip
    with (tmp_path / "serve.log").open("ab") as log:
        process = subprocess.Popen(args, stdout=log, stderr=log, env=scrubbed_env(),
                                   preexec_fn=_loose)  # fmt: skip
    try:
        wait_serving(f"unix:{listen}", process)
        with grpc.insecure_channel(f"unix:{listen}") as channel:
            stub = pb_grpc.RunActionsServiceStub(channel)
            attempt = begin(stub, "run-1")
            stub.Create(pb.CreateRequest(attempt_id=attempt, kind="note", data_json='{"a":1}'))
            stub.EndAttempt(pb.EndAttemptRequest(attempt_id=attempt))
        modes = {path.name: _mode(path) for path in data.iterdir()}
        assert _mode(data) == 0o700
        # A folder with no store's file of its own keeps the store's tables in the ledger's.
        made = [f"{name}{suffix}" for name in files for suffix in ("", "-wal", "-shm")]
        assert ("store.db" in modes) == ("store.db" in files)
        for name in (*made, "store.sock"):
            assert modes.get(name) == 0o600, (name, modes)
        assert _mode(listen) == 0o600
    finally:
        process.terminate()
        process.wait(30)

    export = tmp_path / "pruned.jsonl"
    pruned = subprocess.run(
        [sys.executable, "-m", "sidecar.cli", "audit", "prune", "--before", "0h", "--export",
         str(export), "--audit-db", str(data / "audit.db")],
        capture_output=True, text=True, timeout=60, env=scrubbed_env(), preexec_fn=_loose,
    )  # fmt: skip
    assert pruned.returncode == 0, pruned.stderr
    assert export.read_text() and _mode(export) == 0o600
