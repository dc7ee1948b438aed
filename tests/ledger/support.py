"""A ledger's place in a test, a SQLite file or a PostgreSQL database, and events written
into it as the sidecar writes them."""

from __future__ import annotations

import asyncio
import contextlib
import io
import subprocess
from dataclasses import dataclass
from pathlib import Path

from sidecar.cli import main
from sidecar.ledger import inspect
from sidecar.ledger.audit_command import open_reader
from sidecar.ledger.base import AuditEvent, GroupCommitLedger
from sidecar.ledger.postgres import PostgresLedger
from sidecar.ledger.sqlite import SqliteLedger


def audit_cli(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """The command line's own entry point on ``argv``, in this process (one interpreter start
    per command would dominate the ledger's tests): its exit code, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
            code = 0
        except SystemExit as exit_:
            code = int(exit_.code or 0)
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


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
