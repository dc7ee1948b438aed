"""A seed's faults of time: a gateway charge slower than its lease, freezes, an operator, skew.

They are drawn from a generator of their own, so that a seed's writes and kills stay what
they were: some runs end with a charge made through the sidecar's MCP gateway to a payments
upstream (chaos.upstream) whose answer may take longer than the attempt's lease or the
gateway's upstream timeout, in a segment of its own under a lease; the sidecar may be frozen
(SIGSTOP, then SIGCONT) at call counts or while that charge is under way, for less or more
than the time after which a silent sidecar's calls become decidable; an operator may watch
``actonce audit pending`` and decide what it lists from what the upstream counted; and on
PostgreSQL that operator's clock, or the sidecar's, may disagree with the ledger's by minutes
(faketime).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from chaos.plan_kills import FREEZE, Kill
from chaos.plan_writes import GATEWAY_TOOL, Effect, Op, OpKind, RunPlan, Segment


@dataclass(frozen=True)
class TimeFaults:
    """A seed's faults of time, beside its kills and caller faults."""

    # The gateway's --mcp-upstream-timeout, in seconds.
    upstream_timeout: float = 3.0
    # The lease of an attempt of a gateway charge's segment (0: no lease).
    lease_seconds: float = 0.0
    # Some MCP handshakes with the upstream are held this long, at this rate.
    slow_handshake: float = 0.0
    slow_handshake_rate: float = 0.0
    # An operator watches `actonce audit pending` and decides the gateway charges it lists.
    operator: bool = False
    # faketime offsets, applied on PostgreSQL only (a SQLite file's clock is its writer's
    # host's, so a skewed process beside it would be another host's clock on one file):
    # the operator's `actonce audit` and the sidecar's.
    operator_skew: str = ""
    sidecar_skew: str = ""


# A frozen sidecar's steps may be decided once it has been silent this long
# (sidecar.ledger.liveness.STALE_SECONDS): a long freeze outlasts it, a short one does not.
_SILENT_SECONDS = 10.0


def _time_faults(rng: random.Random) -> TimeFaults:
    return TimeFaults(
        # A lease must outlast a store call's deadline (5 s) to write at all; with the
        # longest timeout, the lease left bounds the call instead.
        upstream_timeout=rng.choice((2.0, 3.0, 8.0)),
        lease_seconds=rng.choice((0.0, 6.5, 8.0)),
        slow_handshake=round(rng.uniform(2.0, 8.0), 3),
        slow_handshake_rate=rng.choice((0.0, 0.15, 0.3)),
        operator=rng.random() < 0.75,
        operator_skew="+15m" if rng.random() < 0.5 else "",
        sidecar_skew="-10m" if rng.random() < 0.3 else "",
    )


def _with_gateway_charge(
    run: RunPlan, seed: int, number: int, rng: random.Random, faults: TimeFaults
) -> RunPlan:
    """Half the runs end with a gateway charge, in a segment of its own under the lease: a
    charge to a customer no other run charges, whose answer is quick or slower than the
    lease or the upstream timeout."""
    if rng.random() >= 0.5:
        return run
    slow = rng.random() < 0.35
    # Slow: past the call's deadline, which the upstream timeout or the lease bounds.
    bound = min(faults.upstream_timeout, faults.lease_seconds or faults.upstream_timeout)
    seconds = bound + rng.uniform(0.3, 2.0) if slow else rng.uniform(0.0, 0.2)
    charge = Op(
        index=sum(1 for _ in run.ops()),
        kind=OpKind.GATEWAY,
        tool=GATEWAY_TOOL,
        effect=Effect.NON_IDEMPOTENT_WRITE,
        args={"customer": f"c{seed}-{number}", "cents": 100 + number, "seconds": round(seconds, 3)},
    )
    segment = Segment("cp-charge", ((charge,),), lease_seconds=faults.lease_seconds)
    return RunPlan(run.run_id, run.rule, (*run.segments, segment))


def _freezes(rng: random.Random, runs: tuple[RunPlan, ...], horizon: int) -> list[Kill]:
    """Short freezes of the sidecar at call counts, and, for half the gateway charges, a
    freeze while that charge is under way, shorter or longer than the silence after which
    its call may be decided."""
    freezes = [
        Kill(rng.randint(1, horizon), "sidecar", rng.uniform(0.0, 12.0),
             rng.uniform(200.0, 2500.0), action=FREEZE)
        for _ in range(rng.choice((0, 0, 1, 2)))
    ]  # fmt: skip
    for run in runs:
        if any(op.kind is OpKind.GATEWAY for op in run.ops()) and rng.random() < 0.5:
            long = rng.random() < 0.4
            # A long one leaves the operator a few seconds to decide while it lasts.
            seconds = (
                rng.uniform(_SILENT_SECONDS + 2, _SILENT_SECONDS + 6)
                if long
                else rng.uniform(0.3, 3.0)
            )
            delay = rng.uniform(0.0, 300.0)
            freezes.append(
                Kill(0, "sidecar", delay, seconds * 1000, at_step=run.run_id, action=FREEZE)
            )
    return freezes
