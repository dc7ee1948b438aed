"""PostgreSQL restarted while an agent writes, reaping idle sessions, or frozen, on a private
server (the shared test server is never stopped or frozen here).

Writes during the restart fail with a documented reason and class: AUDIT_PERSISTENCE_FAILED
(UNKNOWN) when the ledger could not take an event, STORE_UNAVAILABLE (RETRYABLE) when the
store could not be reached. Nothing acknowledged is lost, a write whose intent failed never
reached the store, reads answer when only the ledger is on PostgreSQL, and the same sidecar
takes writes again once the server is back.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import psycopg
import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc
from actonce_api.v1 import types_pb2

from sidecar.config import Config
from sidecar.ledger.postgres import PostgresLedgerReader
from tests.faults.support import applied_in, data, stored_by_n, wait_for
from tests.harness import (
    Refusal,
    RunningSidecar,
    free_port,
    refusal,
    sidecar_config,
    spawn_sidecar,
    start_sidecar,
)
from tests.helpers.postgres import PrivateServer, drop_database, fresh_database
from tests.server.processes import wait_for_status

SERVER = PrivateServer("/tmp/actonce-faults-pg", 55441)
DOCUMENTED = {
    ("AUDIT_PERSISTENCE_FAILED", "UNKNOWN"),
    ("STORE_UNAVAILABLE", "RETRYABLE"),
    ("STORE_DEADLINE_EXCEEDED", "RETRYABLE"),
}


@pytest.fixture(scope="module")
def private_server() -> Iterator[str]:
    yield SERVER.start()
    SERVER.run("stop")


@pytest.mark.parametrize("store_on_postgres", [False, True], ids=["ledger", "ledger-and-store"])
def test_a_postgres_restart_mid_run_fails_writes_closed_and_the_sidecar_recovers(
    private_server: str, tmp_path: Path, store_on_postgres: bool
) -> None:
    ledger = fresh_database("ledger", server=private_server)
    store = fresh_database("store", server=private_server) if store_on_postgres else None
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
        SERVER.run("restart")
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
        applied = applied_in(PostgresLedgerReader(ledger))
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
        drop_database(ledger, server=private_server)
        if store:
            drop_database(store, server=private_server)


# -- a server that restarts, reaps idle sessions, or stops answering ---------------------------


@contextlib.contextmanager
def on_private_server(server: str, on: str, **settings: str) -> Iterator[tuple[str, str | None]]:
    """A ledger DSN on ``server`` (``on`` ledger) or a store DSN on it (``on`` store, the
    ledger then a SQLite file), each database with ``settings`` for every new session."""
    database = fresh_database(on, server=server)
    with psycopg.connect(server, autocommit=True) as conn:
        name = database.rsplit("/", 1)[-1]
        for key, value in settings.items():
            conn.execute(f"ALTER DATABASE \"{name}\" SET {key} = '{value}'")
    try:
        yield (database, None) if on == "ledger" else ("", database)
    finally:
        drop_database(database, server=server)


def _config(tmp_path: Path, dsns: tuple[str, str | None], **overrides: object) -> Config:
    ledger, store = dsns
    return sidecar_config(tmp_path / "data", audit_dsn=ledger or None, store_dsn=store, **overrides)


def _create(sc: RunningSidecar, attempt: str, n: int) -> Any:
    try:
        return sc.stub.Create(
            pb.CreateRequest(attempt_id=attempt, kind="k", data_json=data(n)), timeout=30
        )
    except grpc.RpcError as error:
        return refusal(error)


@pytest.mark.parametrize("on", ["ledger", "store"])
def test_once_a_restarted_server_is_back_no_write_fails(
    private_server: str, tmp_path: Path, on: str
) -> None:
    # The ledger's writer kept its connection from before the restart, found it dead on the
    # first batch after, and failed every write of that batch UNKNOWN.
    with on_private_server(private_server, on) as dsns:
        sc = start_sidecar(_config(tmp_path, dsns))
        try:
            attempt = sc.begin("run-restarted")
            results: list[Any] = []

            def load(first: int) -> None:
                for n in range(first, first + 40):
                    results.append(_create(sc, attempt, n))

            writers = [threading.Thread(target=load, args=(i * 100,)) for i in range(4)]
            for thread in writers:
                thread.start()
            for thread in writers:
                thread.join(60)
            assert all(not isinstance(r, Refusal) for r in results), results
            SERVER.run("restart")
            after: list[Any] = []
            writers = [threading.Thread(target=lambda i=i: after.extend(
                _create(sc, attempt, 1000 + i * 100 + n) for n in range(40))) for i in range(4)]  # fmt: skip
            for thread in writers:
                thread.start()
            for thread in writers:
                thread.join(60)
            assert [r for r in after if isinstance(r, Refusal)] == []
            assert len(after) == 160
        finally:
            sc.stop()


@pytest.mark.parametrize("on", ["ledger", "store"])
def test_writes_after_an_idle_spell_longer_than_idle_session_timeout_succeed(
    private_server: str, tmp_path: Path, on: str
) -> None:
    with on_private_server(private_server, on, idle_session_timeout="1s") as dsns:
        sc = start_sidecar(_config(tmp_path, dsns))
        try:
            attempt = sc.begin("run-idle")
            for n in range(3):
                got = _create(sc, attempt, n)
                assert not isinstance(got, Refusal), got
                time.sleep(1.5)  # the server closes every idle session meanwhile
            assert sc.health() == 1
        finally:
            sc.stop()


def _server_processes() -> list[int]:
    data_dir = SERVER.data_dir
    postmaster = int((data_dir / "postmaster.pid").read_text().split()[0])
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                if int(stat.rpartition(")")[2].split()[1]) == postmaster:
                    children.append(int(entry.name))
    return [postmaster, *children]


@contextlib.contextmanager
def frozen() -> Iterator[None]:
    """Every process of the private server stopped, as on a frozen host or behind a cut
    network: connections stay open, and nothing answers."""
    pids = _server_processes()
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


@pytest.mark.parametrize("on", ["ledger", "store"])
def test_a_frozen_server_fails_writes_in_time_goes_unready_and_lets_sigterm_exit(
    private_server: str, tmp_path: Path, on: str
) -> None:
    busy_ms, store_timeout, grace = 1000, 2.0, 3.0
    probes = f"127.0.0.1:{free_port()}"
    with on_private_server(private_server, on) as dsns:
        sc = spawn_sidecar(
            _config(tmp_path, dsns), tmp_path / "sidecar.log",
            "--audit-busy-timeout-ms", str(busy_ms), "--store-timeout", str(store_timeout),
            "--health-listen", probes, "--grace-period", str(grace),
        )  # fmt: skip
        channel = grpc.insecure_channel(sc.target)
        stub = pb_grpc.RunActionsServiceStub(channel)
        try:
            attempt = stub.BeginAttempt(
                pb.BeginAttemptRequest(run_id="run-frozen", rule="r", checkpoint="c")
            ).attempt_id
            stub.Create(pb.CreateRequest(attempt_id=attempt, kind="k", data_json=data(0)))
            with frozen():
                began = time.monotonic()
                with pytest.raises(grpc.RpcError) as caught:
                    stub.Create(
                        pb.CreateRequest(attempt_id=attempt, kind="k", data_json=data(1)),
                        timeout=20,
                    )
                failed_after = time.monotonic() - began
                got = refusal(caught.value)
                if on == "ledger":
                    # Closed, as the ledger's failures are, within the busy timeout.
                    assert (got.reason, got.failure_class) == (
                        "AUDIT_PERSISTENCE_FAILED",
                        "UNKNOWN",
                    )
                    assert failed_after < busy_ms / 1000 + 0.5, failed_after
                else:
                    assert (got.reason, got.failure_class) == (
                        "STORE_DEADLINE_EXCEEDED",
                        "RETRYABLE",
                    )
                    assert failed_after < store_timeout + 0.5, failed_after
                # Readiness becomes NOT_SERVING within one of the manifest's probe periods (5 s).
                wait_for_status(probes, "NOT_SERVING", timeout=5 - (time.monotonic() - began))
                signalled = time.monotonic()
                sc.process.send_signal(signal.SIGTERM)
                assert sc.process.wait(grace + 10) == 0, sc.log_path.read_text()[-3000:]
                assert time.monotonic() - signalled < grace + 4
        finally:
            channel.close()
            sc.stop()
