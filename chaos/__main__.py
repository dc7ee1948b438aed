"""``python -m chaos``: run seeds, print the summary table, write chaos/out/summary.md.

Exit status 0 when every seed found no duplicate, no loss and no violation; 1 otherwise,
after printing each failing seed with the command that replays it.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from chaos import pg
from chaos.report import (
    Totals,
    failures,
    fault_table,
    summary_markdown,
    table,
    time_table,
    totals,
)
from chaos.runner import SeedResult, run_seeds

ROOT = Path(__file__).resolve().parents[1]
# Seeds whose plans hold every kind of fault, time's included, yet no freeze longer than the
# silence after which a frozen sidecar's calls may be decided (the long mode has those):
# gateway charges slower than the upstream timeout, decided by an operator, freezes while a
# charge is under way, and on PostgreSQL an operator 15 minutes fast and a sidecar 10 slow.
QUICK_SEEDS = {"sqlite": (0, 3, 36, 256), "postgres": (114, 341)}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__)
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--seeds", type=int, help="run seeds FIRST..FIRST+N-1")
    which.add_argument("--seed", type=int, help="replay one seed, with its findings in full")
    which.add_argument(
        "--quick", action="store_true", help="a few seeds per backend, for `make test`"
    )
    parser.add_argument("--first", type=int, default=0, help="first seed of --seeds (default 0)")
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="sqlite")
    parser.add_argument(
        "--topology",
        choices=("embedded", "standalone", "twofiles"),
        help="force where the store runs (default: the seed decides); twofiles: embedded, in "
        "a data folder of two files, as one made before the store moved into the ledger's file",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=min(3, os.cpu_count() or 1),
        help="seeds run at once, each in a worker process",
    )
    parser.add_argument(
        "--sidecars",
        type=int,
        default=1,
        help="`actonce serve` processes per seed (default 1); more than one share the seed's "
        "PostgreSQL ledger and store (--backend postgres only), each attempt going to one the "
        "seed picks and each kill hitting one",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "chaos" / "out")
    parser.add_argument("--keep", action="store_true", help="keep every seed's files and databases")
    parser.add_argument(
        "--shared-pg",
        action="store_true",
        help="use the shared test PostgreSQL server, not the private chaos one",
    )
    return parser


def _progress(done: SeedResult) -> None:
    mark = "ok" if done.ok else "FAILED"
    spread = "" if done.sidecars == 1 else f" on {done.sidecars_used}/{done.sidecars}"
    print(
        f"[{done.backend}{spread}] "
        f"seed {done.seed:>4} {done.topology:<10} "
        f"kills {done.sidecar_kills}/{done.store_kills} freezes {done.freezes} "
        f"charges {done.gateway_charges} decided {done.decisions} "
        f"faults {sum(done.caller_faults.values()):>3} attempts {done.attempts:>3} "
        f"acks {done.acks:>3} {done.seconds:5.1f}s {mark}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.sidecars < 1:
        parser.error("--sidecars must be 1 or more")
    if args.sidecars > 1 and (args.backend != "postgres" or args.quick):
        parser.error(
            f"--sidecars {args.sidecars} needs --backend postgres: several sidecars share one "
            "ledger and one store only on PostgreSQL (a SQLite ledger is one process's file)"
        )
    backends = ("sqlite", "postgres") if args.backend == "both" or args.quick else (args.backend,)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    workdir = out / "seeds"
    command = ("python -m chaos " + shlex.join(argv if argv is not None else sys.argv[1:])).strip()
    rows: list[Totals] = []
    everything: list[SeedResult] = []
    for backend in backends:
        if args.quick:
            seeds: Sequence[int] = QUICK_SEEDS[backend]
        elif args.seed is not None:
            seeds = range(args.seed, args.seed + 1)
        else:
            seeds = range(args.first, args.first + (args.seeds or 200))
        server = (
            pg.server_dsn(private=not (args.shared_pg or args.quick))
            if backend == "postgres"
            else None
        )
        started = time.monotonic()
        results: list[SeedResult] = []
        for done in run_seeds(
            seeds,
            backend,
            workdir,
            jobs=1 if args.seed is not None else args.jobs,
            pg_server=server,
            topology=args.topology,
            keep=args.keep or args.seed is not None,
            progress=_progress,
            sidecars=args.sidecars,
        ):
            results.append(done)
            if len(results) % 10 == 0:
                # A long run cut short still leaves the summary of the seeds it finished.
                so_far = [*rows, totals(backend, results, time.monotonic() - started)]
                partial = f"{command} (cut short: {len(results)} of {len(seeds)} seeds)"
                (out / "summary.md").write_text(
                    summary_markdown(so_far, [*everything, *results], partial)
                )
        rows.append(totals(backend, results, time.monotonic() - started))
        everything.extend(results)
    print()
    print(table(rows))
    print()
    print(fault_table(rows))
    print()
    print(time_table(rows))
    failed = failures(everything, limit=200 if args.seed is not None else 20)
    if failed:
        print()
        print(failed)
    elif args.seed is not None:
        kept = " ".join(db for r in everything for db in r.kept)
        print(f"\nkept: {' '.join(r.workdir for r in everything)} {kept}".rstrip())
    (out / "summary.md").write_text(summary_markdown(rows, everything, command))
    print(f"\nsummary written to {out / 'summary.md'}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
