"""PostgreSQL restarted while an agent writes, on a private server (the shared test server is
never stopped here).

Writes during the restart fail with a documented reason and class: AUDIT_PERSISTENCE_FAILED
(UNKNOWN) when the ledger could not take an event, STORE_UNAVAILABLE (RETRYABLE) when the
store could not be reached. Nothing acknowledged is lost, a write whose intent failed never
reached the store, reads answer when only the ledger is on PostgreSQL, and the same sidecar
takes writes again once the server is back.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from chaos import pg as chaos_pg
from sidecar._gen.actonce.v1 import run_actions_pb2 as pb
from sidecar._gen.actonce.v1 import types_pb2
from sidecar.ledger import inspect
from sidecar.ledger.postgres import PostgresLedgerReader
from tests.faults.support import data, stored_by_n, wait_for
from tests.harness import Refusal, refusal, sidecar_config, start_sidecar

SCRIPT = chaos_pg.ROOT / "scripts" / "postgres.sh"
PRIVATE = {"ACTONCE_PG_DIR": "/tmp/actonce-faults-pg", "ACTONCE_PG_PORT": "55441"}
DOCUMENTED = {
    ("AUDIT_PERSISTENCE_FAILED", "UNKNOWN"),
    ("STORE_UNAVAILABLE", "RETRYABLE"),
    ("STORE_DEADLINE_EXCEEDED", "RETRYABLE"),
}


def _server(action: str) -> str:
    done = subprocess.run([str(SCRIPT), action], env={**os.environ, **PRIVATE}, check=True,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    return done.stdout.strip()


@pytest.fixture(scope="module")
def private_server() -> Iterator[str]:
    dsn = _server("start").splitlines()[-1]
    yield dsn
    _server("stop")


@pytest.mark.parametrize("store_on_postgres", [False, True], ids=["ledger", "ledger-and-store"])
def test_a_postgres_restart_mid_run_fails_writes_closed_and_the_sidecar_recovers(
    private_server: str, tmp_path: Path, store_on_postgres: bool
) -> None:
    ledger = chaos_pg.fresh_database(private_server, "ledger")
    store = chaos_pg.fresh_database(private_server, "store") if store_on_postgres else None
    sc = start_sidecar(sidecar_config(tmp_path / "data", audit_dsn=ledger, store_dsn=store))
    attempt = sc.begin("run-restart")
    kept = sc.stub.Create(pb.CreateRequest(attempt_id=attempt, kind="kept", data_json="{}"))
    acknowledged: dict[int, str] = {}
    refused: dict[int, Refusal] = {}
    read_failures: list[Refusal] = []
    stop = threading.Event()

    def write() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            try:
                answer = sc.stub.Create(
                    pb.CreateRequest(attempt_id=attempt, kind="k", data_json=data(n)), timeout=30
                )
                acknowledged[n] = answer.id
            except grpc.RpcError as error:
                refused[n] = refusal(error)
            time.sleep(0.01)

    def read() -> None:
        while not stop.is_set():
            try:
                sc.stub.Read(pb.ReadRequest(attempt_id=attempt, artifact_id=kept.id), timeout=30)
            except grpc.RpcError as error:
                read_failures.append(refusal(error))
            time.sleep(0.01)

    threads = [threading.Thread(target=write), threading.Thread(target=read)]
    try:
        for thread in threads:
            thread.start()
        time.sleep(1.0)
        _server("restart")
        assert wait_for(lambda: sc.health() == 1, timeout=30)
        written = len(acknowledged)
        assert wait_for(lambda: len(acknowledged) > written + 20, timeout=30)  # taking writes again
        stop.set()
        for thread in threads:
            thread.join(60)

        assert refused, "the restart was not felt"
        assert {(r.reason, r.failure_class) for r in refused.values()} <= DOCUMENTED
        if not store_on_postgres:
            assert read_failures == []  # the ledger's outage does not stop reads
        else:
            assert {(r.reason, r.failure_class) for r in read_failures} <= DOCUMENTED
        stored = stored_by_n(sc.config, "k")
        # Every acknowledged write is in the store once and has its durable audit outcome.
        assert {n: stored.get(n) for n in acknowledged} == {n: [i] for n, i in acknowledged.items()}
        reader = PostgresLedgerReader(ledger)
        try:
            assert inspect.verify(reader).intact
            applied = {e.event.derived_id for e in reader.events()
                       if e.event.outcome == "OUTCOME_APPLIED"}  # fmt: skip
        finally:
            reader.close()
        assert set(acknowledged.values()) <= applied
        # A write whose intent could not be stored never reached the store.
        for n, got in refused.items():
            if "the store was not called" in got.message:
                assert n not in stored
        # The retryable ones, made again by the same attempt, land once each.
        for n, got in refused.items():
            if got.failure_class == "RETRYABLE":
                again = sc.stub.Create(
                    pb.CreateRequest(attempt_id=attempt, kind="k", data_json=data(n))
                )
                assert again.outcome in (
                    types_pb2.OUTCOME_APPLIED,
                    types_pb2.OUTCOME_ALREADY_APPLIED,
                )
        assert all(len(ids) == 1 for ids in stored_by_n(sc.config, "k").values())
    finally:
        stop.set()
        sc.stop()
        chaos_pg.drop_database(private_server, ledger)
        if store:
            chaos_pg.drop_database(private_server, store)
