"""Readers of a PostgreSQL ledger that share one snapshot: ``audit verify --jobs``.

Each worker of a parallel verify reads on a connection of its own, yet all must see the
ledger of one moment. The first reader exports its REPEATABLE READ transaction's snapshot
(``pg_export_snapshot()``); each other reader begins its transaction with ``SET
TRANSACTION SNAPSHOT`` naming it, before any other statement, and from then on sees exactly
what the first sees, whatever sidecars commit meanwhile. An exported snapshot can be
adopted only while the transaction that exported it is open: the first reader's snapshot
outlives the walk (sidecar.ledger.inspect._walk_in_parallel).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from psycopg import sql

from sidecar.ledger.base import LedgerReader
from sidecar.ledger.postgres import PostgresLedgerReader

__all__ = ["SharedPostgresSnapshot", "SharingReader"]


class SharingReader(PostgresLedgerReader):
    """A PostgreSQL ledger reader whose snapshot others can adopt."""

    def export_snapshot(self) -> str:
        """Inside ``snapshot()``: the id others adopt it by. Called at the transaction's top
        level (PostgreSQL exports no snapshot from a savepoint)."""
        row = self._conn.execute("SELECT pg_export_snapshot()").fetchone()
        assert row is not None
        return str(row[0])

    @contextmanager
    def adopting(self, snapshot: str) -> Iterator[None]:
        """This reader's snapshot is ``snapshot``, exported by another reader, until the
        block ends."""
        with self.snapshot():
            # SET takes no bound parameters: the id goes in as a quoted literal.
            self._conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot)))
            yield


class SharedPostgresSnapshot:
    """inspect.SharedSnapshot on PostgreSQL: more readers of the ledger at ``dsn``."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn

    def share(self, reader: LedgerReader) -> str:
        if not isinstance(reader, SharingReader):
            raise TypeError("a shared snapshot is exported by a SharingReader")
        return reader.export_snapshot()

    @contextmanager
    def reader(self, snapshot: str) -> Iterator[LedgerReader]:
        worker = SharingReader(self._dsn)
        try:
            with worker.adopting(snapshot):
                yield worker
        finally:
            worker.close()
