"""The report's plots, PNG files beside report.md, drawn from a run's figures by matplotlib.

:func:`plot` draws throughput.png and latency.png (saturation, for a run that has it); each
other function one file, or nothing when its part is not in the run: c1.png (concurrency 1
over the floors, with the goals' bounds), contended.png (beside busy cores), peers.png and
growth.png. matplotlib comes from the `bench` extra and is imported where it draws.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.figures import (
    C1_TARGETS,
    CONTENDED_TARGETS,
    LABELS,
    SCENARIOS,
    _get,
    _targets,
    c1_ratio,
    peer_rows,
)


def plot(data: dict[str, Any], out: Path) -> None:
    """throughput.png (calls/s per target) and latency.png (p50/p90/p99 per target)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    targets = _targets(data)
    scenarios = [x for x in SCENARIOS if x in data["results"]]
    width = 0.8 / max(1, len(targets))
    fig, ax = plt.subplots(figsize=(11, 5))
    for i, target in enumerate(targets):
        xs = [j + i * width for j in range(len(scenarios))]
        ys = [_get(data, s, target, "rps") or 0.0 for s in scenarios]
        ax.bar(xs, ys, width, label=LABELS[target])
    ax.set_xticks([j + width * (len(targets) - 1) / 2 for j in range(len(scenarios))])
    ax.set_xticklabels(scenarios)
    ax.set_ylabel("calls per second (median)")
    ax.set_title("Throughput per scenario and target")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "throughput.png", dpi=110)
    plt.close(fig)

    shown = [s for s in scenarios if s != "health"]
    fig, axes = plt.subplots(1, len(shown), figsize=(4 * len(shown), 4.5), squeeze=False)
    for ax, scenario in zip(axes[0], shown, strict=True):
        present = [t for t in targets if _get(data, scenario, t, "rps") is not None]
        for k, key in enumerate(("p50_ms", "p90_ms", "p99_ms")):
            xs = [j + k * 0.27 for j in range(len(present))]
            ax.bar(xs, [_get(data, scenario, t, key) or 0.0 for t in present], 0.27,
                   label=key.removesuffix("_ms"))  # fmt: skip
        ax.set_xticks([j + 0.27 for j in range(len(present))])
        ax.set_xticklabels([LABELS[t] for t in present], rotation=35, ha="right", fontsize=7)
        ax.set_title(scenario)
        ax.set_ylabel("ms at saturation")
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle("Latency percentiles per target (saturated, concurrency "
                 f"{data['settings']['concurrency']})")  # fmt: skip
    fig.tight_layout()
    fig.savefig(out / "latency.png", dpi=110)
    plt.close(fig)


def plot_c1(data: dict[str, Any], out: Path) -> None:
    """c1.png: each target's p50 one call at a time over floor1's and over floor3's, per
    write, with the goals' bounds (1.5x floor1 for the embedded default, 1.3x floor3 where
    the three commits stay)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c1 = data.get("c1", {})
    writes = [w for w in ("notice", "create") if w in c1]
    targets = [t for t in C1_TARGETS if any(t in c1[w] for w in writes)]
    if not writes or not targets:
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4))
    width = 0.8 / len(targets)
    for ax, floor, bound in zip(axes, ("floor1", "floor3"), (1.5, 1.3), strict=True):
        for i, target in enumerate(targets):
            xs = [j + i * width for j in range(len(writes))]
            ratios = [c1_ratio(data, "c1", w, target, floor) for w in writes]
            ax.bar(xs, [float("nan") if r is None else r for r in ratios], width,
                   label=LABELS[target])  # fmt: skip
        ax.axhline(bound, color="black", linestyle="--", linewidth=1,
                   label=f"goal: {bound:g}x")  # fmt: skip
        ax.set_xticks([j + width * (len(targets) - 1) / 2 for j in range(len(writes))])
        ax.set_xticklabels(writes)
        ax.set_ylabel(f"p50 / {floor}'s p50")
        ax.set_title(f"concurrency 1, over {floor}")
        ax.grid(axis="y", alpha=0.3)
    # Below the plots: above them or inside, it hides the bars it names.
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=7)
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    fig.savefig(out / "c1.png", dpi=110)
    plt.close(fig)


def plot_contended(data: dict[str, Any], out: Path) -> None:
    """contended.png: p50 and p99 one call at a time beside busy cores, per target."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = (data.get("contended") or {}).get("results") or {}
    writes = [w for w in ("notice", "create") if w in results]
    targets = [t for t in CONTENDED_TARGETS if any(t in results[w] for w in writes)]
    if not writes or not targets:
        return
    fig, axes = plt.subplots(1, len(writes), figsize=(5 * len(writes), 4.2), squeeze=False)
    for ax, write in zip(axes[0], writes, strict=True):
        present = [t for t in targets if t in results[write]]
        for k, key in enumerate(("p50_ms", "p99_ms")):
            ax.bar([j + k * 0.4 for j in range(len(present))],
                   [float(results[write][t][key]) for t in present], 0.4,
                   label=key.removesuffix("_ms"))  # fmt: skip
        floor3 = results[write].get("floor3")
        if floor3 is not None:
            ax.axhline(2 * float(floor3["p50_ms"]), color="black", linestyle="--", linewidth=1,
                       label="goal: 2x floor3's p50")  # fmt: skip
        ax.set_xticks([j + 0.2 for j in range(len(present))])
        ax.set_xticklabels([LABELS[t] for t in present], rotation=20, ha="right", fontsize=7)
        ax.set_yscale("log")
        ax.set_ylabel("ms, one call at a time (log)")
        ax.set_title(f"{write}, every core busy")
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "contended.png", dpi=110)
    plt.close(fig)


def plot_peers(data: dict[str, Any], out: Path) -> None:
    """peers.png: p50 at concurrency 1 and writes/s at 32, per system of the table."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = peer_rows(data)
    if not rows:
        return
    names = [f"{k.split('/')[0]}\n{k.split('/')[1]}" for k in rows]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    for ax, key, title in zip(axes, ("p50_ms", "rps", "cpu_ms_per_write"),
                              ("p50 ms, one call at a time", "writes/s, 32 callers",
                               "CPU ms per write, 32 callers"), strict=True):  # fmt: skip
        colors = ["tab:blue" if "audited" in k else "tab:gray" if "floor" in k else "tab:orange"
                  for k in rows]  # fmt: skip
        ax.bar(range(len(rows)), [float(r[key]) for r in rows.values()], color=colors)
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels(names, rotation=35, ha="right", fontsize=7)
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("actonce (blue), its floors (gray) and its peers (orange), in one run")
    fig.tight_layout()
    fig.savefig(out / "peers.png", dpi=110)
    plt.close(fig)


def plot_growth(data: dict[str, Any], out: Path) -> None:
    """growth.png: Notice calls/s and p99 against live attempts, and against the ledger."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grown = data.get("growth", {})
    levels = grown.get("live_attempts") or []
    if not levels:
        return
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2))
    xs = [level["live_attempts"] for level in levels]
    left.plot(xs, [level["rps"] for level in levels], marker="o", label="calls/s")
    left.set_xscale("log")
    left.set_xlabel("live attempts")
    left.set_ylabel("Notice calls/s")
    left.set_ylim(bottom=0)
    twin = left.twinx()
    twin.plot(xs, [level["p99_ms"] for level in levels], marker="s", color="tab:red",
              label="p99 ms")  # fmt: skip
    twin.set_ylabel("p99 ms (red)")
    twin.set_ylim(bottom=0)
    left.set_ylabel("Notice calls/s (blue)")
    left.set_title("Notice with more live attempts")
    left.grid(alpha=0.3)
    ledger = grown.get("ledger")
    if ledger:
        names = ["empty", f"{ledger['events']:,} events"]
        right.bar([0, 1], [ledger["empty"]["rps"], ledger["large"]["rps"]], 0.4, label="calls/s")
        right.set_xticks([0.1, 1.1])
        right.set_xticklabels(names)
        right.set_ylabel("Notice calls/s (blue)")
        twin2 = right.twinx()
        twin2.bar([0.4, 1.4], [ledger["empty"]["p99_ms"], ledger["large"]["p99_ms"]], 0.4,
                  color="tab:red", label="p99 ms")  # fmt: skip
        twin2.set_ylabel("p99 ms (red)")
        right.set_title("Notice on an empty ledger and a large one")
    fig.tight_layout()
    fig.savefig(out / "growth.png", dpi=110)
    plt.close(fig)
