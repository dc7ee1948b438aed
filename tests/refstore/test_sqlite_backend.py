"""What only the SQLite backend has: its journal, its sync level, its file.

Every rule a caller can observe is in test_backend_rules.py, run on SQLite and PostgreSQL.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from sidecar.refstore.sqlite import SqliteStoreBackend


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


@pytest.fixture
def backend(db_path: Path) -> Iterator[SqliteStoreBackend]:
    store = SqliteStoreBackend(db_path)
    yield store
    store.close()


def test_journal_is_wal_and_sync_is_full(backend: SqliteStoreBackend, db_path: Path) -> None:
    # synchronous is a per-connection setting, so it is read on the backend's own connection.
    assert backend._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert backend._db.execute("PRAGMA synchronous").fetchone()[0] == 2
    # WAL is recorded in the file itself: any other connection sees it too.
    with sqlite3.connect(db_path) as other:
        assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_the_database_folder_is_created_if_missing(tmp_path: Path) -> None:
    path = tmp_path / "not" / "yet" / "store.db"
    store = SqliteStoreBackend(path)
    store.create_thread("t1", "Hi")
    store.close()
    assert path.is_file()
