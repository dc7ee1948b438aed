"""The scenario grid: every framework and scenario, its worker killed with SIGKILL after
every write and as every model call starts, each job delivered again until done; a
table of kills, duplicates, losses and runs parked per framework and scenario.

    python clients/python/tests/grid.py            every kill (make grid)
    python clients/python/tests/grid.py --quick    every third kill

Real parts: `actonce serve` (the one beside the interpreter, or $ACTONCE_BIN), a card
processor over HTTP, each framework's real runner with a model scripted as a real one
answers (fresh tool-call ids on every call, parallel calls shuffled, texts reworded);
for the MCP row, a sidecar whose gateway fronts a payments MCP server of its own process,
and LangGraph with langchain-mcp-adapters in an agent environment of its own.
Exits 1 when any run duplicated or lost a write.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kill_loop import Tally, tally_every_kill
from scenarios import GRID, Framework

from actonce_client.testing import LocalSidecar


def run_grid(every: int, only: str = "") -> list[tuple[str, str, Tally]]:
    rows: list[tuple[str, str, Tally]] = []
    with tempfile.TemporaryDirectory(prefix="actonce-grid-") as folder, LocalSidecar() as sidecar:
        for framework in GRID:
            if only and only.lower() not in framework.name.lower():
                continue
            rows += _framework(framework, sidecar, Path(folder), every)
    return rows


def _framework(
    framework: Framework, sidecar: LocalSidecar, folder: Path, every: int
) -> list[tuple[str, str, Tally]]:
    rows = []
    place = folder / framework.worker
    place.mkdir()
    with framework.world(sidecar, place, framework.worker) as world:
        for scenario, expected in sorted(framework.scenarios.items()):
            started = time.monotonic()
            tally = tally_every_kill(world, scenario, expected, every=every)
            rows.append((framework.name, scenario, tally))
            print(f"  {framework.name} / {scenario}: {tally.kills} kills in "
                  f"{time.monotonic() - started:.1f}s", file=sys.stderr, flush=True)  # fmt: skip
    return rows


def table(rows: list[tuple[str, str, Tally]]) -> str:
    lines = ["| framework | scenario | kills | duplicates | losses | parked |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for name, scenario, t in rows:
        lines.append(f"| {name} | {scenario} | {t.kills} | {t.duplicates} | {t.losses} "
                     f"| {t.parked} |")  # fmt: skip
    total = Tally()
    for *_, t in rows:
        total.kills += t.kills
        total.duplicates += t.duplicates
        total.losses += t.losses
        total.parked += t.parked
    lines.append(f"| all | {len(rows)} scenarios | {total.kills} | {total.duplicates} "
                 f"| {total.losses} | {total.parked} |")  # fmt: skip
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="every third kill only")
    parser.add_argument("--only", default="", help="the frameworks whose name holds this")
    args = parser.parse_args()
    rows = run_grid(3 if args.quick else 1, args.only)
    print(table(rows))
    failures = [f for *_, t in rows for f in t.failures]
    for failure in failures:
        print(failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
