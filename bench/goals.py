"""The goals of the speed work, each with its verdict on a run, and what limits a missed one.

:func:`goals` measures each goal in a run's figures against its bound (a figure with no
bound is one the goals ask to be stated); a missed goal says what limits it, from the
profiles or from the run's own figures. :func:`goals_text` is the same table for a terminal.
"""

from __future__ import annotations

from typing import Any

from bench import tracing_bench
from bench.figures import _get, _ratio, c1_added, c1_ratio, peer_rows

# What limits each family of goals when one is missed: what the profiles in the report's
# folder show (profile-*.txt), written from them. Keyed by the goal's family.
LIMITS = {
    "c1": "a write's three commits one after another (its intent, the store's, its outcome: see "
    "the disk's fsync under the concurrency-1 table), each a hand-off to a thread and back that "
    "waits for the scheduler on a shared core, and the event loop's own work per write "
    "(gRPC's server path and the write's phases in Python): see profile-c1-notice.txt",
    "saturation": "one core of Python: the interpreter runs the gRPC server, the write's "
    "phases and both commits' threads, one at a time; see profile-saturated-notice.txt",
    "cpu": "CPU per write in the interpreter (gRPC's server path, the write's phases, the two "
    "commits); see profile-saturated-notice.txt",
    "half": "a commit's sync: the p99 is a call that waits for a batch and then its own",
    "postgres": "round trips to PostgreSQL: an append waits for its commit's round trip",
    "growth": "the run's noise, or the ledger's indexes growing with it (each insert updates "
    "four B-trees): more rounds (--rounds) tell them apart",
    "tracing": "the spans made for a sampled call and their export, on the same core",
    "earlier": "see the saturation goals' profile",
    "floor1": "a write's three commits one after another (the embedded store in a file of its "
    "own) and its Python: see the concurrency-1 table and profile-c1-notice.txt",
    "floor3": "the write path's Python and its hand-offs to the commit threads beyond the "
    "three commits themselves: see profile-c1-notice.txt",
    "contended": "each hand-off to a writer thread and back waits for the scheduler beside "
    "the busy loops; the SCHED_BATCH row shows what a batch policy adds to each: see "
    "profile-c1-notice.txt for the hand-offs",
    "floor-saturation": "one core of Python: gRPC's server path, the write's phases and the "
    "commits' threads, one at a time; see profile-saturated-notice.txt",
    "postgres-notice": "a notice's store call on PostgreSQL locks its thread's row: notices "
    "to one thread commit one after another",
    "peers": "see the peers' table",
}


def c1_limit(data: dict[str, Any], scenario: str, key: str) -> str:
    """What limits ``scenario`` at concurrency 1, with this run's own figures: what the
    store alone adds, what the sidecar adds with no audit at all, and the disk's sync that
    each of the audit's two commits adds to that."""
    unaudited = c1_added(data, scenario, "sqlite-unaudited", key)
    fsync = (data.get("fsync_ms") or {}).get(key[:3])
    if unaudited is None or fsync is None:
        return LIMITS["c1"]
    alone = c1_added(data, scenario, "store", key)
    store = "" if alone is None else (
        f"the store alone, called directly, adds {alone:.2f} ms to its own Health/Check; "
    )  # fmt: skip
    return store + (
        f"the same sidecar with no audit at all (a ledger that keeps nothing, bench only) "
        f"already adds {unaudited:.2f} ms here: gRPC's server path, the write's phases in "
        "Python and the store's one commit; the audit adds its intent's and its outcome's "
        f"commits one after another, each a sync ({fsync:.2f} ms at {key[:3]} on this disk) and a "
        "hand-off to the ledger's thread and back: see profile-c1-notice.txt"
    )


def floor_limit(data: dict[str, Any], scenario: str, target: str, floor: str) -> str:
    """What keeps ``target`` above ``floor`` at concurrency 1, in this run's own figures."""
    c1 = data.get("c1", {}).get(scenario, {})
    if target not in c1 or floor not in c1:
        return LIMITS["floor1"]
    over = float(c1[target]["p50_ms"]) - float(c1[floor]["p50_ms"])
    parts = [f"{over:+.2f} ms over {floor} at p50"]
    # The same sidecar on the same backend with no audit at all: what its store alone costs.
    backend = target.partition("-")[0]
    unaudited = c1.get(f"{backend}-unaudited")
    if unaudited is not None:
        on = " on PostgreSQL" if backend == "postgres" else ""
        parts.append(f"the sidecar{on} with no audit at all (its store's one commit) is at "
                     f"{float(unaudited['p50_ms']):.2f} ms, "
                     f"{float(unaudited['p50_ms']) - float(c1[floor]['p50_ms']):+.2f} over "
                     f"{floor}")  # fmt: skip
    disk = (data.get("fsync_ms") or {}).get("p50")
    if disk is not None:
        parts.append(f"a 4 KiB fsync takes {disk:.2f} ms here")
    return "; ".join(parts) + ": see profile-c1-notice.txt"


# The peers' table's columns: the row's key, its title, and whether less is better.
PEER_COLUMNS = (
    ("p50_ms", "p50 ms", True),
    ("p99_ms", "p99 ms", True),
    ("rps", "writes/s at c=32", False),
    ("cpu_ms_per_write", "CPU ms/write", True),
    ("rss_idle_mib", "RSS idle MiB", True),
    ("rss_load_mib", "RSS load MiB", True),
    ("cold_start_s", "cold start s", True),
)
PEER_SYSTEMS = ("restate/create", "dbos-sqlite/create", "dbos-postgres/create")


def goals(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Each goal of the speed work: what was measured, the bound, and whether it was met."""
    rows: list[dict[str, Any]] = []

    def add(family: str, goal: str, value: float | None, bound: float | None, *,
            at_most: bool = False, unit: str = "", limit: str = "") -> None:  # fmt: skip
        if value is None:
            return
        if bound is None:  # a figure the goals ask to be measured and stated
            rows.append({"family": family, "goal": goal, "value": round(value, 3),
                         "bound": None, "at_most": at_most, "met": True, "unit": unit,
                         "miss": ""})  # fmt: skip
            return
        met = value <= bound if at_most else value >= bound
        miss = "" if met else (
            f"{value - bound:+.2f}{unit} over" if at_most else f"{bound / value:.2f}x short"
            if value else "no answers"
        )  # fmt: skip
        rows.append({"family": family, "goal": goal, "value": round(value, 3), "bound": bound,
                     "at_most": at_most, "met": met, "unit": unit, "miss": miss,
                     "limit": limit or LIMITS[family]})  # fmt: skip

    for scenario in ("notice", "create"):
        name = scenario.capitalize()
        add("contended", f"beside busy cores, concurrency 1: actonce {name} p50 / floor3's",
            c1_ratio(data, "contended", scenario, "sqlite-audited", "floor3"), 2.0,
            at_most=True)  # fmt: skip
        add(
            "contended",
            f"beside busy cores: {name} p50 with the writers under SCHED_BATCH / "
            "without (bench only: what the batch policy would cost)",
            c1_ratio(data, "contended", scenario, "sqlite-batch", "sqlite-audited"),
            None,
        )
        add("floor1", f"embedded default, concurrency 1: audited {name} p50 / floor1's",
            c1_ratio(data, "c1", scenario, "sqlite-audited", "floor1"), 1.5, at_most=True,
            limit=floor_limit(data, scenario, "sqlite-audited", "floor1"))  # fmt: skip
        for target, what in (("sqlite-twofiles", "a data folder of two files (three commits)"),
                             ("postgres-audited", "PostgreSQL")):  # fmt: skip
            add("floor3", f"{what}, concurrency 1: audited {name} p50 / floor3's",
                c1_ratio(data, "c1", scenario, target, "floor3"), 1.3, at_most=True,
                limit=floor_limit(data, scenario, target, "floor3"))  # fmt: skip
        add("floor-saturation", f"sqlite, concurrency 32: audited {name} writes/s / floor1's",
            _ratio(_get(data, scenario, "sqlite-audited", "rps"),
                   _get(data, scenario, "floor1", "rps")), 0.8)  # fmt: skip
    add("postgres-notice", "postgres: audited Notice writes/s / Create's",
        _ratio(_get(data, "notice", "postgres-audited", "rps"),
               _get(data, "create", "postgres-audited", "rps")), 0.9)  # fmt: skip
    actonce = peer_rows(data).get("sqlite-audited/create")
    peers = [peer_rows(data)[k] for k in PEER_SYSTEMS if k in peer_rows(data)]
    if actonce is not None and peers:
        for key, title, lower in PEER_COLUMNS:
            best = (min if lower else max)(float(p[key]) for p in peers)
            add("peers", f"peers: actonce's {title} / the best peer's", _ratio(
                float(actonce[key]), best), 1.0, at_most=lower)  # fmt: skip
    floor = _get(data, "health", "floor", "rps")
    add("saturation", "sqlite: audited Notice calls/s / Health/Check calls/s",
        _ratio(_get(data, "notice", "sqlite-audited", "rps"), floor), 0.5)  # fmt: skip
    floor_cpu = _get(data, "health", "floor", "cpu_seconds_per_1000_calls")
    for scenario in ("notice", "create", "edit", "storm"):
        cpu = _get(data, scenario, "sqlite-audited", "cpu_seconds_per_1000_calls")
        add("cpu", f"sqlite: sidecar CPU core-ms per write, {scenario}", cpu, 0.6,
            at_most=True)  # fmt: skip
        add("cpu", f"sqlite: CPU per write / per Health/Check, {scenario}",
            _ratio(cpu, floor_cpu), 1.6, at_most=True)  # fmt: skip
    add("cpu", "sqlite: CPU per edit / per notice",
        _ratio(_get(data, "edit", "sqlite-audited", "cpu_seconds_per_1000_calls"),
               _get(data, "notice", "sqlite-audited", "cpu_seconds_per_1000_calls")), 1.5,
        at_most=True)  # fmt: skip
    half = data.get("half_rate", {}).get("targets", {})
    if "store" in half and "sqlite-audited" in half:
        added = float(half["sqlite-audited"]["p99_ms"]) - float(half["store"]["p99_ms"])
        add("half", f"sqlite: p99 over the store alone at {data['half_rate']['rate']} Notice/s "
            "(half the saturating rate)", added, 5.0, at_most=True, unit=" ms")  # fmt: skip
        errors = sum(int(t["errors"]) for t in half.values())
        add("half", "non-OK answers below saturation (half rate, sidecar and store)", errors, 0,
            at_most=True)  # fmt: skip
    add("postgres", "postgres: audited Notice calls/s / Health/Check calls/s",
        _ratio(_get(data, "notice", "postgres-audited", "rps"), floor), 0.35)  # fmt: skip
    for scenario in ("notice", "create", "storm", "edit", "read"):
        add("postgres", f"postgres: audited / unaudited calls/s, {scenario}",
            _ratio(_get(data, scenario, "postgres-audited", "rps"),
                   _get(data, scenario, "postgres-unaudited", "rps")), 0.8)  # fmt: skip
    statements = data.get("ledger_statements", {}).get("postgres")
    if statements:
        add("postgres", "postgres: statements (round trips) per ledger batch of 1,200 events / "
            "of 6 (fencing and group commit per batch)",
            _ratio(statements["1200"], statements["6"]), 1.0, at_most=True)  # fmt: skip
    grown = data.get("growth", {})
    levels = grown.get("live_attempts") or []
    if len(levels) > 1:
        first, last = levels[0], levels[-1]
        span = f"{first['live_attempts']:,} to {last['live_attempts']:,} live attempts"
        add("growth", f"Notice calls/s, {span} (last / first)",
            _ratio(last["rps"], first["rps"]), 0.9)  # fmt: skip
        add("growth", f"Notice p99, {span} (last / first)",
            _ratio(last["p99_ms"], first["p99_ms"]), 1.1, at_most=True)  # fmt: skip
        add("growth", "sidecar memory per live attempt (KiB of resident memory, measured)",
            grown.get("kib_per_live_attempt"), None, unit=" KiB")  # fmt: skip
    ledger = grown.get("ledger")
    if ledger:
        span = f"a ledger of {ledger['events']:,} events / an empty one"
        add("growth", f"Notice calls/s, {span}",
            _ratio(ledger["large"]["rps"], ledger["empty"]["rps"]), 0.9)  # fmt: skip
        add("growth", f"Notice p99, {span}",
            _ratio(ledger["large"]["p99_ms"], ledger["empty"]["p99_ms"]), 1.1,
            at_most=True)  # fmt: skip
    for scenario in tracing_bench.SCENARIOS:
        add("tracing", f"sqlite: {scenario.capitalize()} calls/s, traces sampled at 10 % / off",
            tracing_bench.ratio(data, "sampled-10", scenario), 0.9)  # fmt: skip
        add("tracing", f"sqlite: {scenario.capitalize()} calls/s, traces sampled at 100 % / off",
            tracing_bench.ratio(data, "sampled-100", scenario), None)  # fmt: skip
    # The goals of the earlier load test, kept so that they cannot slip back unseen.
    for scenario in ("notice", "create", "edit"):
        for key, bound in (("p50_ms", 1.0), ("p99_ms", 2.0)):
            add("c1", f"sqlite, concurrency 1: audited {scenario.capitalize()} adds to "
                f"Health/Check's {key[:3]}", c1_added(data, scenario, "sqlite-audited", key),
                bound, at_most=True, unit=" ms", limit=c1_limit(data, scenario, key))  # fmt: skip
    for scenario in ("notice", "create", "edit"):
        add("earlier", f"sqlite: audited / unaudited calls/s, {scenario}",
            _ratio(_get(data, scenario, "sqlite-audited", "rps"),
                   _get(data, scenario, "sqlite-unaudited", "rps")), 0.8)  # fmt: skip
    for backend, store in (("sqlite", "store"), ("postgres", "store-postgres")):
        for scenario in ("notice", "create", "storm", "read"):
            add("earlier", f"{backend}: sidecar + store / store alone calls/s, {scenario}",
                _ratio(_get(data, scenario, f"{backend}-audited", "rps"),
                       _get(data, scenario, store, "rps")), 0.5)  # fmt: skip
    return rows


def _bound(row: dict[str, Any]) -> str:
    if row["bound"] is None:
        return "stated"
    return f"{'≤' if row['at_most'] else '≥'} {row['bound']:g}{row['unit']}"


def _verdict(row: dict[str, Any]) -> str:
    if row["bound"] is None:
        return "measured"
    return "yes" if row["met"] else f"**no** ({row['miss']}; limited by {row['limit']})"


def goals_text(data: dict[str, Any]) -> str:
    """The goals as a plain table for the terminal: goal, measured, bound, met."""
    rows = goals(data)
    width = max((len(r["goal"]) for r in rows), default=10)
    lines = [f"{'goal':<{width}}  {'measured':>12}  {'bound':>12}  met"]
    for row in rows:
        measured = f"{row['value']:.2f}{row['unit']}"
        verdict = _verdict(row).replace("**", "")
        lines.append(f"{row['goal']:<{width}}  {measured:>12}  {_bound(row):>12}  {verdict}")
    return "\n".join(lines)
