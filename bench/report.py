"""The load test's report: report.md with the goals' ratios, and the plots, from report.json.

``python -m bench.report bench/out/report.json`` renders them again from a saved run.
:func:`write` puts report.md (bench/tables.py) and the plots (bench/plots.py) beside
report.json, and returns what is wrong with the run (bench/problems.py: a scenario with no
answers, a retry storm that applied anything, refusals nobody expected): `make bench-smoke`
fails on those.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.goals import goals_text
from bench.plots import plot, plot_c1, plot_contended, plot_growth, plot_peers
from bench.problems import problems
from bench.tables import markdown


def write(data: dict[str, Any], out: Path) -> list[str]:
    """Write report.md and the plots beside report.json; return what is wrong with the run."""
    (out / "report.md").write_text(markdown(data))
    if data["results"]:
        plot(data, out)
    plot_c1(data, out)
    plot_contended(data, out)
    plot_peers(data, out)
    plot_growth(data, out)
    return problems(data)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path, nargs="?", default=Path("bench/out/report.json"))
    args = parser.parse_args(argv)
    data = json.loads(args.report.read_text())
    for problem in write(data, args.report.parent):
        print(f"problem: {problem}")
    print((args.report.parent / "report.md").read_text())
    print(goals_text(data))


if __name__ == "__main__":
    main()
