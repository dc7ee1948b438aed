"""A generator of large ledgers: valid, chained events written straight into a ledger file.

It lays events down with the ledger's own code (``sql.chain``: the same numbering, hash
chain and rows the sidecar writes) in large transactions with no sync, which is what makes
millions of events take seconds rather than hours: runs of a few attempts each, writes as
intent and outcome, retries that find their writes already applied, steps, a few steps in
doubt. ``actonce audit verify`` passes on what it writes.

    .venv/bin/python -m bench.ledger_gen /tmp/audit.db 1000000
"""

from __future__ import annotations

import argparse
import random
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sidecar.ledger import schema, sql
from sidecar.ledger.base import GENESIS_HASH, AuditEvent, Phase
from sidecar.ledger.sqlite import connect

RULES = ("triage", "billing", "pager", "digest")
_INSERT = (
    f"INSERT INTO audit_events ({schema.COLUMNS}) "
    f"VALUES ({', '.join('?' * len(schema.COLUMNS.split(',')))})"
)
# Events per transaction: large enough that commits cost nothing, small enough to stream.
BATCH = 20_000


class _Clock:
    """Event times a few milliseconds apart, from ``days`` ago: chain() stamps now()."""

    def __init__(self, rng: random.Random, days: float) -> None:
        self.rng = rng
        self.at = datetime.now(UTC) - timedelta(days=days)

    def __call__(self) -> str:
        self.at += timedelta(microseconds=self.rng.randint(300, 9000))
        return self.at.isoformat(timespec="microseconds")


def run_events(n: int, rng: random.Random) -> list[AuditEvent]:
    """The events of run number ``n``: one or two attempts, their writes, maybe a step."""
    run_id = f"run-{n:08d}"
    rule = RULES[n % len(RULES)]
    events: list[AuditEvent] = []
    writes = [(f"art_{n:08d}_{w}", "Create", "create") for w in range(rng.randint(2, 5))]
    writes.append((f"ntc_{n:08d}", "Notice", "notice"))
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
        in_doubt = n % 400 == 7  # a few steps stay in doubt: what needs a person
        if a == 1 and (in_doubt or rng.random() < 0.2):
            step: dict[str, Any] = dict(
                rpc="BeginStep",
                write_type="step",
                derived_id=f"stp_{n:08d}",
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
                        derived_id=f"stp_{n:08d}",
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


def generate(path: Path, count: int, seed: int = 7, *, days: float = 1.0) -> int:
    """Write a ledger of at least ``count`` valid chained events to ``path`` (a new file,
    or one the generator wrote: it goes on from the chain's head)."""
    rng = random.Random(seed)
    conn = connect(path, busy_timeout_ms=5000)
    conn.execute("PRAGMA synchronous = OFF")  # a generator, not a ledger in service
    original = sql.now
    sql.now = _Clock(rng, days)  # chain() stamps each event; give them a spread
    try:
        seq, head = conn.execute("SELECT seq, hash FROM audit_chains WHERE chain = 0").fetchone()
        seq, head = int(seq), str(head or GENESIS_HASH)
        written, n = 0, seq  # run numbers go on past those of an earlier call
        while written < count:
            batch: list[AuditEvent] = []
            while len(batch) < BATCH and written + len(batch) < count:
                batch.extend(run_events(n, rng))
                n += 1
            chained = sql.chain(batch, seq, head, {})
            conn.execute("BEGIN")
            conn.executemany(_INSERT, chained.rows)
            conn.executemany(
                "INSERT INTO audit_runs (run_id, attempt_id) VALUES (?, ?) ON CONFLICT (run_id) "
                "DO UPDATE SET attempt_id = excluded.attempt_id",
                chained.begun,
            )
            conn.execute(
                "UPDATE audit_chains SET seq = ?, hash = ? WHERE chain = 0",
                (chained.seq, chained.head),
            )
            conn.execute("COMMIT")
            seq, head, written = chained.seq, chained.head, written + len(chained.rows)
    finally:
        sql.now = original
        conn.close()
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", type=Path, help="the ledger file (audit.db) to write")
    parser.add_argument("events", type=int)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    started = time.perf_counter()
    written = generate(args.path, args.events, args.seed)
    print(f"{written:,} chained events in {time.perf_counter() - started:.1f} s: {args.path}")


if __name__ == "__main__":
    main()
