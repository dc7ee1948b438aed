"""The PostgreSQL ledger's schema: its version, its migration as the owner, the roles' grants.

Three roles keep the fleet's audit out of any one pod's reach. The **owner** creates and
upgrades the tables (``actonce audit migrate``) and prunes (``actonce audit prune``). Every
sidecar runs as a **writer**, which ``actonce audit migrate --writer-role NAME`` grants only
what a sidecar needs (:data:`WRITER_GRANTS`): it appends events but can neither UPDATE nor
DELETE one, and never writes a checkpoint, so that it can neither rewrite the audit nor make
a forged checkpoint hide part of it. It fences and binds runs only through functions that
check the run's rule (:data:`GUARDS`): no run moves to another rule. People decide as an
**operator** (``--operator-role NAME``, :data:`OPERATOR_GRANTS`): a trigger refuses a
decision event from any role that is not a member of an operator role (or the owner), and
stamps every event with the role that inserted it (``author``), which ``audit verify``
checks for each decision. A pod's writer DSN can then neither decide nor fence or bind a
run of another rule than the one the run already has.

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

from sidecar.ledger.base import LedgerError, Phase
from sidecar.ledger.schema import (
    DROP_OLD_HEAD,
    INSERT_CHAIN,
    MAX_CHAINS,
    OLD_HEAD,
    POSTGRES,
    POSTGRES_CHAINS,
    RECORD_VERSION,
    add_columns,
    chain_rows,
    chains_table,
    checkpoints_table,
    run_rules_table,
    schema_table,
    tables,
)
from sidecar.ledger.sql import phase
from sidecar.ops import pgbounds

# The PostgreSQL ledger's version: the shared schema's (sidecar.ledger.schema), then 3: every
# event's author, the operator roles, the decision trigger and the fencing functions; 4:
# chains (sidecar.ledger.sql.chain_of), numbered from one sequence, which replace ``audit_head``.
# A SQLite ledger has no roles and stays at the shared version.
SCHEMA_VERSION = 4

SCHEMA = (
    tables("BIGINT")
    + checkpoints_table("BIGINT")
    + run_rules_table()
    + schema_table()
    + chains_table("BIGINT")
    # One number per event across the chains; CACHE 1 (the default), so that numbers
    # increase along each chain whichever session takes them.
    + "CREATE SEQUENCE IF NOT EXISTS audit_events_seq AS BIGINT CACHE 1;\n"
)

# What both roles below share: append an event (its chain's head moves with it), read the
# rest.
_APPEND_AND_READ = (
    ("audit_events", "SELECT, INSERT"),
    ("audit_chains", "SELECT, UPDATE"),
    ("audit_events_seq", "USAGE"),
    ("audit_runs", "SELECT"),
    ("audit_scopes", "SELECT"),
    ("audit_run_rules", "SELECT"),
    ("audit_checkpoints", "SELECT"),
    ("audit_schema", "SELECT"),
)

# What a sidecar's role needs, table by table, and nothing more. Appending takes the head
# FOR UPDATE (which needs UPDATE on it) and moves it. The fencing rows and the runs' rules
# are written only through GUARDS. No UPDATE or DELETE of events, no decision (the trigger
# refuses it), and checkpoints only read: pruning is the owner's.
WRITER_GRANTS = (
    *_APPEND_AND_READ,
    # Each sidecar's heartbeat (sidecar.ledger.liveness): renewed, and removed at close.
    ("audit_sidecars", "SELECT, INSERT, UPDATE, DELETE"),
)

# What `audit pending`, `audit resolve` and the console need: read everything, and append a
# decision (the head moves with it). Nothing that fences, binds or beats.
OPERATOR_GRANTS = (
    *_APPEND_AND_READ,
    ("audit_sidecars", "SELECT"),
)

# The functions a writer fences and binds through, by signature (sidecar.ledger.sql).
GUARDS = (
    "audit_bind_run(TEXT, TEXT)",
    "audit_fence_run(TEXT, TEXT, TEXT)",
    "audit_fence_scope(TEXT, TEXT, TEXT, TEXT)",
)

# The roles an operator's decision is recorded under, and what checks and stamps it. Each
# function that runs as the owner (SECURITY DEFINER) has its search_path pinned to the
# ledger's schema, so that no role can put a table of its own in front of the ledger's.
# The trigger's function runs as the role that inserts: current_user is who appends.
_ROLES_DDL = f"""
ALTER TABLE audit_events ADD COLUMN IF NOT EXISTS author TEXT;
CREATE TABLE IF NOT EXISTS audit_operator_roles (
    role TEXT PRIMARY KEY
);
CREATE OR REPLACE FUNCTION audit_is_operator(who TEXT) RETURNS BOOLEAN
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = {{schema}}, pg_temp AS $$
    SELECT EXISTS (
        SELECT 1 FROM pg_roles w WHERE w.rolname = who AND (
            pg_has_role(w.oid, (SELECT relowner FROM pg_class
                                 WHERE oid = 'audit_events'::regclass), 'MEMBER')
            OR EXISTS (SELECT 1 FROM audit_operator_roles o JOIN pg_roles r ON r.rolname = o.role
                        WHERE pg_has_role(w.oid, r.oid, 'MEMBER'))))
$$;
CREATE OR REPLACE FUNCTION audit_events_authored() RETURNS trigger
LANGUAGE plpgsql SET search_path = {{schema}}, pg_temp AS $$
BEGIN
    NEW.author := current_user;
    IF NEW.phase = {phase(Phase.DECISION)} AND NOT audit_is_operator(current_user::TEXT) THEN
        RAISE EXCEPTION 'role % may not record a decision: only an operator role may '
            '(actonce audit migrate --operator-role NAME)', current_user
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END $$;
DROP TRIGGER IF EXISTS audit_events_authored ON audit_events;
CREATE TRIGGER audit_events_authored BEFORE INSERT ON audit_events
    FOR EACH ROW EXECUTE FUNCTION audit_events_authored();
CREATE OR REPLACE FUNCTION audit_bind_run(run TEXT, claimed TEXT) RETURNS VOID
LANGUAGE plpgsql SECURITY DEFINER SET search_path = {{schema}}, pg_temp AS $$
DECLARE
    bound TEXT;
BEGIN
    -- The run's rule as bound, or, for a run begun before runs were bound, as its first
    -- begin says (sidecar.ledger.sql: Queries.run_rules).
    bound := COALESCE(
        (SELECT rule FROM audit_run_rules WHERE run_id = run),
        (SELECT rule FROM audit_events WHERE run_id = run
            AND phase = {phase(Phase.ATTEMPT_BEGIN)} ORDER BY seq LIMIT 1));
    IF bound IS NULL THEN
        INSERT INTO audit_run_rules (run_id, rule) VALUES (run, claimed) ON CONFLICT DO NOTHING;
        bound := (SELECT rule FROM audit_run_rules WHERE run_id = run);
    END IF;
    IF bound <> claimed THEN
        RAISE EXCEPTION 'run % belongs to rule %, not %', run, bound, claimed
            USING ERRCODE = 'insufficient_privilege';
    END IF;
END $$;
CREATE OR REPLACE FUNCTION audit_fence_run(run TEXT, attempt TEXT, claimed TEXT) RETURNS VOID
LANGUAGE plpgsql SECURITY DEFINER SET search_path = {{schema}}, pg_temp AS $$
BEGIN
    PERFORM audit_bind_run(run, claimed);
    INSERT INTO audit_runs (run_id, attempt_id) VALUES (run, attempt)
        ON CONFLICT (run_id) DO UPDATE SET attempt_id = excluded.attempt_id;
END $$;
CREATE OR REPLACE FUNCTION audit_fence_scope(run TEXT, scoped TEXT, attempt TEXT, claimed TEXT)
RETURNS VOID
LANGUAGE plpgsql SECURITY DEFINER SET search_path = {{schema}}, pg_temp AS $$
BEGIN
    PERFORM audit_bind_run(run, claimed);
    INSERT INTO audit_scopes (run_id, scope, attempt_id) VALUES (run, scoped, attempt)
        ON CONFLICT (run_id, scope) DO UPDATE SET attempt_id = excluded.attempt_id;
END $$;
"""

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
    chains: int = 1  # the chains the ledger is partitioned into (sidecar.ledger.sql.chain_of)


def connect(dsn: str) -> psycopg.Connection[Any]:
    return pgbounds.connect(dsn, connect_timeout=_CONNECT_TIMEOUT_SECONDS, autocommit=False)


def schema_version(conn: psycopg.Connection[Any]) -> int | None:
    """The version the ledger was brought up to: None when it has no events table, 1 for
    a ledger of the releases before versions were recorded."""
    # Read from pg_class, as of this statement, the tables the search path finds (as
    # to_regclass would): to_regclass answers from the session's cache, which still says "no
    # such table" for one another session has made since this transaction looked (the
    # version is read again once the schema's lock is held).
    found = conn.execute(
        "SELECT bool_or(relname = 'audit_events'), bool_or(relname = 'audit_schema') "
        "FROM pg_class WHERE relname IN ('audit_events', 'audit_schema') "
        "AND pg_table_is_visible(oid)"
    ).fetchone()
    if found is None or not found[0]:
        return None
    if not found[1]:
        return 1
    row = conn.execute("SELECT MAX(version) FROM audit_schema").fetchone()
    return int(row[0]) if row and row[0] is not None else 1


def _state(conn: psycopg.Connection[Any], version: int | None) -> SchemaState:
    chains = 1
    if version is not None and version >= SCHEMA_VERSION:
        counted = conn.execute("SELECT COUNT(*) FROM audit_chains").fetchone()
        chains = int(counted[0]) if counted else 1
    row = conn.execute(
        "SELECT current_user, COALESCE((SELECT pg_has_role(current_user, c.relowner, 'USAGE') "
        "FROM pg_class c WHERE c.oid = to_regclass('audit_events')), FALSE) "
        "OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)"
    ).fetchone()
    assert row is not None
    return SchemaState(version, str(row[0]), bool(row[1]), chains=chains)


def _lock_schema(conn: psycopg.Connection[Any]) -> None:
    """Hold the schema's lock until the transaction ends: one process at a time creates or
    upgrades the ledger."""
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))


def _create(conn: psycopg.Connection[Any], chains: int = POSTGRES_CHAINS) -> None:
    """Create what is missing and record the version, under the schema's lock; the caller
    commits. A ledger without chains gets ``chains`` of them."""
    _lock_schema(conn)
    conn.execute(SCHEMA)
    add_columns(conn, POSTGRES, "BIGINT")
    _make_chains(conn, chains)
    schema = _schema_name(conn)
    conn.execute(_ROLES_DDL.replace("{schema}", sql.Identifier(schema).as_string(conn)))
    # A writer runs the guards and the trigger's check, never what they guard; nobody else
    # runs the guards at all.
    for guard in GUARDS:
        conn.execute(f"REVOKE ALL ON FUNCTION {guard} FROM PUBLIC")
    conn.execute(RECORD_VERSION.replace("?", "%s"), (SCHEMA_VERSION,))


def _make_chains(conn: psycopg.Connection[Any], chains: int) -> None:
    """Give a ledger without chains its ``chains``: a ledger from before them keeps its
    events as chain 0's history, hashes unchanged, and numbers from its old head on."""
    found = conn.execute("SELECT COUNT(*) FROM audit_chains").fetchone()
    if found is not None and found[0]:
        return
    if not 1 <= chains <= MAX_CHAINS:
        raise LedgerError(f"a ledger has 1 to {MAX_CHAINS} chains, not {chains}")
    old = conn.execute("SELECT to_regclass('audit_head') IS NOT NULL").fetchone()
    head = conn.execute(OLD_HEAD).fetchone() if old is not None and old[0] else None
    rows = chain_rows(chains, (int(head[0]), str(head[1])) if head else None)
    with conn.cursor() as cur:
        cur.executemany(INSERT_CHAIN.replace("?", "%s"), rows)
    newest = conn.execute("SELECT MAX(seq) FROM audit_events").fetchone()
    start = max(rows[0][1], int(newest[0]) if newest and newest[0] is not None else 0)
    conn.execute("SELECT setval('audit_events_seq', %s, %s)", (max(start, 1), start > 0))
    if head is not None:
        conn.execute(DROP_OLD_HEAD)


def ensure_schema(dsn: str) -> SchemaState:
    """Bring the ledger at ``dsn`` up to SCHEMA_VERSION if it is not (nothing runs when it
    is); LedgerError, in one line, when that is needed and this role may not."""
    try:
        with connect(dsn) as conn:
            version = schema_version(conn)
            if version is not None and version >= SCHEMA_VERSION:
                return _state(conn, version)
            # Sidecars that start together all find the ledger behind. The first to hold the
            # lock brings it up; the others find it current once they hold it, and change
            # nothing: their DDL on the events table would wait on (and deadlock with) the
            # first one's appends.
            _lock_schema(conn)
            version = schema_version(conn)
            if version is not None and version >= SCHEMA_VERSION:
                conn.commit()
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


def migrate(
    dsn: str,
    *,
    writer_role: str | None = None,
    operator_role: str | None = None,
    chains: int = POSTGRES_CHAINS,
) -> SchemaState:
    """``actonce audit migrate``: create or upgrade the schema as the owner (a ledger
    without chains gets ``chains``; one that has them keeps its count), grant
    ``writer_role`` exactly :data:`WRITER_GRANTS` and :data:`GUARDS`, and ``operator_role``
    exactly :data:`OPERATOR_GRANTS` and the right to decide (whatever each held before).

    LedgerError when the writer role is, or is a member of, an operator role: its pods
    would decide."""
    try:
        with connect(dsn) as conn:
            before = schema_version(conn)
            _create(conn, chains)
            if operator_role:
                _grant(conn, operator_role, OPERATOR_GRANTS)
                conn.execute(
                    "INSERT INTO audit_operator_roles (role) VALUES (%s) ON CONFLICT DO NOTHING",
                    (operator_role,),
                )
            if writer_role:
                _grant(conn, writer_role, WRITER_GRANTS)
                for guard in GUARDS:
                    conn.execute(
                        sql.SQL(f"GRANT EXECUTE ON FUNCTION {guard} TO {{}}").format(
                            sql.Identifier(writer_role)
                        )
                    )
                _refuse_deciding_writer(conn, writer_role)
            conn.commit()
            state = _state(conn, SCHEMA_VERSION)
            return SchemaState(
                state.version, state.role, state.owner, migrated_from=before, chains=state.chains
            )
    except psycopg.Error as exc:
        raise LedgerError(f"the migration failed: {one_line(exc)}") from exc


def _schema_name(conn: psycopg.Connection[Any]) -> str:
    found = conn.execute("SELECT current_schema()").fetchone()
    assert found is not None
    return str(found[0])


def _refuse_deciding_writer(conn: psycopg.Connection[Any], role: str) -> None:
    """LedgerError when ``role``, a writer, may record decisions: it is an operator."""
    found = conn.execute("SELECT audit_is_operator(%s)", (role,)).fetchone()
    if found is not None and found[0]:
        raise LedgerError(
            f"role {role} is a member of an operator role or of the ledger's owner: a writer "
            "must not be able to decide; give the sidecars a role of their own"
        )


def _grant(conn: psycopg.Connection[Any], role: str, grants: tuple[tuple[str, str], ...]) -> None:
    name = sql.Identifier(role)
    schema = sql.Identifier(_schema_name(conn))
    conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(schema, name))
    for table, privileges in grants:
        target = sql.Identifier(table)
        kind = "SEQUENCE " if table.endswith("_seq") else ""
        conn.execute(sql.SQL(f"REVOKE ALL ON {kind}{{}} FROM {{}}").format(target, name))
        conn.execute(sql.SQL(f"GRANT {privileges} ON {kind}{{}} TO {{}}").format(target, name))


@dataclass(frozen=True)
class Authorship:
    """Who recorded a ledger's decisions, as ``audit verify`` reports it."""

    checked: int  # decisions whose author was recorded, and is an operator
    unrecorded: int  # decisions appended before authors were recorded (version 3)
    not_operators: list[tuple[int, str]]  # (seq, author) of decisions no operator made


def decision_authors(dsn: str) -> Authorship | None:
    """Each decision's recorded author checked against the operator roles; None for a
    ledger that records no authors (not yet migrated to version 3)."""
    try:
        with connect(dsn) as conn:
            version = schema_version(conn)
            if version is None or version < SCHEMA_VERSION:
                return None
            rows = conn.execute(
                "SELECT seq, author, author IS NOT NULL AND audit_is_operator(author) "
                f"FROM audit_events WHERE phase = {phase(Phase.DECISION)} ORDER BY seq"
            ).fetchall()
    except psycopg.Error as exc:
        raise LedgerError(f"cannot read the decisions' authors: {one_line(exc)}") from exc
    unrecorded = sum(1 for _seq, author, _ok in rows if author is None)
    bad = [(int(seq), str(author)) for seq, author, ok in rows if author is not None and not ok]
    return Authorship(len(rows) - unrecorded - len(bad), unrecorded, bad)


def one_line(exc: BaseException) -> str:
    """An error's message on one line: libpq's run over several (a hint, the server's
    address tried), and start-up errors are one line."""
    return " ".join(str(exc).split())
