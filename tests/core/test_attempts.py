"""Live attempts: the registry keeps within its bounds, forgetting the least recently used;
an attempt's occurrence counts take back what a failed write took."""

from __future__ import annotations

import asyncio
import time

import pytest

from sidecar.core.attempts import (
    ATTEMPT_BYTES,
    IDLE,
    PRESSURE,
    REQUEST_BYTES,
    Attempt,
    AttemptRegistry,
    Claim,
    Occurrences,
)
from sidecar.errors import UnknownAttempt
from sidecar.rules.ids import WriteType


def begin(registry: AttemptRegistry, run_id: str) -> Attempt:
    return registry.begin(run_id=run_id, rule="triage", checkpoint="cp", lease_deadline=None)


def test_past_the_count_the_least_recently_used_attempt_is_forgotten() -> None:
    heard: list[tuple[str, str]] = []
    registry = AttemptRegistry(
        max_attempts=3, on_forget=lambda a, why: heard.append((a.run_id, why))
    )
    a, b, c = (begin(registry, run) for run in ("a", "b", "c"))
    registry.get(a.attempt_id)  # a is used again: b is now the least recently used
    d = begin(registry, "d")
    assert len(registry) == 3
    assert heard == [("b", PRESSURE)]
    with pytest.raises(UnknownAttempt):
        registry.get(b.attempt_id)
    for kept in (a, c, d):
        assert registry.get(kept.attempt_id) is kept


def test_past_the_bytes_the_attempt_holding_requests_is_counted_and_others_go() -> None:
    heard: list[str] = []
    registry = AttemptRegistry(
        max_bytes=3 * ATTEMPT_BYTES + 2 * REQUEST_BYTES,
        on_forget=lambda a, why: heard.append(a.run_id),
    )
    begin(registry, "old")
    busy = begin(registry, "busy")
    assert registry.approximate_bytes == 2 * ATTEMPT_BYTES

    claims: list[Claim] = []

    async def claim(attempt: Attempt, ids: range) -> None:
        for i in ids:
            claimed = await attempt.requests.claim(f"req-{i}", ("Create", i))
            assert claimed.answer is None and claimed.occurrence is None
            claims.append(claimed)

    asyncio.run(claim(registry.get(busy.attempt_id), range(2)))
    assert registry.approximate_bytes == 2 * ATTEMPT_BYTES + 2 * REQUEST_BYTES
    assert heard == []
    # A third request id takes the busy attempt past the bound: the other one goes.
    asyncio.run(claim(registry.get(busy.attempt_id), range(2, 3)))
    assert heard == ["old"]
    assert registry.approximate_bytes == ATTEMPT_BYTES + 3 * REQUEST_BYTES
    # A failed request gives its bytes back; an ended attempt gives back all of its own.
    claims[-1].released()
    assert registry.approximate_bytes == ATTEMPT_BYTES + 2 * REQUEST_BYTES
    registry.end(busy.attempt_id)
    assert registry.approximate_bytes == 0


def test_the_attempt_in_use_is_never_the_one_forgotten() -> None:
    registry = AttemptRegistry(max_bytes=ATTEMPT_BYTES)
    alone = begin(registry, "alone")

    async def claim() -> None:
        await alone.requests.claim("req", ("Create", 0))

    asyncio.run(claim())  # alone past the bound: kept, since forgetting it frees nothing in use
    assert registry.get(alone.attempt_id) is alone


def test_idle_attempts_are_forgotten_as_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    heard: list[str] = []
    registry = AttemptRegistry(idle_ttl_seconds=10, on_forget=lambda a, why: heard.append(why))
    begin(registry, "idle")
    later = time.monotonic() + 11
    monkeypatch.setattr("sidecar.core.attempts.time.monotonic", lambda: later)
    begin(registry, "fresh")
    assert heard == [IDLE]
    assert len(registry) == 1


def test_a_failed_write_gives_its_occurrence_back() -> None:
    occ = Occurrences()
    key = (WriteType.CREATE, ("k", "d"))
    assert [occ.take(*key), occ.take(*key)] == [0, 1]
    occ.give_back(*key, 0)
    assert occ.take(*key) == 0
    assert occ.take(*key) == 2
