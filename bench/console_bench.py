"""The console over a large ledger: runs-page and run-page latency (`make bench-console`).

A generator lays down a ledger of valid, chained events in seconds (the same
chain() and rows the sidecar writes, in large transactions): runs of a few
attempts each, writes as intent and outcome, retries that find their writes
already applied, steps, a few steps in doubt. Then ``actonce console`` serves
it as an operator runs it, and this process asks for pages over HTTP and
prints median and 95th-percentile latencies. Not a timed test: figures only.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sidecar.ledger import schema
from sidecar.ledger.base import GENESIS_HASH, AuditEvent, Phase
from sidecar.ledger.operator import open_operator_ledger
from sidecar.ledger.sqlite import connect
from tests.harness import free_port

RULES = ("triage", "billing", "pager", "digest")
_INSERT = f"INSERT INTO audit_events ({schema.COLUMNS}) VALUES ({', '.join('?' * 19)})"


class _Clock:
    """Event times a few milliseconds apart, from a day ago: chain() stamps now()."""

    def __init__(self) -> None:
        self.at = datetime.now(UTC) - timedelta(days=1)

    def __call__(self) -> str:
        self.at += timedelta(microseconds=random.randint(300, 9000))
        return self.at.isoformat(timespec="microseconds")


def _run_events(n: int, rng: random.Random) -> list[AuditEvent]:
    run_id = f"run-{n:06d}"
    rule = RULES[n % len(RULES)]
    events: list[AuditEvent] = []
    writes = [(f"art_{n:06d}_{w}", "Create", "create") for w in range(rng.randint(2, 5))]
    writes.append((f"ntc_{n:06d}", "Notice", "notice"))
    attempts = 2 if rng.random() < 0.3 else 1
    for a in range(1, attempts + 1):
        attempt = f"{run_id}.a{a}"
        base: dict[str, Any] = {
            "run_id": run_id,
            "attempt_id": attempt,
            "rule": rule,
            "checkpoint": "cp-0",
        }
        events.append(AuditEvent(rpc="BeginAttempt", phase=Phase.ATTEMPT_BEGIN, **base))
        outcome = "OUTCOME_APPLIED" if a == 1 else "OUTCOME_ALREADY_APPLIED"
        for derived, rpc, write_type in writes:
            common: dict[str, Any] = dict(
                rpc=rpc,
                write_type=write_type,
                derived_id=derived,
                occurrence=0,
                digest=f"{rng.getrandbits(256):064x}",
                **base,
            )
            events.append(AuditEvent(phase=Phase.INTENT, **common))
            events.append(AuditEvent(phase=Phase.OUTCOME, outcome=outcome, **common))
        in_doubt = n % 400 == 7  # a few steps stay in doubt: the pages that need a person
        if a == 1 and (in_doubt or rng.random() < 0.2):
            step: dict[str, Any] = dict(
                rpc="BeginStep",
                write_type="step",
                derived_id=f"stp_{n:06d}",
                occurrence=0,
                digest="0" * 64,
                detail={"tool": "charge_card", "effect": "NON_IDEMPOTENT_WRITE"},
                **base,
            )
            events.append(AuditEvent(phase=Phase.STEP_BEGIN, **step))
            events.append(AuditEvent(phase=Phase.OUTCOME, outcome="OUTCOME_APPLIED", **step))
            if not in_doubt:
                events.append(
                    AuditEvent(
                        rpc="EndStep",
                        phase=Phase.STEP_END,
                        write_type="step",
                        derived_id=f"stp_{n:06d}",
                        occurrence=0,
                        digest="1" * 64,
                        detail={"tool": "charge_card", "result_json": '{"ok":true}'},
                        **base,
                    )
                )
        events.append(
            AuditEvent(
                rpc="EndAttempt",
                phase=Phase.ATTEMPT_END,
                detail={
                    "applied": len(writes) if a == 1 else 0,
                    "already_applied": 0 if a == 1 else len(writes),
                    "skipped": 0,
                    "failed": 0,
                },
                **base,
            )
        )
    return events


def generate(path: Path, count: int, seed: int = 7) -> int:
    """Write a ledger of at least ``count`` valid chained events to ``path``."""
    rng = random.Random(seed)
    conn = connect(path, busy_timeout_ms=5000)
    conn.execute("PRAGMA synchronous = OFF")  # a generator, not a ledger in service
    clock = _Clock()
    original = schema.now
    schema.now = clock  # chain() stamps each event; give them a day's spread
    try:
        seq, head, written, n = 0, GENESIS_HASH, 0, 0
        while written < count:
            batch: list[AuditEvent] = []
            while len(batch) < 5000 and written + len(batch) < count:
                batch.extend(_run_events(n, rng))
                n += 1
            chained = schema.chain(batch, seq, head, {})
            conn.execute("BEGIN")
            conn.executemany(_INSERT, chained.rows)
            conn.executemany(
                "INSERT INTO audit_runs (run_id, attempt_id) VALUES (?, ?) ON CONFLICT (run_id) "
                "DO UPDATE SET attempt_id = excluded.attempt_id",
                chained.begun,
            )
            conn.execute(
                "UPDATE audit_head SET seq = ?, hash = ? WHERE id = 1", (chained.seq, chained.head)
            )
            conn.execute("COMMIT")
            seq, head, written = chained.seq, chained.head, written + len(chained.rows)
    finally:
        schema.now = original
        conn.close()
    return written


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
