"""``actonce store assign-owners``: give data made before owners were recorded the owner the
ledger says made it.

A reference store upgraded to its schema 2 records the owner of everything made from then on;
the artifacts, proposals and threads already there have none, and stay reachable by every
rule (as they were) until they get one. The ledger knows who made each: a create's events
(Create, a proposal, CreateThread: its intent, and its outcome when one was recorded) name its
derived id and the rule of its run. A derived id is drawn from its run's id, and a run belongs
to one rule, so a record holding that id was made by that rule, whatever became of the
outcome's event (a write whose outcome was lost landed all the same). This command reads every such
event and sets that rule as the owner of the record with that id, where it has none. An owner
already set is never changed, so the command can run again, and beside serving sidecars:
what they make meanwhile has its owner already.

A record the ledger names no create of (the ledger pruned before the events were kept, or
data written into the store by another path) keeps no owner; the command says how many it
could not place.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from sidecar.ledger.base import AuditEvent, LedgerReader, Phase
from sidecar.refstore.backend import StoreBackend
from sidecar.store_contract import Refusal

# The record each create's write type makes, by table (sidecar.refstore.backend.OWNED).
_TABLE_OF = {
    "create": "artifacts",
    "create_proposal": "proposals",
    "edit_proposal": "proposals",
    "thread": "threads",
}


@dataclass(frozen=True)
class Assigned:
    """What one run of the command did: owners set now, records that had one already, and
    creates the ledger names whose record the store does not hold (writes that failed, or
    data of another store)."""

    assigned: int
    kept: int
    missing: int


def creators(events: Iterable[AuditEvent]) -> dict[tuple[str, str], str]:
    """The rule whose run made each record, by (table, id), from the ledger's creates."""
    made: dict[tuple[str, str], str] = {}
    for event in events:
        table = _TABLE_OF.get(event.write_type)
        if (
            table is not None
            and event.phase in (Phase.INTENT, Phase.OUTCOME)
            and event.derived_id
            and event.rule
        ):
            made[(table, event.derived_id)] = event.rule
    return made


def assign(backend: StoreBackend, made: Mapping[tuple[str, str], str]) -> Assigned:
    """Set each record's owner where it has none."""
    assigned = kept = missing = 0
    for (table, record_id), rule in sorted(made.items()):
        if backend.assign_owner(table, record_id, rule):
            assigned += 1
        elif _exists(backend, table, record_id):
            kept += 1
        else:
            missing += 1
    return Assigned(assigned, kept, missing)


def _exists(backend: StoreBackend, table: str, record_id: str) -> bool:
    try:
        if table == "artifacts":
            backend.get_owner(artifact_id=record_id)
        elif table == "threads":
            backend.get_owner(thread_id=record_id)
        else:
            backend.get_proposal(record_id)
    except Refusal:
        return False
    return True


def run_assign_owners(values: Mapping[str, Any], out: TextIO) -> int:
    """The command: the ledger named by ``--audit-db`` / ``--audit-dsn``, the store by
    ``--store-db`` / ``--store-dsn``."""
    from sidecar.ledger.audit_command import open_reader

    reader: LedgerReader = open_reader(dict(values))
    try:
        made = creators(stored.event for stored in reader.events())
    finally:
        reader.close()
    backend = _open_store(values)
    try:
        done = assign(backend, made)
    finally:
        backend.close()
    print(
        f"{done.assigned} owners assigned, {done.kept} records had one already, "
        f"{done.missing} creates in the ledger have no record in this store (writes that "
        "failed, or data of another store)",
        file=out,
    )
    return 0


def _open_store(values: Mapping[str, Any]) -> StoreBackend:
    if values.get("store_dsn"):
        from sidecar.refstore.postgres import PostgresStoreBackend

        return PostgresStoreBackend(str(values["store_dsn"]))
    from sidecar.refstore.sqlite import SqliteStoreBackend

    path = values.get("store_db")
    if path is None:
        raise ValueError("name the store: --store-db FILE or --store-dsn DSN")
    if not Path(path).is_file():
        raise ValueError(f"--store-db {path}: no such file")
    # Opening a file makes the store's tables where there are none: a ledger's file of its
    # own, named by mistake, would get them. A store's file has a schema version.
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        (version,) = db.execute("PRAGMA user_version").fetchone()
    if not version:
        raise ValueError(f"--store-db {path}: holds no store's tables")
    return SqliteStoreBackend(Path(path))
