"""A ledger's place in a test, a SQLite file or a PostgreSQL database, and events written
into it as the sidecar writes them."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from sidecar.ledger import inspect
from sidecar.ledger.audit_command import open_reader
from sidecar.ledger.base import AuditEvent
from sidecar.ledger.group_commit import GroupCommitLedger
from sidecar.ledger.postgres import PostgresLedger
from sidecar.ledger.sqlite import SqliteLedger


@dataclass
class LedgerPlace:
    db: Path | None
    dsn: str | None

    def writer(self) -> GroupCommitLedger:
        if self.dsn:
            return PostgresLedger(self.dsn)
        assert self.db is not None
        return SqliteLedger(self.db)

    def append(self, *events: AuditEvent) -> None:
        """Write ``events`` through the sidecar's own ledger (none: only its schema)."""

        async def go() -> None:
            ledger = self.writer()
            try:
                for event in events:
                    await ledger.append(event)
            finally:
                await ledger.close()

        asyncio.run(go())

    def verify(self, *exports: Path) -> inspect.Verdict:
        """What ``actonce audit verify`` finds in the ledger (with ``exports``, the pruned
        events exported to those files)."""
        reader = open_reader({"audit_db": self.db, "audit_dsn": self.dsn})
        try:
            return inspect.verify(reader, exports=list(exports))
        finally:
            reader.close()
