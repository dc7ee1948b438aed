"""The reference store's own enforcement of owners, on SQLite and on PostgreSQL.

A create records its principal's rule; every other call whose principal may not reach the
owner is refused FORBIDDEN in the call's own transaction and changes nothing; a principal
whose caller's grants name the owner reaches it; data made without a principal, and data made
before owners were recorded (a schema 1 database, upgraded), has no owner and stays reachable
until ``assign_owner`` gives it one, once.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import psycopg
import pytest

from sidecar.refstore.backend import NewMessage, StoreBackend
from sidecar.refstore.postgres import PostgresStoreBackend
from sidecar.refstore.sqlite import SqliteStoreBackend
from sidecar.store_contract import Owner, Principal, RefusalCode, StoreRefusal
from tests.helpers import postgres as pg

PAYMENTS = Principal("payments")
CHAT = Principal("chat")
CHAT_GRANTED_PAYMENTS = Principal("chat", granted_owner="payments")
CHAT_GRANTED_KB = Principal("chat", granted_owner="kb")
PAID = json.dumps([{"op": "replace", "path": "/status", "value": "paid"}])


def _forbidden(call: object) -> StoreRefusal:
    assert callable(call)
    with pytest.raises(StoreRefusal) as caught:
        call()
    assert caught.value.code == RefusalCode.FORBIDDEN, caught.value
    return caught.value


def _invoice_and_thread(backend: StoreBackend) -> None:
    backend.create_artifact("inv-1", "invoice", '{"status": "open"}', principal=PAYMENTS)
    backend.create_thread("thr-1", "invoice 1", principal=PAYMENTS)
    backend.post_message(NewMessage("msg-1", "thr-1", "message", "card 4242"), principal=PAYMENTS)


def test_a_create_records_its_principals_rule(backend: StoreBackend) -> None:
    _invoice_and_thread(backend)
    assert backend.get_artifact("inv-1", principal=PAYMENTS).owner == "payments"
    assert backend.get_owner(artifact_id="inv-1") == Owner("payments", "invoice")
    assert backend.get_owner(thread_id="thr-1") == Owner("payments")
    proposal = backend.create_proposal("prp-1", kind="invoice", data_json="{}", principal=PAYMENTS)
    assert proposal.owner == backend.get_proposal("prp-1").owner == "payments"
    with pytest.raises(StoreRefusal) as missing:
        backend.get_owner(thread_id="thr-none")
    assert missing.value.code == RefusalCode.NOT_FOUND


def test_another_rule_is_refused_on_every_call_and_changes_nothing(backend: StoreBackend) -> None:
    _invoice_and_thread(backend)
    refused = _forbidden(lambda: backend.get_artifact("inv-1", principal=CHAT))
    assert "payments" in refused.message and "chat" in refused.message
    _forbidden(lambda: backend.patch_artifact("inv-1", 1, PAID, principal=CHAT))
    _forbidden(lambda: backend.archive_artifact("inv-1", principal=CHAT))
    _forbidden(
        lambda: backend.create_proposal(
            "prp-x", artifact_id="inv-1", patch_json=PAID, base_version=1, principal=CHAT
        )
    )
    _forbidden(lambda: backend.list_messages("thr-1", principal=CHAT))
    _forbidden(
        lambda: backend.post_message(
            NewMessage("msg-x", "thr-1", "notice", "SYSTEM"), principal=CHAT
        )
    )
    _forbidden(lambda: backend.request_turn("msg-1", principal=CHAT))
    _forbidden(lambda: backend.list_turn_requests("thr-1", principal=CHAT))
    # A grant of another owner opens nothing of this one.
    _forbidden(lambda: backend.get_artifact("inv-1", principal=CHAT_GRANTED_KB))
    # A used message id tells a principal that may not reach the thread nothing either.
    _forbidden(
        lambda: backend.post_message(NewMessage("msg-1", "thr-1", "message", "x"), principal=CHAT)
    )

    held = backend.get_artifact("inv-1")
    assert (json.loads(held.data_json), held.version, held.archived) == (
        {"status": "open"},
        1,
        False,
    )
    assert [m.text for m in backend.list_messages("thr-1")] == ["card 4242"]
    with pytest.raises(StoreRefusal) as none:
        backend.get_proposal("prp-x")
    assert none.value.code == RefusalCode.NOT_FOUND


def test_a_principal_reaches_the_owner_its_grant_names(backend: StoreBackend) -> None:
    _invoice_and_thread(backend)
    assert backend.get_artifact("inv-1", principal=CHAT_GRANTED_PAYMENTS).id == "inv-1"
    posted = backend.post_message(
        NewMessage("msg-2", "thr-1", "notice", "granted"), principal=CHAT_GRANTED_PAYMENTS
    )
    assert posted.seq == 2
    patched = backend.patch_artifact("inv-1", 1, PAID, principal=CHAT_GRANTED_PAYMENTS)
    assert (patched.version, patched.owner) == (2, "payments")  # the owner stays the maker


def test_a_listing_with_a_principal_holds_what_it_may_reach(backend: StoreBackend) -> None:
    backend.create_artifact("a-1", "doc", "{}", principal=PAYMENTS)
    backend.create_artifact("a-2", "doc", "{}", principal=Principal("kb"))
    backend.create_artifact("a-3", "doc", "{}", principal=CHAT)
    backend.create_artifact("a-4", "doc", "{}")  # made without a principal: no owner

    def listed(principal: Principal | None) -> list[str]:
        return [a.id for a in backend.list_artifacts("doc", principal=principal).artifacts]

    assert listed(None) == ["a-1", "a-2", "a-3", "a-4"]
    assert listed(CHAT) == ["a-3", "a-4"]
    assert listed(CHAT_GRANTED_KB) == ["a-2", "a-3", "a-4"]


def test_unowned_data_stays_reachable_until_its_owner_is_assigned_once(
    backend: StoreBackend,
) -> None:
    backend.create_artifact("old-1", "invoice", '{"status": "open"}')
    backend.create_thread("old-thr", "before owners")
    assert backend.get_owner(artifact_id="old-1") == Owner("", "invoice")
    assert backend.get_artifact("old-1", principal=CHAT).owner == ""
    backend.post_message(NewMessage("old-msg", "old-thr", "notice", "anyone"), principal=CHAT)

    assert backend.assign_owner("artifacts", "old-1", "payments")
    assert backend.assign_owner("threads", "old-thr", "payments")
    assert not backend.assign_owner("artifacts", "old-1", "chat")  # never changed once set
    assert not backend.assign_owner("threads", "no-such", "chat")
    assert backend.get_owner(artifact_id="old-1").owner == "payments"
    _forbidden(lambda: backend.get_artifact("old-1", principal=CHAT))
    _forbidden(lambda: backend.list_messages("old-thr", principal=CHAT))
    with pytest.raises(ValueError, match="owners are assigned to"):
        backend.assign_owner("messages", "old-msg", "chat")


# -- a database made before owners were recorded --------------------------------------------

_V1_SQLITE = (
    "CREATE TABLE artifacts (id TEXT PRIMARY KEY, kind TEXT NOT NULL, version INTEGER NOT NULL,"
    " data_json TEXT NOT NULL, archived INTEGER NOT NULL DEFAULT 0)",
    "CREATE INDEX artifacts_by_kind ON artifacts (kind, id)",
    "CREATE TABLE proposals (id TEXT PRIMARY KEY, kind TEXT NOT NULL, data_json TEXT NOT NULL,"
    " artifact_id TEXT NOT NULL, patch_json TEXT NOT NULL, base_version INTEGER NOT NULL)",
    "CREATE TABLE threads (id TEXT PRIMARY KEY, title TEXT NOT NULL)",
    "CREATE TABLE messages (id TEXT PRIMARY KEY, thread_id TEXT NOT NULL REFERENCES threads (id),"
    " seq INTEGER NOT NULL, kind TEXT NOT NULL, text TEXT NOT NULL, UNIQUE (thread_id, seq))",
    "CREATE TABLE turn_requests (n INTEGER PRIMARY KEY AUTOINCREMENT, message_id TEXT NOT NULL"
    " UNIQUE REFERENCES messages (id), thread_id TEXT NOT NULL REFERENCES threads (id))",
    "INSERT INTO artifacts (id, kind, version, data_json) VALUES ('old-1', 'invoice', 1, '{}')",
    "INSERT INTO threads (id, title) VALUES ('old-thr', 'before owners')",
    "PRAGMA user_version = 1",
)


def _for_postgres(statement: str) -> str:
    return (
        statement.replace("CREATE TABLE ", "CREATE TABLE store_")
        .replace("REFERENCES ", "REFERENCES store_")
        .replace("INSERT INTO ", "INSERT INTO store_")
        .replace(
            "INTEGER PRIMARY KEY AUTOINCREMENT", "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"
        )
        .replace("ON artifacts", "ON store_artifacts")
    )


_V1_POSTGRES = (
    *(_for_postgres(s) for s in _V1_SQLITE if not s.startswith("PRAGMA")),
    "CREATE TABLE store_schema_version (version INTEGER NOT NULL)",
    "INSERT INTO store_schema_version (version) VALUES (1)",
)


@pytest.mark.parametrize("database", ["sqlite", "postgres"])
def test_a_schema_1_store_is_upgraded_its_data_unowned_and_reachable(
    database: str, tmp_path: Path
) -> None:
    dsn = None
    if database == "postgres":
        dsn = pg.fresh_database("store_v1")
        with psycopg.connect(dsn, autocommit=True) as conn:
            for statement in _V1_POSTGRES:
                conn.execute(statement)
    else:
        with sqlite3.connect(str(tmp_path / "store.db")) as db:
            for statement in _V1_SQLITE:
                db.execute(statement)
    backend: StoreBackend | None = None
    try:
        backend = (
            PostgresStoreBackend(dsn)
            if dsn is not None
            else SqliteStoreBackend(tmp_path / "store.db")
        )
        assert backend.get_artifact("old-1", principal=CHAT).owner == ""
        backend.post_message(
            NewMessage("m-1", "old-thr", "notice", "still reachable"), principal=CHAT
        )
        backend.create_artifact("new-1", "invoice", "{}", principal=PAYMENTS)
        assert backend.get_owner(artifact_id="new-1").owner == "payments"
        assert backend.assign_owner("artifacts", "old-1", "payments")
        upgraded = backend
        _forbidden(lambda: upgraded.get_artifact("old-1", principal=CHAT))
    finally:
        if backend is not None:
            backend.close()
        if dsn is not None:
            pg.drop_database(dsn)
