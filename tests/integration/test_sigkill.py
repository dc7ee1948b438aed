"""A sidecar killed with SIGKILL while concurrent writes are group-committed
loses no acknowledged write's audit outcome, on either backend."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import grpc
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc

from sidecar.ledger import inspect
from sidecar.ledger.audit_command import open_reader
from tests.conftest import MakeConfig
from tests.harness import spawn_sidecar


def test_every_acknowledged_write_has_its_audit_outcome_after_sigkill(
    make_config: MakeConfig, tmp_path: Path
) -> None:
    config = make_config(tmp_path / "data")
    sidecar = spawn_sidecar(config, tmp_path / "sidecar.log")
    acknowledged: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def writer(worker: int) -> None:
        channel = grpc.insecure_channel(sidecar.target)
        stub = pb_grpc.RunActionsServiceStub(channel)
        try:
            attempt = stub.BeginAttempt(
                pb.BeginAttemptRequest(run_id=f"run-{worker}", rule="r", checkpoint="c")
            ).attempt_id
            n = 0
            while not stop.is_set():
                n += 1
                answer = stub.Create(
                    pb.CreateRequest(
                        attempt_id=attempt, kind="k", data_json=f'{{"w":{worker},"n":{n}}}'
                    ),
                    timeout=5,
                )
                with lock:
                    acknowledged.append(answer.id)
        except grpc.RpcError:
            pass  # the sidecar died under us: unacknowledged, as it should be
        finally:
            channel.close()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 20
    while len(acknowledged) < 200 and time.monotonic() < deadline:
        time.sleep(0.02)
    sidecar.process.kill()  # SIGKILL, mid-stream
    sidecar.process.wait(10)
    stop.set()
    for thread in threads:
        thread.join(10)
    with lock:
        acked = set(acknowledged)
    assert len(acked) >= 200

    reader = open_reader({"audit_dsn": config.audit_dsn, "audit_db": config.audit_path})
    try:
        outcomes = {
            e.event.derived_id
            for e in reader.events()
            if e.event.phase == "outcome" and e.event.outcome == "OUTCOME_APPLIED"
        }
        assert inspect.verify(reader).intact  # a kill mid-commit leaves no torn event
    finally:
        reader.close()
    assert acked - outcomes == set()

    # After a restart, the ledger's chain is intact and the sidecar serves again.
    again = spawn_sidecar(config, tmp_path / "sidecar.log")
    again.stop()
