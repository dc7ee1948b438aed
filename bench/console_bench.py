"""The console over a large ledger: runs-page and run-page latency (`make bench-console`).

bench.ledger_gen lays down a ledger of valid, chained events in seconds (the same
chain() and rows the sidecar writes, in large transactions): runs of a few
attempts each, writes as intent and outcome, retries that find their writes
already applied, steps, a few steps in doubt. Then ``actonce console`` serves
it as an operator runs it, and this process asks for pages over HTTP and
prints median and 95th-percentile latencies. Not a timed test: figures only.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.ledger_gen import generate
from sidecar.ledger.operator import open_operator_ledger
from tests.harness import free_port


def _get(url: str) -> float:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as answer:
        answer.read()
        assert answer.status == 200, answer.status
    return time.perf_counter() - started


def _wait(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("the console exited")
        try:
            _get(url)
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("the console never answered")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "audit.db"
        started = time.perf_counter()
        written = generate(path, args.events)
        print(
            f"generated {written:,} chained events in {time.perf_counter() - started:.1f}s "
            f"({path.stat().st_size / 1e6:.0f} MB)"
        )
        port = free_port()
        console = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sidecar.cli",
                "console",
                "--listen",
                f"127.0.0.1:{port}",
                "--audit-db",
                str(path),
                "--log-level",
                "warning",
            ],
        )
        try:
            base = f"http://127.0.0.1:{port}"
            _wait(f"{base}/api/status", console)
            # The chain is verified in the console's background: measure after it.
            while b'"intact"' not in urllib.request.urlopen(f"{base}/api/status").read():
                time.sleep(0.2)
            conn = sqlite3.connect(path)
            middle = conn.execute(
                "SELECT run_id FROM audit_runs ORDER BY run_id LIMIT 1 OFFSET "
                "(SELECT COUNT(*) / 2 FROM audit_runs)"
            ).fetchone()[0]
            conn.close()
            pages = {
                "runs page (/)": "/",
                "runs page, 40th page": "/?offset=2000",
                "runs filtered (rule, outcome)": "/?rule=billing&outcome=already_applied",
                "runs needing a person": "/?pending=1",
                "one run (/runs/ID)": f"/runs/{middle}",
                "pending (/pending)": "/pending",
                "runs JSON (/api/runs)": "/api/runs",
            }
            ledger = open_operator_ledger(path, None, read_only=True)
            started = time.perf_counter()
            items = ledger.pending()
            took = time.perf_counter() - started
            ledger.close()
            print(
                f"{len(items)} items pending; found over the whole ledger in {took * 1000:.0f}ms "
                "(once, at the console's first page and the gauge's first scrape; then only "
                "the ids of new events are looked at)"
            )
            print(f"{'page':<32} {'median':>9} {'p95':>9}   ({args.requests} requests each)")
            for name, path_ in pages.items():
                _get(base + path_)  # warm
                times = sorted(_get(base + path_) for _ in range(args.requests))
                p95 = times[min(len(times) - 1, int(len(times) * 0.95))]
                print(f"{name:<32} {statistics.median(times) * 1000:>7.1f}ms {p95 * 1000:>7.1f}ms")
        finally:
            console.terminate()
            console.wait(10)


if __name__ == "__main__":
    main()
