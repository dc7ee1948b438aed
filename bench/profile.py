"""Profile a sidecar under ghz load with py-spy, and summarize where its time goes.

py-spy samples the running process from outside (no change to the code under test) and
writes collapsed stacks; this module starts a bench sidecar, drives one scenario with
ghz, records, and prints per thread the functions with the most samples, both on their
own (self) and with what they call (inclusive). Run: ``make bench-profile`` or
``python -m bench.profile --scenario notice``; ``summarize(path)`` reads a saved profile.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench import measuring, processes
from bench.processes import LOAD_CORE, pin

OUT = processes.OUT


@dataclass
class ThreadProfile:
    """Samples of one thread: in total, per function on its own, and per function inclusive."""

    samples: int = 0
    own: collections.Counter[str] = field(default_factory=collections.Counter)
    inclusive: collections.Counter[str] = field(default_factory=collections.Counter)


def parse(lines: list[str]) -> dict[str, ThreadProfile]:
    """Collapsed stacks (``frame;frame;... count``, the first frame naming the thread)."""
    threads: dict[str, ThreadProfile] = collections.defaultdict(ThreadProfile)
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        thread = threads[_thread_name(frames[0])]
        n = int(count)
        thread.samples += n
        calls = [_short(frame) for frame in frames[1:]]
        if calls:
            thread.own[calls[-1]] += n
        for name in set(calls):
            thread.inclusive[name] += n
    return dict(threads)


def _thread_name(frame: str) -> str:
    # "thread (123): asyncio_4" -> "asyncio_*": a pool's workers are one kind of thread.
    name = frame.partition(": ")[2] or frame
    return name.rstrip("0123456789") + "*" if name[-1:].isdigit() else name


def _short(frame: str) -> str:
    # "function (path/to/module.py:123)" -> "function (module.py)": lines split one
    # function into many rows, which hides where the time goes.
    name, _, where = frame.partition(" (")
    module = where.rstrip(")").rsplit(":", 1)[0].rsplit("/", 1)[-1]
    return f"{name} ({module})" if module else name


def summarize(path: Path, top: int = 25) -> str:
    """A readable summary of a collapsed-stack profile."""
    threads = parse(path.read_text().splitlines())
    total = sum(t.samples for t in threads.values()) or 1
    out: list[str] = []
    for name, thread in sorted(threads.items(), key=lambda kv: -kv[1].samples):
        if thread.samples < total * 0.02:
            continue
        out.append(f"## {name}: {thread.samples} samples ({100 * thread.samples / total:.0f}%)")
        out.append("  self:")
        for fn, n in thread.own.most_common(top):
            out.append(f"    {100 * n / thread.samples:5.1f}%  {fn}")
        out.append("  inclusive:")
        for fn, n in thread.inclusive.most_common(top):
            out.append(f"    {100 * n / thread.samples:5.1f}%  {fn}")
    return "\n".join(out)


# What `make bench` profiles for its report: (name, scenario, concurrency).
REPORT_PROFILES = (("c1-notice", "notice", 1), ("saturated-notice", "notice", 32))


def for_report(ghz: Path, plan: measuring.Plan, work: Path) -> None:
    """cProfile the audited SQLite sidecar under Notice, one call at a time and saturated:
    ``profile-*.pstats`` and their text summaries in the report's folder."""
    for name, scenario, concurrency in REPORT_PROFILES:
        stats = plan.out / f"profile-{name}.pstats"
        target = measuring.start_target("sqlite-profiled", work, extra=["--cprofile", str(stats)])
        try:
            env = measuring.prepare(target)
            measuring.measure(ghz, scenario, target, env, seconds=plan.warmup_seconds,
                        concurrency=concurrency)  # fmt: skip
            measuring.measure(ghz, scenario, target, env, seconds=plan.c1_seconds,
                        concurrency=concurrency)  # fmt: skip
        finally:
            target.stop()
        if stats.exists():
            plan.profiles[name] = stats.with_suffix(".txt").name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", default="notice", choices=sorted(measuring.SIDECAR_SCENARIOS))
    parser.add_argument("--target", default="sqlite-audited", choices=measuring.SIDECAR_TARGETS)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument(
        "--wall",
        action="store_true",
        help="sample every thread, waiting ones included (default: only the thread holding "
        "the interpreter lock, which is where the CPU goes)",
    )
    parser.add_argument("--summary", type=Path, help="summarize this saved profile and exit")
    args = parser.parse_args()
    if args.summary:
        print(summarize(args.summary))
        return
    ghz = processes.ghz_binary()
    py_spy = Path(sys.executable).with_name("py-spy")
    OUT.mkdir(parents=True, exist_ok=True)
    raw = OUT / f"profile-{args.target}-{args.scenario}.txt"
    with tempfile.TemporaryDirectory() as tmp:
        target = measuring.start_target(args.target, Path(tmp))
        try:
            env = measuring.prepare(target)
            load = subprocess.Popen(
                measuring.ghz_command(ghz, args.scenario, target, seconds=args.seconds + 2),
                env={**os.environ, **env},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(1.0)  # past the start: connections up, caches warm
            subprocess.run(
                [*pin(LOAD_CORE), str(py_spy), "record", "--pid", str(target.pid),
                 "--duration", str(int(args.seconds)), "--rate", str(args.rate),
                 "--format", "raw", "--threads", "--output", str(raw),
                 *([] if args.wall else ["--gil"])],
                check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            load.wait(60)
        finally:
            target.stop()
    print(f"profile: {raw.relative_to(processes.ROOT)}")
    print(summarize(raw))


if __name__ == "__main__":
    main()
