"""The edit queue: one holder per key at a time, first come first served, and nothing kept after."""

from __future__ import annotations

import asyncio

import pytest

from sidecar.core.edit_queue import EditQueue, QueueTooSlow


def test_holders_of_one_key_hold_it_one_at_a_time_in_order_and_other_keys_do_not_wait() -> None:
    async def run() -> None:
        queue = EditQueue()
        seen: list[str] = []
        release = asyncio.Event()

        async def hold(key: str, name: str) -> None:
            async with queue.of(key, wait_seconds=5):
                seen.append(f"{name} in")
                if name == "first":
                    await release.wait()
                seen.append(f"{name} out")

        first = asyncio.create_task(hold("art-1", "first"))
        await asyncio.sleep(0)
        second = asyncio.create_task(hold("art-1", "second"))
        other = asyncio.create_task(hold("art-2", "other"))
        await asyncio.sleep(0.01)
        assert seen == ["first in", "other in", "other out"]
        release.set()
        await asyncio.gather(first, second, other)
        assert seen[3:] == ["first out", "second in", "second out"]
        assert len(queue) == 0

    asyncio.run(run())


def test_a_key_not_free_in_time_is_refused_and_leaves_nothing_behind() -> None:
    async def run() -> None:
        queue = EditQueue()
        held = asyncio.Event()
        release = asyncio.Event()

        async def hold() -> None:
            async with queue.of("art-1", wait_seconds=5):
                held.set()
                await release.wait()

        holder = asyncio.create_task(hold())
        await held.wait()
        with pytest.raises(QueueTooSlow):
            async with queue.of("art-1", wait_seconds=0.05):
                pytest.fail("the key was held by another")
        release.set()
        await holder
        assert len(queue) == 0
        async with queue.of("art-1", wait_seconds=0.05):
            pass

    asyncio.run(run())
