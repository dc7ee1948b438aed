"""What makes a run wrong rather than slow: `make bench-smoke` fails on any of it.

A part with no answers, or with answers other than OK (at saturation, the status that
report.json's ``expected_refusals`` names is expected too: Edit's ``Aborted``, the store
alone's ``AlreadyExists`` in the storm); the tracing part's own
(:func:`bench.tracing_bench.problems`); a retry storm whose writes did not all come back
ALREADY_APPLIED.
"""

from __future__ import annotations

from typing import Any

from bench import tracing_bench
from bench.figures import peer_rows


def problems(data: dict[str, Any]) -> list[str]:
    """What makes a run wrong rather than slow."""
    found: list[str] = []
    expected = data.get("expected_refusals", {})
    for scenario, by_target in data["results"].items():
        for target, entry in by_target.items():
            if not entry["calls"] or not entry["rps"]:
                found.append(f"{scenario} on {target}: no answers")
            kind = "store" if target.startswith("store") else "sidecar"
            allowed = {"OK", *expected.get(kind, {}).get(scenario, [])[:1]}
            odd = {s: n for s, n in entry["statuses"].items() if s not in allowed}
            if odd:
                found.append(f"{scenario} on {target}: unexpected answers {odd}")
    for scenario, by_target in data.get("c1", {}).items():
        for target, entry in by_target.items():
            odd = {s: n for s, n in entry["statuses"].items() if s != "OK"}
            if odd or not entry["calls"]:
                found.append(f"{scenario} at concurrency 1 on {target}: answers {odd or 'none'}")
    for scenario, by_target in (data.get("contended") or {}).get("results", {}).items():
        for target, entry in by_target.items():
            odd = {s: n for s, n in entry["statuses"].items() if s != "OK"}
            if odd or not entry["calls"]:
                found.append(f"{scenario} beside busy cores on {target}: answers "
                             f"{odd or 'none'}")  # fmt: skip
    for key, entry in peer_rows(data).items():
        if entry["errors"] or not entry["calls"]:
            found.append(f"peers: {key}: {entry['errors']} non-OK of {entry['calls']}")
    grown = data.get("growth", {})
    for level in grown.get("live_attempts", []):
        if level["errors"] or not level["calls"]:
            found.append(f"Notice with {level['live_attempts']} live attempts: "
                         f"{level['errors']} non-OK of {level['calls']}")  # fmt: skip
    for name in ("empty", "large"):
        if grown.get("ledger", {}).get(name, {}).get("errors"):
            found.append(f"Notice on the {name} ledger: non-OK answers")
    found += tracing_bench.problems(data)
    for target, storms in data.get("storm_outcomes", {}).items():
        for storm in storms:
            if storm["applied"] or storm["already_applied"] != storm["requests"]:
                found.append(f"retry storm on {target} did not come back all ALREADY_APPLIED: "
                             f"{storm}")  # fmt: skip
    return found
