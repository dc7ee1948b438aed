"""The tracing part of `make bench`: what OpenTelemetry traces cost the audited sidecar.

``actonce serve`` on SQLite (pinned as every target is), three ways, alternated round by
round in a rotated order:

- **off**: no ``OTEL_*`` variable, as the sidecar runs by default;
- **sampled 10 %**: ``OTEL_TRACES_SAMPLER=parentbased_traceidratio`` with argument 0.1;
- **sampled 100 %**: ``parentbased_always_on``.

Traced variants export OTLP over gRPC to a real receiver in the driver's process (on the
load core, as a collector would be on another machine; tests.helpers.otlp). ghz sends no
``traceparent``, so each call's span is the root of its trace and the ratio samples it.
Notice and Create at concurrency 32: calls/s and p99 of each, and the traces the receiver
got, which tell that off exports nothing and that sampling samples.
"""

from __future__ import annotations

import secrets
import statistics
from pathlib import Path
from typing import Any

from bench.measuring import Measured, Plan, measure, prepare, start_target
from tests.helpers.otlp import OtlpReceiver

SCENARIOS = ("notice", "create")
VARIANTS = ("off", "sampled-10", "sampled-100")
SAMPLERS = {
    "sampled-10": {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                   "OTEL_TRACES_SAMPLER_ARG": "0.1"},
    "sampled-100": {"OTEL_TRACES_SAMPLER": "parentbased_always_on"},
}  # fmt: skip
# The span of each call: what the receiver counts traces by.
CALL_SPANS = ("actonce.v1.RunActionsService/Notice", "actonce.v1.RunActionsService/Create")


def _environment(variant: str, receiver: OtlpReceiver) -> dict[str, str]:
    if variant == "off":
        return {}
    # The batch processor's own schedule (5 s by default), as a deployment would run it.
    env = receiver.environment()
    del env["OTEL_BSP_SCHEDULE_DELAY"]
    return {**env, **SAMPLERS[variant]}


def run(ghz: Path, plan: Plan, work: Path) -> None:
    """Each scenario on each variant, into ``plan.tracing``."""
    receiver = OtlpReceiver()
    results: dict[str, dict[str, list[Measured]]] = {}
    traces: dict[str, list[dict[str, int]]] = {}
    try:
        for round_ in range(max(1, plan.rounds)):
            shift = round_ % len(VARIANTS)
            for variant in VARIANTS[shift:] + VARIANTS[:shift]:
                receiver.clear()
                target = start_target("sqlite-audited", work, env=_environment(variant, receiver))
                calls = 0
                try:
                    env = prepare(target)
                    measure(ghz, "notice", target, env, seconds=plan.warmup_seconds)
                    for scenario in SCENARIOS:
                        env["BENCH_NONCE"] = secrets.token_hex(6)
                        result = measure(ghz, scenario, target, env, seconds=plan.seconds)
                        results.setdefault(scenario, {}).setdefault(variant, []).append(result)
                        calls += result.count
                finally:
                    target.stop()  # SIGTERM: the sidecar exports what it still holds
                traced = {s.trace_id for s in receiver.spans() if s.name in CALL_SPANS}
                traces.setdefault(variant, []).append({"calls": calls, "traces": len(traced)})
                notice = results["notice"][variant][-1]
                print(f"tracing round {round_ + 1}/{max(1, plan.rounds)} {variant:<12} "
                      f"{notice.rps:7.0f} notice/s p99 {notice.p99:.1f} ms, "
                      f"{len(traced)} traces of {calls} calls", flush=True)  # fmt: skip
    finally:
        receiver.stop()
    plan.tracing = {
        "results": {
            scenario: {variant: _summary(runs) for variant, runs in by_variant.items()}
            for scenario, by_variant in results.items()
        },
        "traces": traces,
    }


def _summary(runs: list[Measured]) -> dict[str, Any]:
    return {
        "rps": statistics.median(r.rps for r in runs),
        "p50_ms": statistics.median(r.p50 for r in runs),
        "p99_ms": statistics.median(r.p99 for r in runs),
        "errors": sum(r.not_ok for r in runs),
        "calls": sum(r.count for r in runs),
        "cpu_seconds_per_1000_calls": statistics.median(r.cpu_per_1000 for r in runs),
        "rounds": [{"rps": round(r.rps, 1), "p99_ms": round(r.p99, 3)} for r in runs],
    }


LABELS = {"off": "off", "sampled-10": "sampled at 10 %", "sampled-100": "sampled at 100 %"}


def section(data: dict[str, Any]) -> list[str]:
    """report.md's part on tracing: each variant's calls/s and p99, against off."""
    tracing = data.get("tracing") or {}
    results = tracing.get("results") or {}
    if not results:
        return []
    lines = ["", "## Tracing: what OpenTelemetry costs (SQLite, audited, concurrency "
             f"{data['settings']['concurrency']})", "",
             "Medians of alternated rounds; traced variants export OTLP/gRPC to a receiver on "
             "the load core. `/ off` is calls/s as a fraction of tracing off; CPU is the "
             "sidecar's core-seconds per 1,000 calls.", "",
             "| traces | Notice calls/s | / off | p99 ms | CPU | Create calls/s | / off | p99 ms "
             "| CPU | traces exported / calls |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    off = {s: results[s].get("off", {}).get("rps") for s in SCENARIOS if s in results}
    for variant in VARIANTS:
        cells = []
        for scenario in SCENARIOS:
            entry = results.get(scenario, {}).get(variant)
            if entry is None:
                cells += ["n/a", "", "", ""]
                continue
            base = off.get(scenario)
            ratio = f"{entry['rps'] / base:.2f}" if base else ""
            cells += [f"{entry['rps']:,.0f}", ratio, f"{entry['p99_ms']:.1f}",
                      f"{entry['cpu_seconds_per_1000_calls']:.2f}"]  # fmt: skip
        counted = tracing.get("traces", {}).get(variant, [])
        exported = sum(c["traces"] for c in counted)
        made = sum(c["calls"] for c in counted)
        cells.append(f"{exported:,} / {made:,}")
        lines.append(f"| {LABELS[variant]} | " + " | ".join(cells) + " |")
    return lines


def ratio(data: dict[str, Any], variant: str, scenario: str = "notice") -> float | None:
    """``variant``'s calls/s over tracing off's, for ``scenario``."""
    results = (data.get("tracing") or {}).get("results", {}).get(scenario, {})
    off, traced = results.get("off"), results.get(variant)
    if not off or not traced or not off["rps"]:
        return None
    return float(traced["rps"]) / float(off["rps"])


def problems(data: dict[str, Any]) -> list[str]:
    """What makes the tracing part wrong rather than slow."""
    tracing = data.get("tracing") or {}
    found = []
    for scenario, by_variant in (tracing.get("results") or {}).items():
        for variant, entry in by_variant.items():
            if entry["errors"] or not entry["calls"]:
                found.append(f"{scenario} with tracing {variant}: {entry['errors']} non-OK of "
                             f"{entry['calls']}")  # fmt: skip
    for variant, counted in (tracing.get("traces") or {}).items():
        exported = sum(c["traces"] for c in counted)
        calls = sum(c["calls"] for c in counted)
        if variant == "off" and exported:
            found.append(f"tracing off exported {exported} traces")
        if variant == "sampled-100" and exported < calls:
            found.append(f"tracing at 100 % exported {exported} traces of {calls} calls")
        if variant == "sampled-10" and calls >= 1000 and not 0.05 * calls < exported < 0.2 * calls:
            found.append(f"tracing at 10 % exported {exported} traces of {calls} calls")
    return found
