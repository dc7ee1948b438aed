"""Fixtures: the store's behavioural tests run once on SQLite and once on PostgreSQL.

`store_place` is where one test's data lives (a SQLite file, or a PostgreSQL database); its
`open()` makes a backend on that data, as many times as a test needs (a second process, a
reopening). `backend` is one such backend, closed after the test.

PostgreSQL tests share one database (creating one per test would cost far more than the test):
each test starts from empty tables, and the schema version is put back.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest

from sidecar.refstore import postgres
from sidecar.refstore.backend import StoreBackend
from sidecar.refstore.postgres import PostgresStoreBackend
from sidecar.refstore.sqlite import SqliteStoreBackend
from tests.helpers import postgres as pg

# Children first: the foreign keys point at the parents.
_PG_TABLES = (
    "store_turn_requests",
    "store_messages",
    "store_threads",
    "store_proposals",
    "store_artifacts",
)


@dataclass
class StorePlace:
    """Where one test's store data lives, on one of the two backends."""

    name: str
    path: Path | None = None
    dsn: str | None = None
    opened: list[StoreBackend] = field(default_factory=list)

    def open(self) -> StoreBackend:
        """A new backend on this place's data; closed after the test if still open."""
        backend: StoreBackend
        if self.dsn is not None:
            backend = PostgresStoreBackend(self.dsn)
        else:
            assert self.path is not None
            backend = SqliteStoreBackend(self.path)
        self.opened.append(backend)
        return backend

    def set_schema_version(self, version: int) -> None:
        """Mark the stored schema as another version, as a newer build would have."""
        if self.dsn is not None:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                conn.execute("UPDATE store_schema_version SET version = %s", (version,))
        else:
            with sqlite3.connect(str(self.path)) as db:
                db.execute(f"PRAGMA user_version = {int(version)}")

    @contextmanager
    def turn_requests_refused(self) -> Iterator[None]:
        """Make every turn request's insert fail inside its transaction, as a crash would.

        The failure's message holds "turn requests refused".
        """
        if self.dsn is not None:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                conn.execute(
                    "CREATE FUNCTION refuse_turns() RETURNS trigger LANGUAGE plpgsql AS"
                    " $$ BEGIN RAISE EXCEPTION 'turn requests refused'; END $$"
                )
                conn.execute(
                    "CREATE TRIGGER refuse_turns BEFORE INSERT ON store_turn_requests"
                    " FOR EACH ROW EXECUTE FUNCTION refuse_turns()"
                )
            try:
                yield
            finally:
                with psycopg.connect(self.dsn, autocommit=True) as conn:
                    conn.execute("DROP TRIGGER refuse_turns ON store_turn_requests")
                    conn.execute("DROP FUNCTION refuse_turns()")
        else:
            with sqlite3.connect(str(self.path)) as db:
                db.execute(
                    "CREATE TRIGGER refuse_turns BEFORE INSERT ON turn_requests"
                    " BEGIN SELECT RAISE(ABORT, 'turn requests refused'); END"
                )
            try:
                yield
            finally:
                with sqlite3.connect(str(self.path)) as db:
                    db.execute("DROP TRIGGER refuse_turns")

    def close_all(self) -> None:
        for backend in self.opened:
            backend.close()


@pytest.fixture(scope="session")
def pg_store_dsn() -> Iterator[str]:
    """One database for the PostgreSQL runs of the shared tests."""
    dsn = pg.fresh_database("store_tests")
    yield dsn
    pg.drop_database(dsn)


def _empty_pg_store(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT to_regclass('store_schema_version') IS NOT NULL").fetchone()
        if row is None or not row[0]:
            return  # the first backend opened will create the tables
        with conn.transaction():
            for table in _PG_TABLES:
                conn.execute(f"DELETE FROM {table}")
            conn.execute("UPDATE store_schema_version SET version = %s", (postgres.SCHEMA_VERSION,))


@pytest.fixture(params=["sqlite", "postgres"])
def store_place(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StorePlace]:
    if request.param == "postgres":
        dsn: str = request.getfixturevalue("pg_store_dsn")
        _empty_pg_store(dsn)
        place = StorePlace("postgres", dsn=dsn)
    else:
        place = StorePlace("sqlite", path=tmp_path / "store.db")
    try:
        yield place
    finally:
        place.close_all()


@pytest.fixture
def backend(store_place: StorePlace) -> StoreBackend:
    return store_place.open()
