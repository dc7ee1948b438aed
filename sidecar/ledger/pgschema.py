"""The PostgreSQL ledger's schema: its version, its migration as the owner, the writer's grants.

Two roles keep the fleet's audit out of any one pod's reach. The **owner** creates and
upgrades the tables (``actonce audit migrate``) and prunes (``actonce audit prune``). Every
sidecar runs as a **writer**, which ``actonce audit migrate --writer-role NAME`` grants only
what a sidecar and ``actonce audit resolve`` need (:data:`WRITER_GRANTS`): it appends events
but can neither UPDATE nor DELETE one, and never writes a checkpoint, so that it can neither
rewrite the audit nor make a forged checkpoint hide part of it.

A sidecar reads the schema's version first and runs no DDL when it is current, so a writer
starts on a migrated ledger. On one that is missing or older it creates what is missing, as
earlier releases did, when its role may; when it may not, it stops with one line that says to
run the migration.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from sidecar.ledger.base import GENESIS_HASH, LedgerError
from sidecar.ledger.schema import (
    ADDED_COLUMNS,
    RECORD_VERSION,
    SCHEMA_VERSION,
    checkpoints_table,
    run_rules_table,
    schema_table,
    tables,
)
from sidecar.ledger.sql import POSTGRES, present_columns
from sidecar.ops import pgbounds

SCHEMA = (
    tables("BIGINT")
    + checkpoints_table("BIGINT")
    + run_rules_table()
    + schema_table()
    + """
CREATE TABLE IF NOT EXISTS audit_head (
    id BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (id),
    seq BIGINT NOT NULL,
    hash TEXT NOT NULL
);
INSERT INTO audit_head (id, seq, hash) VALUES (TRUE, 0, '{genesis}') ON CONFLICT DO NOTHING;
"""
)

# What a sidecar's role needs, table by table, and nothing more. Appending takes the head
# FOR UPDATE (which needs UPDATE on it) and moves it; BeginAttempt upserts the fencing rows
# and binds the run's rule; decisions append like any event. No UPDATE or DELETE of events,
# and checkpoints only read: pruning is the owner's.
WRITER_GRANTS = (
    ("audit_events", "SELECT, INSERT"),
    ("audit_head", "SELECT, UPDATE"),
    ("audit_runs", "SELECT, INSERT, UPDATE"),
    ("audit_scopes", "SELECT, INSERT, UPDATE"),
    ("audit_run_rules", "SELECT, INSERT"),
    ("audit_checkpoints", "SELECT"),
    ("audit_schema", "SELECT"),
    # Each sidecar's heartbeat (sidecar.ledger.liveness): renewed, and removed at close.
    ("audit_sidecars", "SELECT, INSERT, UPDATE, DELETE"),
)

# Serializes schema changes: CREATE TABLE IF NOT EXISTS is not atomic in PostgreSQL.
_SCHEMA_LOCK = 7263001
_CONNECT_TIMEOUT_SECONDS = 5


@dataclass(frozen=True)
class SchemaState:
    """What a ledger's schema is, as one role sees it."""

    version: int | None  # None: no ledger here yet
    role: str
    owner: bool  # the role owns the tables (or is a superuser): it can rewrite the audit
    migrated_from: int | None = None  # the version before this call brought it up to date


def connect(dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(
        pgbounds.conninfo(dsn, connect_timeout=_CONNECT_TIMEOUT_SECONDS), autocommit=False
    )


def schema_version(conn: psycopg.Connection[Any]) -> int | None:
    """The version the ledger was brought up to: None when it has no events table, 1 for
    a ledger of the releases before versions were recorded."""
    found = conn.execute(
        "SELECT to_regclass('audit_events') IS NOT NULL, to_regclass('audit_schema') IS NOT NULL"
    ).fetchone()
    if found is None or not found[0]:
        return None
    if not found[1]:
        return 1
    row = conn.execute("SELECT MAX(version) FROM audit_schema").fetchone()
    return int(row[0]) if row and row[0] is not None else 1


def _state(conn: psycopg.Connection[Any], version: int | None) -> SchemaState:
    row = conn.execute(
        "SELECT current_user, COALESCE((SELECT pg_has_role(current_user, c.relowner, 'USAGE') "
        "FROM pg_class c WHERE c.oid = to_regclass('audit_events')), FALSE) "
        "OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)"
    ).fetchone()
    assert row is not None
    return SchemaState(version, str(row[0]), bool(row[1]))


def _create(conn: psycopg.Connection[Any]) -> None:
    """Create what is missing and record the version, under the schema's lock; the caller
    commits."""
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
    conn.execute(SCHEMA.replace("{genesis}", GENESIS_HASH))
    # A ledger written before a column came gains it in place, under the same lock;
    # earlier sidecars name their columns, so the defaults fill them.
    present = present_columns(conn, POSTGRES)
    for name, statement, _ in ADDED_COLUMNS:
        if name not in present:
            conn.execute(statement)
    conn.execute(RECORD_VERSION.replace("?", "%s"), (SCHEMA_VERSION,))


def ensure_schema(dsn: str) -> SchemaState:
    """Bring the ledger at ``dsn`` up to SCHEMA_VERSION if it is not (nothing runs when it
    is); LedgerError, in one line, when that is needed and this role may not."""
    try:
        with connect(dsn) as conn:
            version = schema_version(conn)
            if version is not None and version >= SCHEMA_VERSION:
                return _state(conn, version)
            try:
                _create(conn)
            except psycopg.errors.InsufficientPrivilege as exc:
                conn.rollback()
                state = _state(conn, version)
                found = "missing" if version is None else f"at version {version}"
                raise LedgerError(
                    f"the ledger's schema is {found}, this sidecar needs version "
                    f"{SCHEMA_VERSION}, and role {state.role} may not create it "
                    f"({one_line(exc)}): run `actonce audit migrate` as the ledger's owner"
                ) from None
            conn.commit()
            return _state(conn, SCHEMA_VERSION)
    except psycopg.Error as exc:
        raise LedgerError(f"cannot open the PostgreSQL ledger: {one_line(exc)}") from exc


def migrate(dsn: str, *, writer_role: str | None = None) -> SchemaState:
    """``actonce audit migrate``: create or upgrade the schema as the owner, and grant
    ``writer_role`` exactly :data:`WRITER_GRANTS` (whatever it held before)."""
    try:
        with connect(dsn) as conn:
            before = schema_version(conn)
            _create(conn)
            if writer_role:
                _grant_writer(conn, writer_role)
            conn.commit()
            state = _state(conn, SCHEMA_VERSION)
            return SchemaState(state.version, state.role, state.owner, migrated_from=before)
    except psycopg.Error as exc:
        raise LedgerError(f"the migration failed: {one_line(exc)}") from exc


def _grant_writer(conn: psycopg.Connection[Any], role: str) -> None:
    name = sql.Identifier(role)
    schema = conn.execute("SELECT current_schema()").fetchone()
    assert schema is not None
    conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema[0]), name))
    for table, privileges in WRITER_GRANTS:
        target = sql.Identifier(table)
        conn.execute(sql.SQL("REVOKE ALL ON {} FROM {}").format(target, name))
        conn.execute(sql.SQL(f"GRANT {privileges} ON {{}} TO {{}}").format(target, name))


def one_line(exc: BaseException) -> str:
    """An error's message on one line: libpq's run over several (a hint, the server's
    address tried), and start-up errors are one line."""
    return " ".join(str(exc).split())
