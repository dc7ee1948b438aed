"""What only the PostgreSQL backend has: a shared database, durability settings, reconnecting.

The rules every backend keeps are in test_backend_rules.py. The outage tests stop and restart
a PostgreSQL server of their own (scripts/postgres.sh on another folder and port), so that the
shared test server stays up for every other test.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import grpc
import psycopg
import pytest
import structlog
from actonce_api.store.v1 import artifact_store_pb2 as pb
from actonce_api.store.v1 import artifact_store_pb2_grpc as pb_grpc

from sidecar.errors import FailureClass, StoreUnavailable
from sidecar.refstore.backend import NewMessage, StoreUnavailableError
from sidecar.refstore.postgres import SCHEMA_VERSION, PostgresStoreBackend
from sidecar.refstore.server import create_store_server
from sidecar.upstream.base import CreateArtifact
from sidecar.upstream.grpc import GrpcStoreClient
from tests.harness import free_port
from tests.helpers import postgres as pg
from tests.helpers.postgres import PrivateServer, fresh_database


@pytest.fixture
def dsn() -> Iterator[str]:
    made = pg.fresh_database("store_pg")
    yield made
    pg.drop_database(made)


def _tables(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
        ).fetchall()
    return {row[0] for row in rows}


def test_tables_are_prefixed_so_other_parts_can_share_the_database(dsn: str) -> None:
    # A table of the same bare name, as another part of the project might own.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE artifacts (id TEXT PRIMARY KEY)")
        conn.execute("INSERT INTO artifacts VALUES ('theirs')")
    backend = PostgresStoreBackend(dsn)
    try:
        backend.create_artifact("ours", "note", "{}")
    finally:
        backend.close()
    assert _tables(dsn) == {
        "artifacts",
        "store_artifacts",
        "store_proposals",
        "store_threads",
        "store_messages",
        "store_turn_requests",
        "store_schema_version",
    }
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT id FROM artifacts").fetchall() == [("theirs",)]


def test_backends_starting_together_on_an_empty_database_create_the_schema_once(
    dsn: str,
) -> None:
    start = threading.Barrier(6)
    opened: list[PostgresStoreBackend] = []
    errors: list[BaseException] = []

    def open_one() -> None:
        start.wait()
        try:
            opened.append(PostgresStoreBackend(dsn))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=open_one) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for backend in opened:
        backend.close()
    assert errors == []
    assert len(opened) == 6
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT version FROM store_schema_version").fetchall()
    assert rows == [(SCHEMA_VERSION,)]


def test_connections_commit_durably_at_read_committed_whatever_the_database_defaults(
    dsn: str,
) -> None:
    name = dsn.rsplit("/", 1)[-1]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = off')
        conn.execute(f'ALTER DATABASE "{name}" SET default_transaction_isolation = serializable')
    backend = PostgresStoreBackend(dsn)
    try:
        backend.create_thread("t1", "Hi")
        # White-box: both are per-connection settings, so they are read on the backend's own.
        with backend._pool.connection() as conn, conn.transaction():
            assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
            assert conn.execute("SHOW transaction_isolation").fetchone() == ("read committed",)
    finally:
        backend.close()


def test_an_unreachable_server_is_unavailable_not_a_fault() -> None:
    nobody = f"postgresql://postgres@127.0.0.1:{free_port()}/actonce"
    began = time.monotonic()
    with pytest.raises(StoreUnavailableError, match="cannot connect"):
        PostgresStoreBackend(nobody, connect_timeout=2)
    assert time.monotonic() - began < 10


def test_a_malformed_dsn_is_a_value_error_that_does_not_quote_it() -> None:
    with pytest.raises(ValueError, match="not a PostgreSQL connection string") as caught:
        PostgresStoreBackend("host=127.0.0.1 password=hunter2 oops")
    assert "hunter2" not in str(caught.value)
    assert caught.value.__suppress_context__


def test_a_bad_pool_size_is_refused(dsn: str) -> None:
    with pytest.raises(ValueError, match="pool_size"):
        PostgresStoreBackend(dsn, pool_size=0)


def test_callers_beyond_the_pool_wait_for_a_connection(dsn: str) -> None:
    backend = PostgresStoreBackend(dsn, pool_size=2)
    try:
        backend.create_thread("t1", "One")
        failures: list[BaseException] = []

        def post(n: int) -> None:
            try:
                backend.post_message(NewMessage(f"m{n}", "t1", "message", "x"))
            except BaseException as error:
                failures.append(error)

        threads = [threading.Thread(target=post, args=(n,)) for n in range(12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert failures == []
        assert len(backend.list_messages("t1")) == 12
        with psycopg.connect(dsn) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'actonce-store'"
                " AND datname = current_database()"
            ).fetchone()
        assert row is not None and row[0] <= 2
    finally:
        backend.close()


# Outages, on a server of the tests' own


@dataclass(frozen=True)
class OwnServer:
    """A PostgreSQL server these tests may stop and restart, and its maintenance DSN."""

    server: PrivateServer
    dsn: str

    def run(self, command: str) -> str:
        return self.server.run(command)

    def fresh_database(self, label: str) -> str:
        return fresh_database(label, server=self.dsn)


@pytest.fixture(scope="module")
def own_server() -> Iterator[OwnServer]:
    # Under /tmp itself: the server runs as another user, who must reach its folder.
    server = PrivateServer(tempfile.mkdtemp(prefix="actonce-store-pg-"), free_port())
    try:
        yield OwnServer(server, server.start())
    finally:
        server.run("stop")
        shutil.rmtree(server.folder, ignore_errors=True)


def test_calls_fail_while_the_server_is_down_then_the_same_backend_works_again(
    own_server: OwnServer,
) -> None:
    backend = PostgresStoreBackend(own_server.fresh_database("down"), connect_timeout=2)
    try:
        backend.create_artifact("a1", "note", '{"n": 1}')
        own_server.run("pause")
        try:
            with pytest.raises(StoreUnavailableError):
                backend.get_artifact("a1")
            with pytest.raises(StoreUnavailableError):
                backend.create_artifact("a2", "note", "{}")
            with structlog.testing.capture_logs() as logs:
                seen_raw, seen_by_sidecar = asyncio.run(_create_over_grpc(backend))
        finally:
            own_server.run("resume")

        # Over gRPC: UNAVAILABLE, which the sidecar takes for STORE_UNAVAILABLE, RETRYABLE.
        assert seen_raw == grpc.StatusCode.UNAVAILABLE
        assert (seen_by_sidecar.reason, seen_by_sidecar.failure_class) == (
            "STORE_UNAVAILABLE",
            FailureClass.RETRYABLE,
        )
        assert [entry["event"] for entry in logs if entry["log_level"] == "warning"] == [
            "store.unavailable",
            "store.unavailable",
        ]

        # The same object, not recreated: it connects again by itself.
        assert backend.get_artifact("a1").data_json == '{"n":1}'
        assert backend.create_artifact("a2", "note", "{}").version == 1
    finally:
        backend.close()


async def _create_over_grpc(
    backend: PostgresStoreBackend,
) -> tuple[grpc.StatusCode, StoreUnavailable]:
    server, port = await create_store_server(backend)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.ArtifactStoreServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as raw:
                await stub.CreateArtifact(
                    pb.CreateArtifactRequest(artifact_id="a3", kind="note", data_json="{}")
                )
        client = GrpcStoreClient.insecure(f"127.0.0.1:{port}", timeout_seconds=10)
        try:
            with pytest.raises(StoreUnavailable) as mapped:
                await client.call(CreateArtifact("a3", "note", "{}"))
        finally:
            await client.close()
        return raw.value.code(), mapped.value
    finally:
        await server.stop(None)


def test_a_restart_mid_use_fails_calls_during_it_and_loses_no_acknowledged_write(
    own_server: OwnServer,
) -> None:
    backend = PostgresStoreBackend(own_server.fresh_database("restart"), connect_timeout=2)
    acknowledged: list[str] = []
    unavailable: list[str] = []
    other: list[BaseException] = []
    stop = threading.Event()

    def keep_writing() -> None:
        n = 0
        while not stop.is_set():
            artifact_id = f"a{n}"
            n += 1
            try:
                backend.create_artifact(artifact_id, "note", '{"n": 1}')
                acknowledged.append(artifact_id)
            except StoreUnavailableError:
                unavailable.append(artifact_id)
                time.sleep(0.01)
            except BaseException as error:
                other.append(error)
                return

    writer = threading.Thread(target=keep_writing)
    writer.start()
    try:
        _wait_for(lambda: len(acknowledged) >= 20)
        own_server.run("restart")
        after_restart = len(acknowledged)
        # Writes go on by themselves once the server is back.
        _wait_for(lambda: len(acknowledged) >= after_restart + 20)
    finally:
        stop.set()
        writer.join(timeout=60)
    try:
        assert other == []
        assert unavailable, "no call fell into the restart"
        for artifact_id in acknowledged:
            assert backend.get_artifact(artifact_id).version == 1
    finally:
        backend.close()


def test_stale_pooled_connections_are_replaced_without_failing_a_call(
    own_server: OwnServer,
) -> None:
    backend = PostgresStoreBackend(own_server.fresh_database("stale"), pool_size=3)
    try:
        # Three connections in the pool, all of which the restart below ends.
        backend.create_thread("t1", "One")
        start = threading.Barrier(3)

        def post(n: int) -> None:
            start.wait()
            backend.post_message(NewMessage(f"m{n}", "t1", "notice", "x"))

        threads = [threading.Thread(target=post, args=(n,)) for n in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        own_server.run("restart")
        # Nothing was in flight: the first call after the restart succeeds outright.
        backend.post_message(NewMessage("m3", "t1", "notice", "x"))
        assert sorted(m.id for m in backend.list_messages("t1")) == ["m0", "m1", "m2", "m3"]
    finally:
        backend.close()


def _wait_for(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.01)
