"""A seed's gateway charges against what the payments upstream counted in its own file.

What the upstream's file says, the operator's decisions and the listings made once every
process stopped are the seed's :class:`GatewayRecord`. Each logical charge is made at most
once upstream (more is a duplicate); a finished run's charge exactly once, and never listed
as pending after; one left in doubt is listed by ``actonce audit pending``; and each
operator's decision is consistent with the upstream's count (``ran`` with one charge).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from chaos.expected import _Expected
from chaos.findings import Findings
from chaos.operator import RAN, Decision, Listing
from chaos.plan import SeedPlan
from chaos.plan_writes import GATEWAY_TOOL, OpKind
from chaos.run_result import RunResult
from sidecar.ledger.base import StoredEvent


@dataclass
class GatewayRecord:
    """What the gateway's seeds leave beside the store and the ledger."""

    charged: Counter[str]  # customer -> charges, as the upstream's file says
    decisions: list[Decision]  # what the operator decided, and what it saw then
    left: Listing  # `actonce audit pending --json` once every process stopped
    # `actonce audit pending --in-flight --json` when that listing was made: empty unless
    # a step was still in flight once the harness had waited as long as it may take.
    flying: Listing = field(default_factory=lambda: Listing(0))
    waited_for: int = 0  # steps in flight when the harness first looked, all stopped
    problems: list[str] = field(default_factory=list)
    refused: int = 0


def _check_gateway(
    found: Findings,
    plan: SeedPlan,
    results: dict[str, RunResult],
    events: list[StoredEvent],
    want: _Expected,
    record: GatewayRecord,
) -> None:
    for problem in record.problems:
        found.violation(problem)
    if record.left.code not in (0, 3):
        found.violation(f"`actonce audit pending` failed after the seed: {record.left.error}")
    if record.flying.code != 0:
        found.violation(
            f"`actonce audit pending --in-flight` failed after the seed: {record.flying.error}"
        )
    listed = {str(item.get("id", "")) for item in record.left.items}
    if bool(record.left.items) != (record.left.code == 3):
        found.violation(f"`actonce audit pending` exited {record.left.code} listing "
                        f"{len(record.left.items)} item(s)")  # fmt: skip
    step_of = {run: step for step, (tool, _e, run) in want.steps.items() if tool == GATEWAY_TOOL}
    for run in plan.runs:
        for op in run.ops():
            if op.kind is not OpKind.GATEWAY:
                continue
            customer, step_id = str(op.args["customer"]), step_of[run.run_id]
            charged = record.charged[customer]
            result = results[run.run_id]
            if charged > 1:
                found.duplicate(
                    f"the upstream charged {customer} {charged} times for one logical charge "
                    f"(step {step_id})",
                    charged - 1,
                )
            for decision in (d for d in record.decisions if d.run_id == run.run_id):
                if decision.step_id != step_id:
                    found.violation(f"the operator decided {decision.step_id} for the charge "
                                    f"{step_id} of {run.run_id}")  # fmt: skip
                if decision.decision == RAN and charged != 1:
                    found.violation(
                        f"charge {step_id} was decided ran (the upstream showed "
                        f"{decision.counted}) and the upstream counted {charged}"
                    )
            if result.finished:
                if charged == 0:
                    found.lost(f"run {run.run_id} finished and the upstream never charged "
                               f"{customer} (step {step_id})")  # fmt: skip
                if step_id in listed:
                    found.violation(f"the charge {step_id} of a finished run is listed by "
                                    "`actonce audit pending`")  # fmt: skip
            elif result.in_doubt_step == step_id and step_id not in listed:
                found.violation(
                    f"the charge {step_id} left in doubt (the upstream counted {charged}) is "
                    f"not listed by `actonce audit pending`{_still_flying(record, step_id)}"
                )


def _still_flying(record: GatewayRecord, step_id: str) -> str:
    """Why the ledger still held ``step_id`` in flight with every process stopped, if it
    did: a permitted call whose sidecar is gone that never becomes decidable."""
    for item in record.flying.items:
        if str(item.get("id", "")) == step_id:
            return f"; with every process stopped it is still in flight: {item.get('why', '')}"
    return ""
