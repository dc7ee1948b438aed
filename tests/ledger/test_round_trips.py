"""Group commit and fencing cost statements per batch, not per event, in both dialects.

A batch is written by :func:`sidecar.ledger.sql.append` inside one transaction; on
PostgreSQL each statement is a round trip (``executemany`` runs its rows in one pipeline).
Whatever the batch holds, the number of statements must not grow with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from sidecar.ledger.base import GENESIS_HASH, AuditEvent, Phase
from sidecar.ledger.schema import POSTGRES, SQLITE, Dialect
from sidecar.ledger.sql import Queries, append


class _Rows:
    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self._rows = rows

    def fetchone(self) -> tuple[Any, ...]:
        return self._rows[0]

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self._rows


class CountingCursor:
    """Answers the head read with an empty chain and every other read with no rows."""

    def __init__(self) -> None:
        self.statements: list[str] = []

    def execute(self, query: str, params: Sequence[Any] = (), /) -> _Rows:
        self.statements.append(query)
        head = "FROM audit_chains" in query
        return _Rows([(0, 0, GENESIS_HASH, None, None)] if head else [])

    def executemany(self, query: str, params: Sequence[Sequence[Any]], /) -> None:
        self.statements.append(query)


def _batch(runs: int) -> list[AuditEvent]:
    """Per run: a new attempt, a scoped one, and an intent and an outcome of each."""
    events: list[AuditEvent] = []
    for n in range(runs):
        for scope in ("", "review"):
            run, attempt = f"run-{n}", f"run-{n}.{scope}"
            for rpc, phase in (("BeginAttempt", Phase.ATTEMPT_BEGIN), ("Notice", Phase.INTENT),
                               ("Notice", Phase.OUTCOME)):  # fmt: skip
                events.append(AuditEvent(run, attempt, rpc, phase, scope=scope))
    return events


@pytest.mark.parametrize("dialect", [SQLITE, POSTGRES], ids=["sqlite", "postgres"])
def test_a_batchs_statements_do_not_grow_with_its_events(dialect: Dialect) -> None:
    counts = {}
    for runs in (1, 200):
        cursor = CountingCursor()
        results = append(cursor, Queries(dialect), _batch(runs))
        assert results == list(range(1, 6 * runs + 1))  # every event laid onto the chain
        counts[runs] = len(cursor.statements)
    assert counts[200] == counts[1], counts
    # The head (read, then set), the newest attempts of each kind of run, the rules of the
    # runs begun, and one statement per table written.
    assert counts[1] <= 9, counts
