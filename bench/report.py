"""The load test's report: report.md with the goals' ratios, and the plots, from report.json.

``python -m bench.report bench/out/report.json`` renders them again from a saved run.
:func:`write` also returns what is wrong with a run (a scenario with no answers, a retry
storm that applied anything, refusals nobody expected): `make bench-smoke` fails on those.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SCENARIOS = ("create", "storm", "notice", "edit", "read", "health")
WRITES = ("create", "storm", "notice", "edit")
TARGET_ORDER = (
    "floor",
    "store",
    "sqlite-before",
    "sqlite-unaudited",
    "sqlite-audited",
    "store-postgres",
    "postgres-unaudited",
    "postgres-audited",
)
LABELS = {
    "floor": "floor (Health/Check)",
    "store": "store alone",
    "store-postgres": "PostgreSQL store alone",
    "sqlite-before": "SQLite, audited, before",
    "sqlite-unaudited": "SQLite, unaudited",
    "sqlite-audited": "SQLite, audited",
    "postgres-unaudited": "PostgreSQL, unaudited",
    "postgres-audited": "PostgreSQL, audited",
}


def _get(data: dict[str, Any], scenario: str, target: str, key: str) -> float | None:
    entry = data["results"].get(scenario, {}).get(target)
    return None if entry is None else float(entry[key])


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def goals(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Each goal of the load test: what was measured, the bound, and whether it was met."""
    rows: list[dict[str, Any]] = []

    def add(goal: str, value: float | None, bound: float, *, at_most: bool = False,
            unit: str = "") -> None:  # fmt: skip
        if value is None:
            return
        met = value <= bound if at_most else value >= bound
        miss = "" if met else (
            f"{value - bound:+.2f}{unit} over" if at_most else f"{bound / value:.1f}x short"
            if value else "no answers"
        )  # fmt: skip
        rows.append({"goal": goal, "value": round(value, 3), "bound": bound,
                     "at_most": at_most, "met": met, "unit": unit, "miss": miss})  # fmt: skip

    floor = _get(data, "health", "floor", "rps")
    for backend in ("sqlite", "postgres"):
        audited = f"{backend}-audited"
        add(f"{backend}: audited Notice rps / floor rps",
            _ratio(_get(data, "notice", audited, "rps"), floor), 0.35)  # fmt: skip
        for scenario in ("notice", "create", "edit"):
            add(f"{backend}: audited / unaudited rps, {scenario}",
                _ratio(_get(data, scenario, audited, "rps"),
                       _get(data, scenario, f"{backend}-unaudited", "rps")), 0.8)  # fmt: skip
    for backend, store in (("sqlite", "store"), ("postgres", "store-postgres")):
        for scenario in ("notice", "create", "storm", "read"):
            add(f"{backend}: sidecar + store / store alone rps, {scenario}",
                _ratio(_get(data, scenario, f"{backend}-audited", "rps"),
                       _get(data, scenario, store, "rps")), 0.5)  # fmt: skip
    half = data.get("half_rate", {}).get("targets", {})
    if "store" in half and "sqlite-audited" in half:
        added = float(half["sqlite-audited"]["p99_ms"]) - float(half["store"]["p99_ms"])
        add(f"sqlite: added p99 over the store alone at {data['half_rate']['rate']} Notice/s "
            "(half the saturating rate)", added, 2.0, at_most=True, unit=" ms")  # fmt: skip
        errors = sum(int(t["errors"]) for t in half.values())
        add("non-OK responses below saturation (half rate, sidecar and store)", errors, 0,
            at_most=True)  # fmt: skip
    for backend in ("sqlite", "postgres"):
        for scenario in WRITES:
            add(f"{backend}: sidecar CPU core-seconds per 1,000 writes, {scenario}",
                _get(data, scenario, f"{backend}-audited", "cpu_seconds_per_1000_calls"), 0.5,
                at_most=True)  # fmt: skip
    return rows


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
    for target, storms in data.get("storm_outcomes", {}).items():
        for storm in storms:
            if storm["applied"] or storm["already_applied"] != storm["requests"]:
                found.append(f"retry storm on {target} did not come back all ALREADY_APPLIED: "
                             f"{storm}")  # fmt: skip
    return found


def _cell(value: float | None, digits: int = 0, *, latency: bool = False) -> str:
    # ghz gives no latencies for a run whose every call was refused (the store's storm).
    if value is None or (latency and value == 0):
        return "n/a"
    return f"{value:,.{digits}f}"


def _targets(data: dict[str, Any]) -> list[str]:
    present = {t for by_target in data["results"].values() for t in by_target}
    return [t for t in TARGET_ORDER if t in present]


def markdown(data: dict[str, Any]) -> str:
    m, s = data["machine"], data["settings"]
    targets = _targets(data)
    scenarios = [x for x in SCENARIOS if x in data["results"]]
    lines = [
        "# actonce under ghz",
        "",
        f"{m['cores']} cores ({m['cpu']}); servers on core {m['server_core']}, ghz on core "
        f"{m['load_core']}. Python {m['python']}, grpcio {m['grpcio']}, protobuf "
        f"{m['protobuf']}, SQLite {m['sqlite']}, ghz {m['ghz']}, kernel {m['kernel']}. "
        f"{s['rounds']} rounds of {s['seconds']:g} s per scenario and target, alternated; "
        f"concurrency {s['concurrency']}; medians. Run took {s['wall_seconds']:.0f} s.",
        "",
        "## Goals",
        "",
        "| goal | measured | bound | met |",
        "| --- | ---: | ---: | --- |",
    ]
    for row in goals(data):
        bound = f"{'≤' if row['at_most'] else '≥'} {row['bound']:g}{row['unit']}"
        verdict = "yes" if row["met"] else f"**no** ({row['miss']})"
        lines.append(f"| {row['goal']} | {row['value']:.2f}{row['unit']} | {bound} | {verdict} |")
    header = "| scenario | " + " | ".join(LABELS[t] for t in targets) + " |"
    rule = "| --- |" + " ---: |" * len(targets)
    for title, key, digits in [
        ("Throughput (calls/s)", "rps", 0),
        ("p50 latency (ms)", "p50_ms", 1),
        ("p99 latency (ms)", "p99_ms", 1),
        ("Server CPU core-seconds per 1,000 calls", "cpu_seconds_per_1000_calls", 2),
        ("Non-OK answers", "errors", 0),
    ]:
        lines += ["", f"## {title}", "", header, rule]
        for scenario in scenarios:
            cells = [_cell(_get(data, scenario, t, key), digits, latency=key.endswith("_ms"))
                     for t in targets]  # fmt: skip
            lines.append(f"| {scenario} | " + " | ".join(cells) + " |")
    if "sqlite-before" in targets:
        lines += ["", "## Before and after the speed work (`actonce serve`, SQLite, audited)", "",
                  "Before: the commit named in bench/run.py's BEFORE_REF, run in the same "
                  "run, alternated with the others.", "",
                  "| scenario | before calls/s | after calls/s | after/before | "
                  "CPU before | CPU after |",
                  "| --- | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
        for scenario in (*WRITES, "read"):
            b, a = (_get(data, scenario, t, "rps") for t in ("sqlite-before", "sqlite-audited"))
            cb, ca = (_get(data, scenario, t, "cpu_seconds_per_1000_calls")
                      for t in ("sqlite-before", "sqlite-audited"))  # fmt: skip
            if b is None or a is None:
                continue
            lines.append(f"| {scenario} | {b:,.0f} | {a:,.0f} | {_cell(_ratio(a, b), 2)} | "
                         f"{_cell(cb, 2)} | {_cell(ca, 2)} |")  # fmt: skip
    half = data.get("half_rate", {})
    if half.get("targets"):
        lines += ["", f"## Notice at half the saturating rate ({half['rate']} calls/s)", "",
                  "| target | p50 ms | p90 ms | p99 ms | non-OK | CPU s per 1,000 |",
                  "| --- | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
        for name, entry in half["targets"].items():
            lines.append(f"| {LABELS[name]} | {entry['p50_ms']:.2f} | {entry['p90_ms']:.2f} | "
                         f"{entry['p99_ms']:.2f} | {entry['errors']} | "
                         f"{entry['cpu_seconds_per_1000_calls']:.2f} |")  # fmt: skip
    if data.get("storm_outcomes"):
        lines += ["", "## Retry storm: the second attempt's writes by outcome (EndAttempt)", "",
                  "| target | requests | ALREADY_APPLIED | APPLIED | failed |",
                  "| --- | ---: | ---: | ---: | ---: |"]  # fmt: skip
        for name, storms in data["storm_outcomes"].items():
            for storm in storms:
                lines.append(f"| {LABELS[name]} | {storm['requests']} | "
                             f"{storm['already_applied']} | {storm['applied']} | "
                             f"{storm['failed']} |")  # fmt: skip
    lines += ["", "Expected refusals, not counted as problems: Edit's `Aborted` (VERSION_CONFLICT "
              "after three re-reads on the hot artifact, RETRYABLE by design) and the store "
              "alone's `AlreadyExists` in the storm (the sidecar answers that "
              "OUTCOME_ALREADY_APPLIED).", "",
              "![throughput](throughput.png)", "", "![latency](latency.png)", ""]  # fmt: skip
    return "\n".join(lines)


def plot(data: dict[str, Any], out: Path) -> None:
    """throughput.png (calls/s per target) and latency.png (p50/p90/p99 per target)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    targets = _targets(data)
    scenarios = [x for x in SCENARIOS if x in data["results"]]
    width = 0.8 / max(1, len(targets))
    fig, ax = plt.subplots(figsize=(11, 5))
    for i, target in enumerate(targets):
        xs = [j + i * width for j in range(len(scenarios))]
        ys = [_get(data, s, target, "rps") or 0.0 for s in scenarios]
        ax.bar(xs, ys, width, label=LABELS[target])
    ax.set_xticks([j + width * (len(targets) - 1) / 2 for j in range(len(scenarios))])
    ax.set_xticklabels(scenarios)
    ax.set_ylabel("calls per second (median)")
    ax.set_title("Throughput per scenario and target")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "throughput.png", dpi=110)
    plt.close(fig)

    shown = [s for s in scenarios if s != "health"]
    fig, axes = plt.subplots(1, len(shown), figsize=(4 * len(shown), 4.5), squeeze=False)
    for ax, scenario in zip(axes[0], shown, strict=True):
        present = [t for t in targets if _get(data, scenario, t, "rps") is not None]
        for k, key in enumerate(("p50_ms", "p90_ms", "p99_ms")):
            xs = [j + k * 0.27 for j in range(len(present))]
            ax.bar(xs, [_get(data, scenario, t, key) or 0.0 for t in present], 0.27,
                   label=key.removesuffix("_ms"))  # fmt: skip
        ax.set_xticks([j + 0.27 for j in range(len(present))])
        ax.set_xticklabels([LABELS[t] for t in present], rotation=35, ha="right", fontsize=7)
        ax.set_title(scenario)
        ax.set_ylabel("ms at saturation")
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle("Latency percentiles per target (saturated, concurrency "
                 f"{data['settings']['concurrency']})")  # fmt: skip
    fig.tight_layout()
    fig.savefig(out / "latency.png", dpi=110)
    plt.close(fig)


def write(data: dict[str, Any], out: Path) -> list[str]:
    """Write report.md and the plots beside report.json; return what is wrong with the run."""
    (out / "report.md").write_text(markdown(data))
    plot(data, out)
    return problems(data)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path, nargs="?", default=Path("bench/out/report.json"))
    args = parser.parse_args(argv)
    data = json.loads(args.report.read_text())
    for problem in write(data, args.report.parent):
        print(f"problem: {problem}")
    print((args.report.parent / "report.md").read_text())


if __name__ == "__main__":
    main()
