"""A sidecar for benchmarks: `actonce serve`'s settings, plus `--unaudited`.

`--unaudited` swaps the ledger for one that persists nothing, to measure what
audit costs. It exists only in this benchmark script: the `actonce` command
has no such switch, so no production deployment can turn audit off.

`--cprofile PATH` runs the sidecar under cProfile, every thread of its own (the event
loop, the ledger's writer, the store's batch thread) with a profiler apiece, and writes
their merged statistics to PATH (pstats) when it stops, with a text summary beside it.

`--sched-batch` puts the sidecar's writer threads (the ledger's, the embedded store's) under
SCHED_BATCH, as `actonce serve` did before they kept the kernel's normal policy: the bench's
contended part measures what that policy costs an answer beside busy cores. Bench only.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import os
import pstats
import signal
import threading
from pathlib import Path

from sidecar.assembly.server import create_server
from sidecar.config import Config
from sidecar.ledger.base import AuditEvent, StoredEvent
from sidecar.ops import logs


class NullLedger:
    """Acknowledges every event at once and keeps none."""

    def __init__(self) -> None:
        self._seq = 0

    async def append(self, event: AuditEvent) -> int:
        self._seq += 1
        return self._seq

    async def events_for(self, derived_id: str) -> list[StoredEvent]:
        return []

    async def first_attempt(self, run_id: str, scope: str) -> AuditEvent | None:
        return None

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        return None


# The threads a write's answer waits for: the ledger's writer, the embedded store's batches.
WRITER_THREADS = ("ledger-writer", "store-batches")


def batch_writers() -> list[str]:
    """Put the writer threads under SCHED_BATCH; the names of those it moved."""
    moved = []
    for thread in threading.enumerate():
        if thread.name in WRITER_THREADS and thread.native_id is not None:
            os.sched_setscheduler(thread.native_id, os.SCHED_BATCH, os.sched_param(0))
            moved.append(thread.name)
    return moved


class ThreadProfiles:
    """A cProfile profiler per thread, started from now on, and one for the caller's."""

    def __init__(self) -> None:
        self.profiles: list[tuple[str, cProfile.Profile]] = []
        original = threading.Thread.run
        profiles = self.profiles

        def run(thread: threading.Thread) -> None:
            profile = cProfile.Profile()
            profiles.append((thread.name, profile))
            profile.enable()
            try:
                original(thread)
            finally:
                profile.disable()

        threading.Thread.run = run  # type: ignore[method-assign,assignment]
        self.main = cProfile.Profile()
        self.profiles.append(("event loop", self.main))
        self.main.enable()

    def write(self, path: Path) -> None:
        self.main.disable()
        merged = pstats.Stats(self.main)
        loop_only = io.StringIO()
        pstats.Stats(self.main, stream=loop_only).sort_stats("cumulative").print_stats(40)
        for _, profile in self.profiles[1:]:
            if profile.getstats():
                merged.add(profile)
        merged.dump_stats(path)
        text = io.StringIO()
        merged.stream = text  # type: ignore[attr-defined]
        merged.sort_stats("tottime").print_stats(40)
        path.with_suffix(".txt").write_text(
            "# Every thread, by own time\n"
            + text.getvalue()
            + "\n# The event loop's thread, by cumulative time\n"
            + loop_only.getvalue()
        )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--listen", required=True)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--audit-dsn")
    parser.add_argument("--store-dsn")
    parser.add_argument("--store-target")
    parser.add_argument("--unaudited", action="store_true")
    parser.add_argument("--log-level", default="warning")
    parser.add_argument(
        "--sched-batch",
        action="store_true",
        help="writer threads under SCHED_BATCH (what it costs beside busy cores)",
    )
    parser.add_argument("--cprofile", type=Path, help="profile every thread; stats to this file")
    args = parser.parse_args()
    profiles = ThreadProfiles() if args.cprofile else None
    logs.configure(args.log_level, "json")
    config = Config(
        listen=args.listen,
        data_dir=args.data_dir,
        audit_dsn=args.audit_dsn,
        store_dsn=args.store_dsn,
        store_target=args.store_target,
        send_allowlist=frozenset({"bench"}),
    )
    sidecar, _ = await create_server(config, ledger=NullLedger() if args.unaudited else None)
    await sidecar.start()
    if args.sched_batch and not batch_writers():
        raise SystemExit("--sched-batch: no writer thread to move")
    gc.freeze()  # as `actonce serve` does
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    await sidecar.stop(1.0)
    if profiles is not None:
        profiles.write(args.cprofile)


if __name__ == "__main__":
    asyncio.run(main())
