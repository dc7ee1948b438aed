"""PostgreSQL going away mid-run: writes fail closed, and the sidecar recovers by itself."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import grpc
import pytest

from sidecar._gen.actonce.v1 import run_actions_pb2 as pb
from sidecar._gen.actonce.v1 import types_pb2
from tests import pg
from tests.harness import refusal, sidecar_config, start_sidecar

SCRIPT = pg.ROOT / "scripts" / "postgres.sh"


def test_a_postgres_outage_fails_writes_closed_and_the_sidecar_recovers(tmp_path: Path) -> None:
    pg.server_dsn()
    ledger, store = pg.fresh_database("ledger"), pg.fresh_database("store")
    sc = start_sidecar(sidecar_config(tmp_path / "data", audit_dsn=ledger, store_dsn=store))
    try:
        attempt = sc.begin("run-pg", checkpoint="c")
        before = sc.stub.Create(pb.CreateRequest(attempt_id=attempt, kind="k", data_json='{"n":1}'))
        subprocess.run([str(SCRIPT), "pause"], check=True, timeout=120)
        try:
            with pytest.raises(grpc.RpcError) as caught:
                sc.stub.Create(pb.CreateRequest(attempt_id=attempt, kind="k", data_json='{"n":2}'))
            got = refusal(caught.value)
            # The intent could not be stored, so nothing was tried: fail closed.
            assert (got.reason, got.failure_class) == ("AUDIT_PERSISTENCE_FAILED", "UNKNOWN")
            deadline = time.monotonic() + 10
            while sc.health() != 2 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert sc.health() == 2  # NOT_SERVING while the database is gone
        finally:
            subprocess.run([str(SCRIPT), "resume"], check=True, timeout=120)
        deadline = time.monotonic() + 30
        while sc.health() != 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sc.health() == 1
        # No restart of the sidecar: the same attempt goes on, and the write
        # that failed closed lands once now.
        after = sc.stub.Create(pb.CreateRequest(attempt_id=attempt, kind="k", data_json='{"n":2}'))
        assert after.outcome == types_pb2.OUTCOME_APPLIED
        assert len(sc.artifacts("k")) == 2 and before.id != after.id
    finally:
        sc.stop()
        pg.drop_database(ledger)
        pg.drop_database(store)
