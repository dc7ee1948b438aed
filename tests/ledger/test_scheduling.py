"""The threads a write's answer waits for run under the kernel's normal policy, never SCHED_BATCH,
which would make each hand-off wait out a time slice of whatever else runs on the core."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

from sidecar.ledger.base import AuditEvent
from sidecar.ledger.sqlite import SqliteLedger
from sidecar.refstore.sqlite import SqliteStoreBackend
from sidecar.upstream.base import CreateThread, ThreeCommits, ping
from sidecar.upstream.inprocess import InProcessStoreClient

pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_getscheduler"), reason="scheduling policies are Linux's"
)


def policy_of(name: str) -> int:
    (thread,) = [t for t in threading.enumerate() if t.name == name]
    assert thread.native_id is not None
    return os.sched_getscheduler(thread.native_id)


def test_the_ledger_writer_and_the_store_s_threads_keep_the_normal_policy(tmp_path: Path) -> None:
    async def run() -> tuple[int, int, int, int]:
        ledger = SqliteLedger(tmp_path / "audit.db")
        backend = SqliteStoreBackend(tmp_path / "store.db")
        store = InProcessStoreClient(backend, separate_ledger=ledger)
        try:
            # The threads set their policy as they start; a call through each proves
            # they have.
            await ledger.append(AuditEvent(run_id="r", attempt_id="a", rpc="X", phase="read"))
            await ping(store)
            intent = AuditEvent(run_id="r", attempt_id="a", rpc="X", phase="intent")
            await store.call(ThreeCommits(intent, CreateThread("thr-1", "t"), _settled), 5)
            return (policy_of("ledger-writer"), policy_of("store-batches"),
                    policy_of("store-3-commits"), os.sched_getscheduler(0))  # fmt: skip
        finally:
            await store.close()
            await ledger.close()
            backend.close()

    writer, batches, three_commits, caller = asyncio.run(run())
    assert writer == os.SCHED_OTHER
    assert batches == os.SCHED_OTHER
    assert three_commits == os.SCHED_OTHER
    assert caller == os.SCHED_OTHER


def _settled(answer: object) -> tuple[AuditEvent, object]:
    return AuditEvent(run_id="r", attempt_id="a", rpc="X", phase="outcome"), answer


def test_the_store_batches_of_a_postgresql_store_keep_the_normal_policy() -> None:
    from sidecar.refstore.postgres import PostgresStoreBackend
    from tests.helpers import postgres as pg

    async def run() -> int:
        backend = PostgresStoreBackend(pg.fresh_database("scheduling"))
        store = InProcessStoreClient(backend)
        try:
            await ping(store)
            return policy_of("store-batches")
        finally:
            await store.close()
            backend.close()

    assert asyncio.run(run()) == os.SCHED_OTHER
