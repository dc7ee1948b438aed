"""A fleet behind PgBouncer in transaction mode (Debian's, `make pgbouncer`), and the server
connections a sidecar holds.

Behind a pooler in transaction mode each transaction may run on another server connection and
no session's state survives it: no startup ``options``, no prepared statement, no setting made
for the session. A burst of writes from several sidecars, some killed and their runs retried
on the others, then lands with its audit: no ``AUDIT_PERSISTENCE_FAILED``, nothing twice,
``audit verify`` intact. A pooler that hands the sidecar connections that cannot write makes
it NOT_SERVING, whatever its reads do.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import grpc
import psycopg
import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc
from actonce_api.v1 import types_pb2
from grpc_health.v1 import health_pb2

from sidecar.ledger import inspect
from sidecar.ledger.base import Phase
from sidecar.ledger.pgschema import migrate
from sidecar.ledger.postgres import PostgresLedgerReader
from tests.faults.support import data, stored_by_n, wait_for
from tests.harness import (
    Refusal,
    ServerProcess,
    refusal,
    sidecar_config,
    spawn_sidecar,
    start_sidecar,
)
from tests.helpers import pgbouncer
from tests.helpers.postgres import drop_database, fresh_database, server_dsn
from tests.server.scrape import scrape, value

pytestmark = pytest.mark.skipif(
    not pgbouncer.available(), reason="needs Debian's pgbouncer: make pgbouncer"
)

SIDECARS = 3
RUNS = 20
WRITES_PER_RUN = 100  # 2,000 writes in all


@pytest.fixture
def databases() -> Iterator[tuple[str, str]]:
    ledger, store = fresh_database("ledger"), fresh_database("store")
    migrate(ledger)  # as the owner, directly: the sidecars only append
    try:
        yield ledger, store
    finally:
        drop_database(ledger)
        drop_database(store)


def _connections(database: str) -> int:
    """The client connections to ``database`` now (autovacuum's workers are not clients)."""
    name = database.rsplit("/", 1)[-1]
    with psycopg.connect(server_dsn(), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
            "AND backend_type = 'client backend'",
            (name,),
        ).fetchone()
    return int(row[0]) if row else 0


class _Fleet:
    """Sidecar processes on one ledger and one store, both through the pooler."""

    def __init__(self, tmp_path: Path, ledger: str, store: str) -> None:
        self._tmp = tmp_path
        self._dsns = (ledger, store)
        self._made = itertools.count()
        self.sidecars: list[ServerProcess] = []

    def spawn(self) -> ServerProcess:
        n = next(self._made)
        ledger, store = self._dsns
        config = sidecar_config(self._tmp / f"data{n}", audit_dsn=ledger, store_dsn=store)
        sidecar = spawn_sidecar(config, self._tmp / f"sidecar{n}.log")
        self.sidecars.append(sidecar)
        return sidecar

    def stop(self) -> None:
        for sidecar in self.sidecars:
            sidecar.stop()


class _Run:
    """One run's writes, retried in a new attempt on another sidecar when its own dies."""

    def __init__(self, fleet: _Fleet, number: int) -> None:
        self.fleet = fleet
        self.run_id = f"run-{number}"
        self.number = number
        self.refusals: list[Refusal] = []
        self.acknowledged: dict[int, str] = {}
        # Every answer of every attempt: (attempt_id, artifact id, outcome).
        self.answers: list[tuple[str, str, str]] = []

    def go(self) -> None:
        for tries in range(20):
            alive = [s for s in self.fleet.sidecars if s.process.poll() is None]
            sidecar = alive[(self.number + tries) % len(alive)]
            with grpc.insecure_channel(sidecar.target) as channel:
                try:
                    self._attempt(pb_grpc.RunActionsServiceStub(channel))
                    return
                except grpc.RpcError as error:
                    if error.code() != grpc.StatusCode.UNAVAILABLE:  # not a sidecar that died
                        self.refusals.append(refusal(error))
                    time.sleep(0.2)

    def _attempt(self, stub: pb_grpc.RunActionsServiceStub) -> None:
        attempt = stub.BeginAttempt(
            pb.BeginAttemptRequest(run_id=self.run_id, rule="r", checkpoint="c"), timeout=10
        ).attempt_id
        # A retried attempt makes the same writes from the start: each lands once.
        for n in range(WRITES_PER_RUN):
            answer = stub.Create(
                pb.CreateRequest(
                    attempt_id=attempt, kind="k", data_json=data(self.number * 1000 + n)
                ),
                timeout=10,
            )
            self.acknowledged[n] = answer.id
            self.answers.append((attempt, answer.id, types_pb2.Outcome.Name(answer.outcome)))


def test_a_burst_through_pgbouncer_in_transaction_mode_with_kills_lands_once(
    databases: tuple[str, str], tmp_path: Path
) -> None:
    ledger, store = databases
    with pgbouncer.Pooler(server_dsn()) as pooler:
        fleet = _Fleet(tmp_path, pooler.dsn(ledger), pooler.dsn(store))
        try:
            for _ in range(SIDECARS):
                fleet.spawn()
            runs = [_Run(fleet, n) for n in range(RUNS)]
            threads = [threading.Thread(target=run.go) for run in runs]
            for thread in threads:
                thread.start()

            def written() -> int:
                return sum(len(run.acknowledged) for run in runs)

            assert wait_for(lambda: written() > 400, timeout=60)
            fleet.sidecars[0].process.kill()  # mid-burst
            fleet.spawn()  # and a pod in its place
            assert wait_for(lambda: written() > 1200, timeout=60)
            fleet.sidecars[1].process.kill()
            for thread in threads:
                thread.join(120)
        finally:
            fleet.stop()

    assert all(len(run.acknowledged) == WRITES_PER_RUN for run in runs)
    refused = Counter(r.reason for run in runs for r in run.refusals)
    assert refused["AUDIT_PERSISTENCE_FAILED"] == 0, refused
    # Nothing twice: each write is in the store once, and applied once in the ledger.
    stored = stored_by_n(sidecar_config(tmp_path / "read", store_dsn=store), "k")
    assert len(stored) == RUNS * WRITES_PER_RUN
    assert all(len(ids) == 1 for ids in stored.values())
    assert stored == {
        run.number * 1000 + n: [i] for run in runs for n, i in run.acknowledged.items()
    }
    reader = PostgresLedgerReader(ledger)
    try:
        verdict = inspect.verify(reader)
        assert verdict.intact, verdict
        outcomes = [e.event for e in reader.events() if e.event.phase == Phase.OUTCOME]
    finally:
        reader.close()
    applied = Counter(e.derived_id for e in outcomes if e.outcome == "OUTCOME_APPLIED")
    assert set(applied.values()) == {1}
    # Nothing answered before its outcome was durable: each answer is the outcome event of
    # the attempt that gave it. Not each an APPLIED one: a sidecar killed after the store
    # made a write and before its outcome committed answered nothing, and the run's retry
    # finds the id used and answers ALREADY_APPLIED, as its own outcome records.
    recorded = {(e.attempt_id, e.derived_id, e.outcome) for e in outcomes}
    answered = {answer for run in runs for answer in run.answers}
    assert answered <= recorded, answered - recorded


def test_a_pooler_whose_connections_cannot_write_makes_the_sidecar_not_serving(
    databases: tuple[str, str], tmp_path: Path
) -> None:
    ledger, _store = databases
    # Its server connections are read-only, as a pooler pointed at a standby hands out:
    # reads answer, every write fails.
    read_only = {"connect_query": "'SET default_transaction_read_only = on'"}
    with pgbouncer.Pooler(server_dsn(), database=read_only) as pooler:
        sidecar = start_sidecar(sidecar_config(tmp_path / "data", audit_dsn=pooler.dsn(ledger)))
        try:
            assert wait_for(
                lambda: sidecar.health() == health_pb2.HealthCheckResponse.NOT_SERVING, timeout=15
            )
            attempt = sidecar.stub.BeginAttempt
            with pytest.raises(grpc.RpcError) as refused:
                attempt(pb.BeginAttemptRequest(run_id="run-1", rule="r", checkpoint="c"))
            assert refusal(refused.value).reason == "AUDIT_PERSISTENCE_FAILED"
        finally:
            sidecar.stop()


def test_a_sidecar_holds_at_most_its_pools_of_server_connections(
    databases: tuple[str, str], tmp_path: Path
) -> None:
    ledger, store = databases
    sidecar = start_sidecar(sidecar_config(tmp_path / "data", audit_dsn=ledger, store_dsn=store))
    held = {"ledger": 0, "store": 0}
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            held["ledger"] = max(held["ledger"], _connections(ledger))
            held["store"] = max(held["store"], _connections(store))
            time.sleep(0.05)

    def write(run: int) -> None:
        attempt = sidecar.begin(f"run-{run}")
        for n in range(60):
            sidecar.stub.Create(pb.CreateRequest(attempt_id=attempt, kind="k", data_json=data(n)))
            sidecar.stub.BeginStep(
                pb.BeginStepRequest(attempt_id=attempt, tool=f"t{n}", args_json="{}")
            )

    sidecar.begin("run-first")  # started: what it opened to start with is closed
    time.sleep(0.5)
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        writers = [threading.Thread(target=write, args=(run,)) for run in range(8)]
        for thread in writers:
            thread.start()
        for thread in writers:
            thread.join(120)
        time.sleep(2.5)  # a heartbeat and a health check or two
    finally:
        stop.set()
        watcher.join()
        sidecar.stop()
    assert 1 <= held["ledger"] <= 2, held
    assert 1 <= held["store"] <= 2, held


def test_the_pending_gauge_counts_through_pgbouncer_and_lets_its_connection_go(
    databases: tuple[str, str], tmp_path: Path
) -> None:
    # The gauge's reader sent the operator's lock timeout as a startup option, which stock
    # PgBouncer refuses, and kept its connection open between scrapes: a third per sidecar.
    ledger, _store = databases
    with pgbouncer.Pooler(server_dsn()) as pooler:
        config = sidecar_config(
            tmp_path / "data", audit_dsn=pooler.dsn(ledger), metrics_listen="127.0.0.1:0"
        )
        sidecar = start_sidecar(config)
        try:
            attempt = sidecar.begin("run-1")
            sidecar.stub.Create(pb.CreateRequest(attempt_id=attempt, kind="k", data_json="{}"))
            endpoint = sidecar.sidecar.metrics_endpoint
            assert endpoint is not None
            samples = scrape(endpoint.port)
            assert value(samples, "actonce_pending_scrape_errors_total") == 0
            clients = pooler.admin("SHOW CLIENTS")
            assert len([c for c in clients if c[2] != "pgbouncer"]) <= 2, clients
        finally:
            sidecar.stop()
