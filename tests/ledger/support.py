"""A ledger's place in a test, a SQLite file or a PostgreSQL database, and events written
into it as the sidecar writes them."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

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
