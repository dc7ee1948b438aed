"""The bench's goals table says what limits a missed concurrency-1 goal with the run's own
figures: what the store alone adds, what the sidecar adds with no audit at all, and the
disk's sync."""

from __future__ import annotations

from typing import Any

from bench import goals


def _latency(p50: float) -> dict[str, float]:
    return {"p50_ms": p50, "p99_ms": p50 * 2, "rps": 1000 / p50}


def _data(*, unaudited: bool) -> dict[str, Any]:
    c1: dict[str, dict[str, Any]] = {
        "health": {"sqlite-audited": _latency(0.7)},
        "notice": {"sqlite-audited": _latency(3.5)},
    }
    if unaudited:
        c1["health"]["sqlite-unaudited"] = _latency(0.68)
        c1["notice"]["sqlite-unaudited"] = _latency(1.92)
        c1["health"]["store"] = _latency(0.66)
        c1["notice"]["store"] = _latency(1.8)
    return {"results": {}, "c1": c1, "fsync_ms": {"p50": 0.28, "p99": 0.85}}


def _notice_p50(data: dict[str, Any]) -> dict[str, Any]:
    wanted = "audited Notice adds to Health/Check's p50"
    (row,) = [r for r in goals.goals(data) if r["goal"].endswith(wanted)]
    return row


def test_a_missed_concurrency_1_goal_cites_the_unaudited_sidecar_and_the_disk() -> None:
    row = _notice_p50(_data(unaudited=True))
    assert not row["met"]
    assert row["value"] == 2.8
    assert "already adds 1.24 ms" in row["limit"]
    assert "the store alone, called directly, adds 1.14 ms" in row["limit"]
    assert "0.28 ms at p50" in row["limit"]
    assert "1.24 ms" in goals.goals_text(_data(unaudited=True))


def test_without_the_unaudited_sidecar_the_limit_is_the_profile_s_reading() -> None:
    row = _notice_p50(_data(unaudited=False))
    assert row["limit"] == goals.LIMITS["c1"]
