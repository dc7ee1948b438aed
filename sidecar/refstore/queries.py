"""The reference store's SQL statements, each written once, in either database's words.

A statement names its tables `{artifacts}` and its parameters `?`; a `Dialect` turns them into
one database's table names and placeholder, and fills in the row locks that database needs.
The rules that run these statements are in `backend`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["Connection", "Cursor", "Dialect", "Queries"]

_TABLES = ("artifacts", "proposals", "threads", "messages", "turn_requests")


class Cursor(Protocol):
    """What the rules read from a statement (sqlite3's and psycopg's cursors both have it)."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> Any: ...


class Connection(Protocol):
    """What the rules need of a connection inside its transaction."""

    def execute(self, query: str, params: Sequence[Any], /) -> Cursor: ...


@dataclass(frozen=True, slots=True)
class Dialect:
    """The words of SQL that differ between the store's databases."""

    table_prefix: str  # so that the store's tables can share a database with the ledger
    placeholder: str  # "?" or "%s"
    update_lock: str  # appended to a SELECT that reads a row to change it
    share_lock: str  # appended to a SELECT that reads a row that must not change meanwhile


class Queries:
    """The store's statements, each written once, in one dialect's words."""

    def __init__(self, dialect: Dialect) -> None:
        def sql(text: str) -> str:
            # Tables are written {artifacts}, parameters ?: no statement holds a literal "?".
            named = text.format(
                **{t: dialect.table_prefix + t for t in _TABLES},
                update_lock=dialect.update_lock,
                share_lock=dialect.share_lock,
            )
            return named.replace("?", dialect.placeholder)

        columns = "id, kind, version, data_json, archived, owner"
        self.insert_artifact = sql(
            "INSERT INTO {artifacts} (id, kind, version, data_json, owner) VALUES (?, ?, 1, ?, ?)"
            " ON CONFLICT (id) DO NOTHING"
        )
        self.artifact = sql(f"SELECT {columns} FROM {{artifacts}} WHERE id = ?")
        self.artifact_for_update = sql(
            f"SELECT {columns} FROM {{artifacts}} WHERE id = ?{{update_lock}}"
        )
        self.patch_artifact = sql("UPDATE {artifacts} SET data_json = ?, version = ? WHERE id = ?")
        self.archive_artifact = sql("UPDATE {artifacts} SET archived = TRUE WHERE id = ?")
        # One row beyond the page says whether there is a next page.
        self.artifact_page = sql(
            f"SELECT {columns} FROM {{artifacts}} WHERE kind = ? AND id > ? ORDER BY id LIMIT ?"
        )
        # The same, of what a principal may reach: its rule's, its grant's, and the unowned.
        self.reachable_artifact_page = sql(
            f"SELECT {columns} FROM {{artifacts}} WHERE kind = ? AND id > ?"
            " AND (owner IS NULL OR owner = ? OR owner = ?) ORDER BY id LIMIT ?"
        )
        self.proposal_used = sql("SELECT 1 FROM {proposals} WHERE id = ?")
        self.proposal_target = sql(
            "SELECT archived, owner FROM {artifacts} WHERE id = ?{share_lock}"
        )
        self.insert_proposal = sql(
            "INSERT INTO {proposals}"
            " (id, kind, data_json, artifact_id, patch_json, base_version, owner)"
            " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING"
        )
        self.proposal = sql(
            "SELECT id, kind, data_json, artifact_id, patch_json, base_version, owner"
            " FROM {proposals} WHERE id = ?"
        )
        self.insert_thread = sql(
            "INSERT INTO {threads} (id, title, owner) VALUES (?, ?, ?) ON CONFLICT (id) DO NOTHING"
        )
        # A thread's row is its owner: NULL for one made before owners were recorded.
        self.thread = sql("SELECT owner FROM {threads} WHERE id = ?")
        self.thread_for_update = sql("SELECT owner FROM {threads} WHERE id = ?{update_lock}")
        self.artifact_owner = sql("SELECT owner, kind FROM {artifacts} WHERE id = ?")
        self.message_used = sql("SELECT 1 FROM {messages} WHERE id = ?")
        self.next_seq = sql("SELECT COALESCE(MAX(seq), 0) + 1 FROM {messages} WHERE thread_id = ?")
        self.insert_message = sql(
            "INSERT INTO {messages} (id, thread_id, seq, kind, text) VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT (id) DO NOTHING"
        )
        self.messages = sql(
            "SELECT id, thread_id, kind, text, seq FROM {messages} WHERE thread_id = ? ORDER BY seq"
        )
        self.message_turn = sql("SELECT thread_id, kind FROM {messages} WHERE id = ?")
        self.insert_turn_request = sql(
            "INSERT INTO {turn_requests} (message_id, thread_id) VALUES (?, ?)"
            " ON CONFLICT (message_id) DO NOTHING"
        )
        # An owner is set once, on data made before owners were recorded: never changed.
        self.assign_owner = {
            table: sql(f"UPDATE {{{table}}} SET owner = ? WHERE id = ? AND owner IS NULL")
            for table in ("artifacts", "threads", "proposals")
        }
        self.turn_requests = sql(
            "SELECT message_id FROM {turn_requests} WHERE thread_id = ? ORDER BY n"
        )


_TABLES = ("artifacts", "proposals", "threads", "messages", "turn_requests")
