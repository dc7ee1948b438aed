"""The store's rows, read straight from its database: a SQLite file or PostgreSQL tables.

The checker trusts nothing the sidecar answered about the store; it, and the tests that look
at what a write left, read the store's tables here.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg


@dataclass
class StoreSnapshot:
    """The store's rows, read directly from its database."""

    # id -> (kind, version, data_json, archived)
    artifacts: dict[str, tuple[str, int, str, bool]] = field(default_factory=dict)
    # id -> (kind, data_json, artifact_id, patch_json, base_version)
    proposals: dict[str, tuple[str, str, str, str, int]] = field(default_factory=dict)
    threads: dict[str, str] = field(default_factory=dict)
    # id -> (thread_id, kind, text)
    messages: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    turn_requests: list[str] = field(default_factory=list)


_QUERIES = (
    ("artifacts", "SELECT id, kind, version, data_json, archived FROM {p}artifacts"),
    (
        "proposals",
        "SELECT id, kind, data_json, artifact_id, patch_json, base_version FROM {p}proposals",
    ),
    ("threads", "SELECT id, title FROM {p}threads"),
    ("messages", "SELECT id, thread_id, kind, text FROM {p}messages"),
    ("turn_requests", "SELECT message_id FROM {p}turn_requests"),
)


def _snapshot(rows: dict[str, list[tuple[Any, ...]]]) -> StoreSnapshot:
    snap = StoreSnapshot()
    for r in rows["artifacts"]:
        snap.artifacts[str(r[0])] = (str(r[1]), int(r[2]), str(r[3]), bool(r[4]))
    for r in rows["proposals"]:
        snap.proposals[str(r[0])] = (str(r[1]), str(r[2]), str(r[3]), str(r[4]), int(r[5]))
    snap.threads = {str(r[0]): str(r[1]) for r in rows["threads"]}
    snap.messages = {str(r[0]): (str(r[1]), str(r[2]), str(r[3])) for r in rows["messages"]}
    snap.turn_requests = [str(r[0]) for r in rows["turn_requests"]]
    return snap


def read_sqlite_store(path: Path) -> StoreSnapshot:
    """The reference store's SQLite file, opened read-only."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return _snapshot(
            {name: conn.execute(sql.format(p="")).fetchall() for name, sql in _QUERIES}
        )
    finally:
        conn.close()


def read_postgres_store(dsn: str) -> StoreSnapshot:
    """The reference store's PostgreSQL tables (prefixed ``store_``)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return _snapshot(
            {name: list(conn.execute(sql.format(p="store_")).fetchall()) for name, sql in _QUERIES}
        )
