"""report.md's text: the run's machine and settings, the goals' table, each part's figures.

:func:`markdown` writes the page: the goals with their verdicts (bench/goals.py), then the
tables of each part the run has (the peers, beside busy cores, concurrency 1, growth,
tracing, saturation, before and after, half rate, the retry storm's outcomes), with links to
the plots that bench/plots.py draws beside it.
"""

from __future__ import annotations

from typing import Any

from bench import tracing_bench
from bench.figures import (
    C1_TARGETS,
    CONTENDED_TARGETS,
    LABELS,
    SCENARIOS,
    WRITES,
    _get,
    _ratio,
    _targets,
    c1_added,
    c1_ratio,
    peer_rows,
)
from bench.goals import _bound, _verdict, goals


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
        lines.append(f"| {row['goal']} | {row['value']:.2f}{row['unit']} | {_bound(row)} | "
                     f"{_verdict(row)} |")  # fmt: skip
    lines += (peers_section(data) + contended_section(data) + c1_section(data)
              + growth_section(data) + tracing_bench.section(data))  # fmt: skip
    if data.get("profiles"):
        lines += ["", "Profiles (cProfile, every thread of the audited SQLite sidecar, under "
                  "Notice): " + ", ".join(f"[{name}]({file})" for name, file in
                                          data["profiles"].items()) + "."]  # fmt: skip
    header = "| scenario | " + " | ".join(LABELS[t] for t in targets) + " |"
    rule = "| --- |" + " ---: |" * len(targets)
    for title, key, digits in [
        ("Throughput (calls/s)", "rps", 0),
        ("p50 latency (ms)", "p50_ms", 1),
        ("p99 latency (ms)", "p99_ms", 1),
        ("Server CPU core-seconds per 1,000 calls", "cpu_seconds_per_1000_calls", 2),
        ("Non-OK answers", "errors", 0),
    ]:
        if not targets:  # no saturation part in this run
            break
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
              *(["![throughput](throughput.png)", "", "![latency](latency.png)"]
                if targets else []), ""]  # fmt: skip
    return "\n".join(lines)


def peers_section(data: dict[str, Any]) -> list[str]:
    """The peers' table, made anew in this run: the issue's columns."""
    rows = peer_rows(data)
    if not rows:
        return []
    labels = (data.get("peers") or {}).get("labels") or {}
    s = data["settings"]
    lines = ["", "## actonce and its peers, local and durable", "",
             "Each system makes one durable write per call, the same procedure for each, "
             f"{s['rounds']} rotated rounds, medians: spawned (cold start: to its first writes "
             "answered), resident memory idle, a warm-up, one call at a time (p50, p99), then "
             f"{s['concurrency']} callers for {s['seconds']:g} s (writes/s; CPU of every "
             "process of the system, its PostgreSQL server's included where it has one; peak "
             "resident memory). ghz drives the gRPC systems, the bench's closed-loop HTTP "
             "client (bench/httpload) Restate's ingress.", "",
             "| system | p50 ms | p99 ms | writes/s at c=32 | CPU ms/write | "
             "RSS idle / load MiB | cold start s |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for key, entry in rows.items():
        system, write = key.split("/")
        label = labels.get(system, system)
        if system.endswith("audited"):
            label = f"**{label}, {write.capitalize()}**"
        lines.append(f"| {label} | {entry['p50_ms']:.2f} | {entry['p99_ms']:.2f} | "
                     f"{entry['rps']:,.0f} | {entry['cpu_ms_per_write']:.2f} | "
                     f"{entry['rss_idle_mib']:.0f} / {entry['rss_load_mib']:.0f} | "
                     f"{entry['cold_start_s']:.2f} |")  # fmt: skip
    skipped = (data.get("peers") or {}).get("skipped") or []
    if skipped:
        lines += ["", f"Not installed, not measured: {', '.join(skipped)}."]
    return [*lines, "", "![peers](peers.png)"]


def contended_section(data: dict[str, Any]) -> list[str]:
    """Concurrency 1 beside a busy loop on every core."""
    part = data.get("contended") or {}
    results = part.get("results") or {}
    if not results:
        return []
    s = data["settings"]
    lines = ["", "## Beside busy cores: one call at a time, every core busy", "",
             f"A busy loop on each of the {part.get('cores', 0)} cores, as an agent's container "
             "can make beside its sidecar, while each target serves one call at a time; "
             f"medians of {s.get('c1_rounds', 3)} alternated rounds of "
             f"{s.get('c1_seconds', 0):g} s. The SCHED_BATCH row is the same sidecar with its "
             "writer threads under that policy (bench only), as `actonce serve` had them "
             "before.", "",
             "| call | target | p50 ms | p99 ms | p50 / floor3's |",
             "| --- | --- | ---: | ---: | ---: |"]  # fmt: skip
    for scenario in ("notice", "create"):
        for target in CONTENDED_TARGETS:
            entry = results.get(scenario, {}).get(target)
            if entry is None:
                continue
            ratio = c1_ratio(data, "contended", scenario, target, "floor3")
            lines.append(f"| {scenario} | {LABELS[target]} | {entry['p50_ms']:.2f} | "
                         f"{entry['p99_ms']:.2f} | {_cell(ratio, 2)} |")  # fmt: skip
    return [*lines, "", "![beside busy cores](contended.png)"]


def c1_section(data: dict[str, Any]) -> list[str]:
    """Concurrency 1: each write's p50 and p99, and what it adds over Health/Check."""
    c1 = data.get("c1", {})
    targets = [t for t in C1_TARGETS if t in c1.get("health", {})]
    if not targets:
        return []
    s = data["settings"]
    lines = ["", "## Concurrency 1: what one write adds over Health/Check (SQLite)", "",
             f"One call at a time, medians of {s.get('c1_rounds', 3)} alternated rounds of "
             f"{s.get('c1_seconds', 0):g} s per scenario (targets and scenarios rotated); the "
             "floor is Health/Check on the same process. Before: "
             f"`{s.get('before_ref', '')[:12]}`.", "",
             "| call | target | p50 ms | p99 ms | added p50 ms | added p99 ms | calls/s |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for scenario in ("health", "notice", "create", "edit"):
        for target in targets:
            entry = c1.get(scenario, {}).get(target)
            if entry is None:
                continue
            added = [c1_added(data, scenario, target, key) for key in ("p50_ms", "p99_ms")]
            cells = ["" if scenario == "health" or a is None else f"{a:+.2f}" for a in added]
            lines.append(f"| {scenario} | {LABELS[target]} | {entry['p50_ms']:.2f} | "
                         f"{entry['p99_ms']:.2f} | {cells[0]} | {cells[1]} | "
                         f"{entry['rps']:,.0f} |")  # fmt: skip
    disk = data.get("fsync_ms") or {}
    if disk.get("p50") is not None:
        lines += ["", f"The disk under it: a 4 KiB write and fsync took {disk['p50']:.2f} ms at "
                  f"p50 and {disk['p99']:.2f} ms at p99 (measured before each round, in the "
                  "servers' folder); a write waits for three commits one after another (its "
                  "intent, the store's, its outcome), each with its own sync. The unaudited "
                  "sidecar (bench only) waits for the store's alone."]  # fmt: skip
    return [*lines, "", "![concurrency 1](c1.png)"]


def growth_section(data: dict[str, Any]) -> list[str]:
    """Notice as live attempts and the ledger grow."""
    grown = data.get("growth", {})
    if not grown:
        return []
    lines = ["", "## Growth: Notice as the work grows (SQLite, concurrency "
             f"{data['settings']['concurrency']})", "",
             "| live attempts | calls/s | p50 ms | p99 ms | resident MiB |",
             "| ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for level in grown.get("live_attempts", []):
        lines.append(f"| {level['live_attempts']:,} | {level['rps']:,.0f} | "
                     f"{level['p50_ms']:.2f} | {level['p99_ms']:.2f} | "
                     f"{level['rss_mib']:.0f} |")  # fmt: skip
    per = grown.get("kib_per_live_attempt")
    if per is not None:
        lines += [
            "",
            f"Memory per live attempt: {per:.2f} KiB of resident memory (the slope "
            "from the first level to the last, Notice's own ledger events included).",
        ]
    ledger = grown.get("ledger")
    if ledger:
        lines += ["", "| ledger | calls/s | p50 ms | p99 ms |", "| --- | ---: | ---: | ---: |"]
        for name, label in (("empty", "empty"), ("large", f"{ledger['events']:,} events")):
            entry = ledger[name]
            lines.append(f"| {label} | {entry['rps']:,.0f} | {entry['p50_ms']:.2f} | "
                         f"{entry['p99_ms']:.2f} |")  # fmt: skip
    return [*lines, "", "![growth](growth.png)"]


def _cell(value: float | None, digits: int = 0, *, latency: bool = False) -> str:
    # ghz gives no latencies for a run whose every call was refused (the store's storm).
    if value is None or (latency and value == 0):
        return "n/a"
    return f"{value:,.{digits}f}"
