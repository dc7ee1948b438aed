"""What a kill or a freeze does to one of a seed's processes, and the names of those processes.

``make_plan`` (chaos.plan) draws a seed's kills at call counts and at a run's step, and
chaos.plan_time its freezes; chaos.processes carries them out on the processes it names.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kill:
    """SIGKILL ``target`` ``delay_ms`` after the agent starts its ``at_call``-th call; it
    stays down ``down_ms`` before its supervisor starts it again.

    A kill with ``at_step`` (a run id) waits instead for that run's first call of its
    non-idempotent step: random call counts seldom land in the few milliseconds between a
    step's begin and end, which is where a step is left in doubt.

    With ``action`` FREEZE the process (its whole process group) is stopped with SIGSTOP
    instead, and continued with SIGCONT ``down_ms`` later: the kernel holds it, its
    connections stay open, its heartbeat stops, and it wakes with its memory as it was.
    """

    at_call: int
    target: str
    delay_ms: float
    down_ms: float
    at_step: str = ""
    action: str = "kill"


KILL = "kill"
FREEZE = "freeze"


def sidecar_name(number: int) -> str:
    """The harness's name of sidecar ``number``: the first is "sidecar", as with one."""
    return "sidecar" if number == 0 else f"sidecar{number}"
