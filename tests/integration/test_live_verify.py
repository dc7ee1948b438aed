"""``actonce audit verify`` on a ledger that a running sidecar keeps writing to.

The chain and its recorded head are read in one snapshot, so a batch committed while verify
reads is either wholly seen or not at all: a live ledger verifies intact every time, and an
event edited by hand is still caught.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import grpc
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc

from sidecar.config import Config
from tests.conftest import MakeConfig
from tests.harness import spawn_sidecar
from tests.ledger.test_ledger_backends import Backend

VERIFY_RUNS = 8
WRITERS = 4


def _verify(config: Config) -> subprocess.CompletedProcess[str]:
    where = (
        ["--audit-dsn", config.audit_dsn]
        if config.audit_dsn
        else ["--audit-db", str(config.audit_path)]
    )
    return subprocess.run(
        [sys.executable, "-m", "sidecar.cli", "audit", "verify", *where],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_verify_is_intact_every_time_while_writers_write_and_still_catches_an_edit(
    make_config: MakeConfig, tmp_path: Path
) -> None:
    config = make_config(tmp_path / "data")
    sidecar = spawn_sidecar(config, tmp_path / "sidecar.log")
    stop = threading.Event()
    written = [0] * WRITERS
    errors: list[BaseException] = []

    def writer(worker: int) -> None:
        with grpc.insecure_channel(sidecar.target) as channel:
            stub = pb_grpc.RunActionsServiceStub(channel)
            try:
                attempt = stub.BeginAttempt(
                    pb.BeginAttemptRequest(run_id=f"live-{worker}", rule="r", checkpoint="c"),
                    timeout=10,
                ).attempt_id
                while not stop.is_set():
                    stub.Create(
                        pb.CreateRequest(
                            attempt_id=attempt,
                            kind="k",
                            data_json=f'{{"w":{worker},"n":{written[worker]}}}',
                        ),
                        timeout=10,
                    )
                    written[worker] += 1
            except BaseException as exc:  # surfaced below: a writer must not stop quietly
                errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
    try:
        for thread in threads:
            thread.start()
        verdicts = []
        for _ in range(VERIFY_RUNS):
            before = sum(written)
            out = _verify(config)
            verdicts.append((out.returncode, out.stdout.strip() or out.stderr.strip()))
            assert sum(written) > before, "no write landed while verify read: not a live test"
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
        sidecar.stop()
    assert not errors, errors
    assert all(code == 0 for code, _ in verdicts), verdicts
    assert all("ledger intact" in text for _, text in verdicts), verdicts

    # A hand-edited event is still caught.
    backend = Backend(
        "postgres" if config.audit_dsn else "sqlite",
        {"audit_dsn": config.audit_dsn} if config.audit_dsn else {"audit_db": config.audit_path},
        lambda: None,  # type: ignore[arg-type,return-value]
    )
    backend.sql("UPDATE audit_events SET digest = 'forged' WHERE seq = 5")
    caught = _verify(config)
    assert caught.returncode == 1, caught.stdout + caught.stderr
    assert "first bad event #5" in caught.stdout
