"""The run's figures as report.json holds them, read the same way by every part of the report.

The scenarios and targets in the order the report shows them and the names it gives them, a
figure of a scenario on a target, the ratio of two, and the concurrency-1 and peers' figures
that the goals, the tables and the plots all read.
"""

from __future__ import annotations

from typing import Any

SCENARIOS = ("create", "storm", "notice", "edit", "read", "health")
WRITES = ("create", "storm", "notice", "edit")
TARGET_ORDER = (
    "floor1",
    "floor3",
    "floor",
    "store",
    "sqlite-before",
    "sqlite-unaudited",
    "sqlite-twofilesbefore",
    "sqlite-twofiles",
    "sqlite-audited",
    "store-postgres",
    "postgres-before",
    "postgres-unaudited",
    "postgres-audited",
)
LABELS = {
    "floor1": "floor1 (one commit)",
    "floor3": "floor3 (three commits)",
    "sqlite-batch": "SQLite, audited, writers under SCHED_BATCH",
    "sqlite-twofiles": "SQLite, audited, a data folder of two files",
    "sqlite-twofilesbefore": "SQLite, audited, a data folder of two files, before",
    "postgres-before": "PostgreSQL, audited, before",
    "floor": "floor (Health/Check)",
    "store": "store alone",
    "store-postgres": "PostgreSQL store alone",
    "sqlite-before": "SQLite, audited, before",
    "sqlite-unaudited": "SQLite, unaudited",
    "sqlite-audited": "SQLite, audited",
    "postgres-unaudited": "PostgreSQL, unaudited",
    "postgres-audited": "PostgreSQL, audited",
}
C1_TARGETS = ("floor1", "floor3", "store", "sqlite-before", "sqlite-unaudited",
              "sqlite-twofilesbefore", "sqlite-twofiles", "sqlite-audited",
              "postgres-before", "postgres-unaudited", "postgres-audited")  # fmt: skip
CONTENDED_TARGETS = ("floor1", "floor3", "sqlite-audited", "sqlite-batch")


def _get(data: dict[str, Any], scenario: str, target: str, key: str) -> float | None:
    entry = data["results"].get(scenario, {}).get(target)
    return None if entry is None else float(entry[key])


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def c1_added(data: dict[str, Any], scenario: str, target: str, key: str) -> float | None:
    """What ``scenario`` adds to Health/Check's ``key`` (p50_ms, p99_ms) at concurrency 1."""
    c1 = data.get("c1", {})
    write, floor = c1.get(scenario, {}).get(target), c1.get("health", {}).get(target)
    if write is None or floor is None:
        return None
    return float(write[key]) - float(floor[key])


def c1_ratio(data: dict[str, Any], part: str, scenario: str, target: str, floor: str
             ) -> float | None:  # fmt: skip
    """``target``'s p50 over ``floor``'s for ``scenario``, one call at a time, in the
    concurrency-1 part (``c1``) or beside busy cores (``contended``)."""
    results = data.get("c1", {}) if part == "c1" else data.get("contended", {}).get("results", {})
    by = results.get(scenario, {})
    if target not in by or floor not in by:
        return None
    return _ratio(float(by[target]["p50_ms"]), float(by[floor]["p50_ms"]))


def peer_rows(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return dict((data.get("peers") or {}).get("rows") or {})


def _targets(data: dict[str, Any]) -> list[str]:
    present = {t for by_target in data["results"].values() for t in by_target}
    return [t for t in TARGET_ORDER if t in present]
