"""A seed's plan: the runs, the writes each makes, and when processes are killed or frozen.

Everything here is a pure function of the seed, so a failing seed replays the same plan and
the same kill schedule. ``make_plan`` puts it together: the runs and their writes
(chaos.plan_writes), the kills at call counts and at a run's step (chaos.plan_kills), how
often the agent is a caller that gives up, and what time does (chaos.plan_time).

The seed decides how often the agent behaves as a caller that gives up
(``caller_fault_rate``): a call with a short deadline, a call cancelled or its connection
reset mid-way, each repeated with its ``request_id`` until answered, and a second attempt of
the run begun while the first still works, as when a queue's lease runs out early.

And it decides what time does, from a generator of its own so that the writes and kills
above stay what they were: a gateway charge whose answer may outlast its lease, freezes of
the sidecar, an operator deciding what is left in doubt, and clocks off by minutes. With
several sidecars, ``attempt_sidecar`` says which one each attempt goes to.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

from chaos.plan_kills import Kill, sidecar_name
from chaos.plan_time import TimeFaults, _freezes, _time_faults, _with_gateway_charge
from chaos.plan_writes import Effect, OpKind, RunPlan, _RunBuilder


@dataclass(frozen=True)
class SeedPlan:
    """Everything a seed decides up front."""

    seed: int
    # "embedded": the store lives in the sidecar's process; "standalone": `actonce store`;
    # "twofiles" (only when forced): embedded, in a data folder whose store has a file of its
    # own, as folders made before the store moved into the ledger's file have.
    topology: str
    runs: tuple[RunPlan, ...]
    kills: tuple[Kill, ...]
    # Chance that the queue loses a finished segment's checkpoint (its worker died just
    # then), so that the segment is run again from the same checkpoint.
    lost_checkpoint_rate: float
    writes: int = field(default=0)
    # Chance that a write call meets a caller fault (sidecar_api.CallerFault), and that an attempt
    # gets a concurrent twin attempt of its run.
    caller_fault_rate: float = 0.0
    # What time does (see the module's docstring); all off in a plan without a gateway
    # charge but the freezes.
    time: TimeFaults = field(default_factory=TimeFaults)
    # How many sidecars share the seed's ledger and store (PostgreSQL only when more than
    # one): each attempt goes to one of them (attempt_sidecar), each kill names one.
    sidecars: int = 1

    @property
    def gateway(self) -> bool:
        return any(op.kind is OpKind.GATEWAY for run in self.runs for op in run.ops())


def attempt_sidecar(
    seed: int, run_id: str, attempt: int, sidecars: int, *, twin: bool = False
) -> int:
    """The sidecar (by number) that attempt ``attempt`` of ``run_id`` goes to, a twin's
    apart: any of them alike, so that a redelivery usually lands on another sidecar than
    the attempt it fences. With one sidecar nothing is drawn."""
    if sidecars <= 1:
        return 0
    return random.Random(f"{seed}/{run_id}/{attempt}/{'t' if twin else ''}sidecar").randrange(
        sidecars
    )


def make_plan(
    seed: int,
    *,
    topology: str | None = None,
    max_kills: int = 4,
    caller_faults: bool = True,
    sidecars: int = 1,
) -> SeedPlan:
    """The plan of ``seed``; ``topology`` forces where the store runs; without
    ``caller_faults`` the agent never gives up on a call. With ``sidecars`` more than one,
    each kill and freeze at a call count names one of them, drawn from a generator of its
    own (the plan is otherwise the seed's with one); one waiting for a run's step ("sidecar"
    with ``at_step``) hits the sidecar that run's attempt is on."""
    rng = random.Random(seed)
    fault_rate = rng.choice((0.05, 0.15, 0.3))
    chosen = topology or ("standalone" if rng.random() < 0.5 else "embedded")
    runs = tuple(_RunBuilder(rng, seed, n).build() for n in range(rng.choice((1, 1, 2))))
    writes = sum(1 for run in runs for _ in run.ops())
    kills: list[Kill] = []
    # Calls include retries, so kills are spread over a little more than one pass.
    horizon = max(2, int(writes * 1.3))
    for _ in range(rng.randint(0, max_kills) if max_kills else 0):
        target = "store" if chosen == "standalone" and rng.random() < 0.5 else "sidecar"
        kills.append(
            Kill(
                at_call=rng.randint(1, horizon),
                target=target,
                delay_ms=rng.uniform(0.0, 12.0),
                down_ms=rng.choice((0.0, rng.uniform(50.0, 800.0))),
            )
        )
    kills.sort(key=lambda k: k.at_call)
    for run in runs:
        charges = any(op.effect is Effect.NON_IDEMPOTENT_WRITE for op in run.ops())
        if charges and max_kills and rng.random() < 0.5:
            kills.append(Kill(0, "sidecar", rng.uniform(0.0, 15.0), 0.0, at_step=run.run_id))
    # Time's faults draw from a generator of their own: the plan above stays the seed's.
    timing = random.Random(f"{seed}/time")
    faults = _time_faults(timing)
    runs = tuple(_with_gateway_charge(run, seed, n, timing, faults) for n, run in enumerate(runs))
    if max_kills:
        kills += _freezes(timing, runs, horizon)
    if sidecars > 1:
        which = random.Random(f"{seed}/sidecars")
        kills = [
            kill
            if kill.at_step or kill.target != "sidecar"
            else replace(kill, target=sidecar_name(which.randrange(sidecars)))
            for kill in kills
        ]
    return SeedPlan(
        seed=seed,
        topology=chosen,
        runs=runs,
        kills=tuple(kills),
        lost_checkpoint_rate=0.15,
        writes=sum(1 for run in runs for _ in run.ops()),
        caller_fault_rate=fault_rate if caller_faults else 0.0,
        time=faults,
        sidecars=sidecars,
    )
