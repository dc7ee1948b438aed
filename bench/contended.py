"""The contended part of `make bench`: one call at a time beside busy cores.

A sidecar runs beside an agent whose container can keep every core busy. This part starts a
busy loop on every core (a process each, pinned, at the normal priority) and, while they
spin, measures Notice and Create one call at a time on floor1, floor3, ``actonce serve``
and the same sidecar with its writer threads under SCHED_BATCH (``bench/serve.py
--sched-batch``, bench only: what that policy would cost an answer), in alternated rounds
with the targets' order rotated. The goal is actonce's p50 against floor3's under the same
load.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.measuring import Plan, measure, prepare, start_target
from bench.processes import pin

TARGETS = ("floor1", "floor3", "sqlite-audited", "sqlite-batch")
SCENARIOS = ("notice", "create")


@contextmanager
def busy_cores() -> Iterator[int]:
    """A busy loop on every core of the machine, for as long as the block runs."""
    import os

    # Every core, not this process's affinity: the driver pins itself to the load's core.
    cores = range(os.cpu_count() or 1)
    loops = [subprocess.Popen([*pin(core), sys.executable, "-c", "while True: pass"])
             for core in cores]  # fmt: skip
    try:
        yield len(loops)
    finally:
        for loop in loops:
            loop.kill()
            loop.wait(10)


def run(ghz: Path, plan: Plan, work: Path) -> None:
    """Notice and Create at concurrency 1 on each target, every core busy."""
    targets = [t for t in TARGETS if t in plan.targets or t == "sqlite-batch"]
    with busy_cores() as cores:
        plan.contended_cores = cores
        for round_ in range(plan.c1_rounds):
            shift = round_ % len(targets)
            for name in targets[shift:] + targets[:shift]:
                target = start_target(name, work)
                try:
                    env = prepare(target)
                    measure(ghz, "notice", target, env, seconds=plan.warmup_seconds,
                            concurrency=1)  # fmt: skip
                    for scenario in SCENARIOS[round_ % 2 :] + SCENARIOS[: round_ % 2]:
                        env["BENCH_NONCE"] = secrets.token_hex(6)
                        result = measure(ghz, scenario, target, env, seconds=plan.c1_seconds,
                                         concurrency=1)  # fmt: skip
                        plan.contended.setdefault(scenario, {}).setdefault(name, []).append(result)
                finally:
                    target.stop()
                p50 = " ".join(f"{s} {plan.contended[s][name][-1].p50:.2f}" for s in SCENARIOS
                               if name in plan.contended.get(s, {}))  # fmt: skip
                print(f"contended round {round_ + 1}/{plan.c1_rounds} {name:<16} p50 ms {p50}",
                      flush=True)  # fmt: skip
