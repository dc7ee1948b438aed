"""Group commit's promises to its callers, on a backend that records what it is given."""

from __future__ import annotations

import asyncio
import threading

import pytest

from sidecar.ledger.base import AuditEvent, GroupCommitLedger, LedgerError


class Recording(GroupCommitLedger):
    """Writes batches into a list; the first batch waits until ``release`` is set."""

    def __init__(self, *, append_timeout_seconds: float | None = None) -> None:
        super().__init__(append_timeout_seconds=append_timeout_seconds)
        self.written: list[str] = []
        self.taken = threading.Event()
        self.release = threading.Event()
        self._start_writer()

    def _write_batch(self, events: list[AuditEvent]) -> list[int | LedgerError]:
        self.taken.set()
        self.release.wait(10)
        self.written += [e.run_id for e in events]
        return list(range(len(self.written) - len(events) + 1, len(self.written) + 1))

    def _close_backend(self) -> None:
        return None


def _event(run_id: str) -> AuditEvent:
    return AuditEvent(run_id=run_id, attempt_id="a", rpc="Notice", phase="intent")


def test_an_append_whose_caller_goes_away_is_written_all_the_same() -> None:
    async def scenario() -> list[str]:
        ledger = Recording()
        first = asyncio.create_task(ledger.append(_event("first")))
        await asyncio.to_thread(ledger.taken.wait, 10)  # the writer holds "first"
        gone = asyncio.create_task(ledger.append(_event("gone")))
        await asyncio.sleep(0)  # queued behind "first"
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        ledger.release.set()
        assert await first == 1
        await ledger.close()
        return ledger.written

    assert asyncio.run(scenario()) == ["first", "gone"]


def test_an_append_past_its_bound_fails_closed_and_is_not_written_later() -> None:
    async def scenario() -> list[str]:
        ledger = Recording(append_timeout_seconds=0.2)
        first = asyncio.create_task(ledger.append(_event("first")))
        await asyncio.to_thread(ledger.taken.wait, 10)
        with pytest.raises(LedgerError, match="not durable within"):
            await ledger.append(_event("late"))  # queued while the writer is held
        ledger.release.set()
        with pytest.raises(LedgerError):
            await first  # it timed out too, but the writer had already taken it up
        await ledger.close()
        return ledger.written

    assert asyncio.run(scenario()) == ["first"]
