"""Summing seeds up: the table printed at the end and written to summary.md."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from chaos.runner import SeedResult

# The caller faults, in the order the summary lists them (sidecar_api.CallerFault's values).
FAULT_KINDS = ("deadline", "cancel", "reset", "twin", "repeat", "overlap")

HEADER = (
    "backend",
    "seeds",
    "failed",
    "kills (sidecar/store)",
    "caller faults",
    "writes planned",
    "writes acked",
    "attempts",
    "in doubt",
    "duplicates found",
    "losses found",
    "seconds",
)


@dataclass(frozen=True)
class Totals:
    """One backend's seeds, summed."""

    backend: str
    seeds: int
    failed: int
    sidecar_kills: int
    store_kills: int
    caller_faults: dict[str, int]
    writes: int
    acks: int
    attempts: int
    in_doubt: int
    duplicates: int
    losses: int
    seconds: float
    # Faults of time (runner.SeedResult's).
    freezes: int = 0
    long_freezes: int = 0
    gateway_charges: int = 0
    slow_charges: int = 0
    decisions: int = 0
    refused_decisions: int = 0
    skewed: int = 0
    dead_lettered: int = 0
    settle_waits: int = 0

    def row(self) -> tuple[str, ...]:
        return (
            self.backend,
            str(self.seeds),
            str(self.failed),
            f"{self.sidecar_kills + self.store_kills} ({self.sidecar_kills}/{self.store_kills})",
            str(sum(self.caller_faults.values())),
            str(self.writes),
            str(self.acks),
            str(self.attempts),
            str(self.in_doubt),
            str(self.duplicates),
            str(self.losses),
            f"{self.seconds:.0f}",
        )


def totals(backend: str, results: Sequence[SeedResult], seconds: float) -> Totals:
    return Totals(
        backend=backend,
        seeds=len(results),
        failed=sum(1 for r in results if not r.ok),
        sidecar_kills=sum(r.sidecar_kills for r in results),
        store_kills=sum(r.store_kills for r in results),
        caller_faults={
            kind: sum(r.caller_faults.get(kind, 0) for r in results) for kind in FAULT_KINDS
        },
        writes=sum(r.writes for r in results),
        acks=sum(r.acks for r in results),
        attempts=sum(r.attempts for r in results),
        in_doubt=sum(r.in_doubt for r in results),
        duplicates=sum(r.duplicates for r in results),
        losses=sum(r.losses for r in results),
        seconds=seconds,
        freezes=sum(r.freezes for r in results),
        long_freezes=sum(r.long_freezes for r in results),
        gateway_charges=sum(r.gateway_charges for r in results),
        slow_charges=sum(r.slow_charges for r in results),
        decisions=sum(r.decisions for r in results),
        refused_decisions=sum(r.refused_decisions for r in results),
        skewed=sum(r.skewed for r in results),
        dead_lettered=sum(r.dead_lettered for r in results),
        settle_waits=sum(r.settle_waits for r in results),
    )


def table(rows: Sequence[Totals]) -> str:
    """A Markdown table, readable as plain text too."""
    cells = [HEADER, *(t.row() for t in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(HEADER))]

    def line(row: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"

    rule = "| " + " | ".join("-" * w for w in widths) + " |"
    return "\n".join([line(HEADER), rule, *(line(t.row()) for t in rows)])


def fault_table(rows: Sequence[Totals]) -> str:
    """Caller faults by kind beside the process kills, per backend."""
    header = ("backend", "sidecar kills", "store kills", *FAULT_KINDS)
    cells: list[tuple[str, ...]] = [header]
    for t in rows:
        counts = [str(t.caller_faults.get(kind, 0)) for kind in FAULT_KINDS]
        cells.append((t.backend, str(t.sidecar_kills), str(t.store_kills), *counts))
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]

    def line(row: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"

    rule = "| " + " | ".join("-" * w for w in widths) + " |"
    return "\n".join([line(cells[0]), rule, *(line(row) for row in cells[1:])])


TIME_HEADER = (
    "backend",
    "freezes (long)",
    "gateway charges (slow)",
    "decisions (refused)",
    "seeds with a skewed clock",
    "dead-lettered",
    "in flight once stopped",
)


def time_table(rows: Sequence[Totals]) -> str:
    """Faults of time per backend: freezes, gateway charges, the operator's decisions; the
    deliveries dead-lettered on AUDIT_PERSISTENCE_FAILED, and the steps still in flight once
    every process had stopped, waited for before the last listing."""
    cells: list[tuple[str, ...]] = [TIME_HEADER]
    for t in rows:
        cells.append(
            (
                t.backend,
                f"{t.freezes} ({t.long_freezes})",
                f"{t.gateway_charges} ({t.slow_charges})",
                f"{t.decisions} ({t.refused_decisions})",
                str(t.skewed),
                str(t.dead_lettered),
                str(t.settle_waits),
            )
        )
    widths = [max(len(row[i]) for row in cells) for i in range(len(TIME_HEADER))]

    def line(row: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"

    rule = "| " + " | ".join("-" * w for w in widths) + " |"
    return "\n".join([line(cells[0]), rule, *(line(row) for row in cells[1:])])


def failures(results: Sequence[SeedResult], limit: int = 20) -> str:
    """What each failing seed found, and how to replay it."""
    out: list[str] = []
    for r in sorted((r for r in results if not r.ok), key=lambda r: (r.backend, r.seed)):
        out.append(
            f"seed {r.seed} ({r.backend}, {r.topology}) FAILED: replay with "
            f"`python -m chaos --seed {r.seed} --backend {r.backend}"
            f"{'' if r.sidecars == 1 else f' --sidecars {r.sidecars}'}`; files and the plan "
            f"(plan.json) in {r.workdir}"
        )
        if r.error:
            out.append("  harness error: " + r.error.strip().replace("\n", "\n  "))
        out.extend(f"  {v}" for v in r.violations[:limit])
        if len(r.violations) > limit:
            out.append(f"  ... and {len(r.violations) - limit} more")
        if r.kept:
            out.append(f"  kept databases: {' '.join(r.kept)}")
    return "\n".join(out)


def summary_markdown(rows: Sequence[Totals], results: Sequence[SeedResult], command: str) -> str:
    topologies = {
        t: sum(1 for r in results if r.topology == t)
        for t in ("embedded", "standalone", "twofiles")
    }
    inside = topologies["embedded"] + topologies["twofiles"]
    of_two = (
        f" ({topologies['twofiles']} of them in a data folder of two files)"
        if topologies["twofiles"]
        else ""
    )
    sidecars = max((r.sidecars for r in results), default=1)
    lines = [
        "# Chaos summary",
        "",
        f"`{command}` (sidecars per seed: {sidecars})",
        "",
        table(rows),
        "",
        f"Seeds by topology: {inside} with the store inside the sidecar{of_two}, "
        f"{topologies['standalone']} with `actonce store` as a process of its own.",
        "",
        "Faults by kind: process kills (SIGKILL of `actonce serve` or `actonce store`) and "
        "caller faults: `deadline` (a call with a deadline of 1 to 60 ms), `cancel` (a call "
        "cancelled mid-way), `reset` (its connection closed mid-way), each then repeated with "
        "its request_id until answered; `twin` (two calls at once with one request_id); "
        "`repeat` (a call repeated with its request_id after a failure the sidecar answered); "
        "`overlap` (a second attempt of the run begun while the first still works).",
        "",
        fault_table(rows),
        "",
        "Faults of time: freezes of the sidecar's process group (SIGSTOP, then SIGCONT "
        "0.2 to 3 s later, or, while a gateway charge is under way, 0.3 to 3 s or longer than "
        "the 10 s after which a silent sidecar's calls may be decided); gateway charges "
        "through the sidecar's MCP front to a payments upstream made with the MCP SDK, the "
        "slow ones answering after the call's deadline (the upstream timeout or the lease); "
        "the operator's `actonce audit resolve` decisions, and the ones the ledger refused; "
        "and, on PostgreSQL, seeds whose operator (15 minutes fast) or sidecar (10 minutes "
        "slow) ran under faketime. Dead-lettered: deliveries refused "
        "`AUDIT_PERSISTENCE_FAILED` (never repeated; the run delivered again by a person). "
        "In flight once stopped: steps the ledger still held in flight when every process "
        "had stopped (a killed sidecar's call, until its deadline and its heartbeat's "
        "silence), waited for before the last `actonce audit pending`.",
        "",
        time_table(rows),
        "",
        "The checker holds the store against a model of what it must hold: every write the "
        "plan makes, with the ids the derived-id specification gives them, edits applied as "
        "they set values (a member of a nested object, an element of an array). Every answer "
        "must name an id the model gives that write; the ledger must hold an intent for "
        "everything the store holds; no answered id may be missing from the store. "
        "A duplicate is an object in the store more times than the plan makes it, or a "
        "non-idempotent tool run twice; a loss is a planned or acknowledged write missing "
        "from the store, an edit's value not in place, a sent message without its turn "
        "request, or a finished run's step without its recorded end. A gateway charge is "
        "held against what the upstream counted in its own file: at most one charge per "
        "logical charge; a finished run's charge made once; one in doubt listed by `actonce "
        "audit pending`; every decision consistent with the upstream's count, and none taken, "
        "by the ledger's own records and clock, while a permitted call could be under way.",
    ]
    failed = failures(results)
    if failed:
        lines += ["", "## Failing seeds", "", "```", failed, "```"]
    return "\n".join(lines) + "\n"
