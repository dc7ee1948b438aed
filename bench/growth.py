"""The growth part of `make bench`: does a call cost the same as the work grows?

Two sizes grow while the sidecar serves (``actonce serve`` on SQLite, pinned as every
target is):

- **live attempts**: runs that began an attempt and are still live, from 1 to 100,000
  (``bench/ghz/begin.json`` begins them through the sidecar; the sidecar runs with its
  live-attempt bounds raised above the largest level, so that none is forgotten). At each
  level, Notice at concurrency 32: calls/s and p99, and the process's resident memory, whose
  slope is the memory per live attempt;
- **the ledger**: an empty ledger against one of ``growth_events`` events laid down by
  :mod:`bench.ledger_gen` before the sidecar starts (cached in bench/out/cache, copied per
  round), alternated round by round: Notice calls/s and p99 on each.
"""

from __future__ import annotations

import secrets
import shutil
import statistics
from pathlib import Path
from typing import Any

from bench import ledger_gen
from bench.measuring import Plan, measure, prepare, start_target
from bench.processes import Target

CACHE = Path(__file__).resolve().parent / "out" / "cache"


def rss_mib(pid: int) -> float:
    """Resident memory of a process, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _notice(ghz: Path, plan: Plan, target: Target, env: dict[str, str]) -> dict[str, Any]:
    env["BENCH_NONCE"] = secrets.token_hex(6)
    result = measure(ghz, "notice", target, env, seconds=plan.seconds)
    return {"rps": result.rps, "p50_ms": result.p50, "p99_ms": result.p99,
            "errors": result.not_ok, "calls": result.count}  # fmt: skip


def live_attempts(ghz: Path, plan: Plan, work: Path) -> list[dict[str, Any]]:
    """Notice with more and more live attempts, on one sidecar."""
    most = max(plan.growth_attempts)
    bounds = ["--attempt-max-count", str(most + 1_000), "--attempt-max-mib", "4096"]
    target = start_target("sqlite-audited", work, extra=bounds)
    levels: list[dict[str, Any]] = []
    try:
        env = prepare(target)  # its own run: the first live attempt
        measure(ghz, "notice", target, env, seconds=plan.warmup_seconds)
        live = 1
        for level in sorted(plan.growth_attempts):
            if level > live:
                env["BENCH_NONCE"] = secrets.token_hex(6)
                began = measure(ghz, "begin", target, env, total=level - live)
                if began.not_ok:
                    raise RuntimeError(f"BeginAttempt refused: {began.statuses}")
                live = level
            entry = {"live_attempts": live, "rss_mib": rss_mib(target.pid)}
            entry.update(_notice(ghz, plan, target, env))
            levels.append(entry)
            print(
                f"growth: {live:>7,} live attempts {entry['rps']:7.0f} notice/s "
                f"p99 {entry['p99_ms']:.1f} ms rss {entry['rss_mib']:.0f} MiB",
                flush=True,
            )
    finally:
        target.stop()
    return levels


def cached_ledger(events: int) -> Path:
    """A generated ledger of ``events`` events, made once per size and seed."""
    path = CACHE / f"ledger-{events}.db"
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        for leftover in CACHE.glob(partial.name + "*"):
            leftover.unlink()
        ledger_gen.generate(partial, events)
        partial.rename(path)
    return path


def ledger_size(ghz: Path, plan: Plan, work: Path) -> dict[str, Any]:
    """Notice on an empty ledger and on a large one, alternated round by round."""
    large = cached_ledger(plan.growth_events)
    runs: dict[str, list[dict[str, Any]]] = {"empty": [], "large": []}
    for round_ in range(max(1, plan.rounds)):
        for name in ("empty", "large") if round_ % 2 == 0 else ("large", "empty"):
            data = work / f"growth-{name}-{round_}"
            data.mkdir(parents=True)
            if name == "large":
                shutil.copyfile(large, data / "audit.db")
            target = start_target("sqlite-audited", work, data=data)
            try:
                env = prepare(target)
                measure(ghz, "notice", target, env, seconds=plan.warmup_seconds)
                runs[name].append(_notice(ghz, plan, target, env))
            finally:
                target.stop()
            shutil.rmtree(data, ignore_errors=True)
    result: dict[str, Any] = {"events": plan.growth_events}
    for name, entries in runs.items():
        result[name] = {key: statistics.median(e[key] for e in entries)
                        for key in ("rps", "p50_ms", "p99_ms")}  # fmt: skip
        result[name]["errors"] = sum(e["errors"] for e in entries)
    print(f"growth: ledger of {plan.growth_events:,} events "
          f"{result['large']['rps']:7.0f} notice/s against {result['empty']['rps']:7.0f} "
          "on an empty one", flush=True)  # fmt: skip
    return result


def run(ghz: Path, plan: Plan, work: Path) -> None:
    """Both growths, into ``plan.growth``."""
    levels = live_attempts(ghz, plan, work)
    first, last = levels[0], levels[-1]
    grown = last["live_attempts"] - first["live_attempts"]
    plan.growth["live_attempts"] = levels
    plan.growth["kib_per_live_attempt"] = (
        (last["rss_mib"] - first["rss_mib"]) * 1024 / grown if grown else None
    )
    plan.growth["ledger"] = ledger_size(ghz, plan, work)
