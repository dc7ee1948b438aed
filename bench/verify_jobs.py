"""`actonce audit verify` of a PostgreSQL ledger of many chains, one worker beside several.

It lays down a ledger of ``events`` events (bench.ledger_gen's runs) over ``chains`` chains
with the ledger's own append, then verifies it with ``--jobs 1`` and ``--jobs N`` alternately,
``rounds`` times each, in one run, and prints each time and the ratio of the medians.

    .venv/bin/python -m bench.verify_jobs 200000 --chains 128 --jobs 4
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import psycopg

from bench.ledger_gen import run_events
from sidecar.ledger import inspect
from sidecar.ledger.base import AuditEvent
from sidecar.ledger.pgschema import migrate
from sidecar.ledger.pgsnapshot import SharedPostgresSnapshot, SharingReader
from sidecar.ledger.schema import POSTGRES
from sidecar.ledger.sql import Queries, append
from tests.helpers import postgres as pg

# Events per transaction while laying the ledger down.
BATCH = 5_000


def lay_down(dsn: str, count: int, chains: int) -> int:
    """``count`` events or a run more, appended as sidecars append them: their number."""
    migrate(dsn, chains=chains)
    rng = random.Random(7)
    written, n = 0, 0
    with psycopg.connect(dsn) as conn:
        while written < count:
            batch: list[AuditEvent] = []
            while len(batch) < BATCH and written + len(batch) < count:
                batch.extend(run_events(n, rng))
                n += 1
            with conn.cursor() as cur:
                append(cur, Queries(POSTGRES), batch, chains)
            conn.commit()
            written += len(batch)
    return written


def verify_seconds(dsn: str, jobs: int) -> tuple[float, inspect.Verdict]:
    reader = SharingReader(dsn)
    try:
        began = time.perf_counter()
        verdict = inspect.verify(reader, jobs=jobs, shared=SharedPostgresSnapshot(dsn))
        return time.perf_counter() - began, verdict
    finally:
        reader.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("events", type=int)
    parser.add_argument("--chains", type=int, default=128)
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    dsn = pg.fresh_database("bench_verify")
    try:
        began = time.perf_counter()
        written = lay_down(dsn, args.events, args.chains)
        print(f"laid down {written} events in {args.chains} chains in "
              f"{time.perf_counter() - began:.1f} s")  # fmt: skip
        times: dict[int, list[float]] = {1: [], args.jobs: []}
        for _ in range(args.rounds):
            for jobs in times:
                seconds, verdict = verify_seconds(dsn, jobs)
                assert verdict.intact and verdict.checked == written, verdict
                times[jobs].append(seconds)
                print(f"--jobs {jobs}: {seconds:.2f} s")
        one, many = (statistics.median(times[jobs]) for jobs in times)
        print(f"median --jobs 1 {one:.2f} s, --jobs {args.jobs} {many:.2f} s: {one / many:.2f}x")
    finally:
        pg.drop_database(dsn)


if __name__ == "__main__":
    main()
