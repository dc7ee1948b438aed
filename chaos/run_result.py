"""What the agent was told, run by run: the records the checker holds the store and the ledger to.

Each acknowledged write (the checker demands a durable audit outcome for each, and the object
in the store), each tool the agent actually ran (a non-idempotent one at most once), each
gateway charge answered as done, and anything the sidecar answered that the contract does not
allow.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from chaos.plan_writes import Effect

APPLIED = "OUTCOME_APPLIED"
ALREADY_APPLIED = "OUTCOME_ALREADY_APPLIED"
SKIPPED = "OUTCOME_SKIPPED"


@dataclass(frozen=True)
class Ack:
    """A write the sidecar acknowledged."""

    run_id: str
    attempt_id: str
    op_index: int
    rpc: str
    id: str
    outcome: str
    version: int = 0
    artifact_id: str = ""
    path: str = ""
    effect: int = 0


@dataclass(frozen=True)
class Execution:
    """A tool the agent actually ran, after BeginStep told it to."""

    run_id: str
    step_id: str
    tool: str
    effect: Effect


@dataclass(frozen=True)
class GatewayAnswer:
    """A gateway charge the sidecar answered as done."""

    run_id: str
    attempt_id: str
    step_id: str
    outcome: str
    charge_id: str


@dataclass
class RunResult:
    """What happened to one run."""

    run_id: str
    finished: bool = False
    # The step refused IN_DOUBT, when the run settled that way (an operator decides).
    in_doubt_step: str = ""
    attempts: int = 0
    checkpoints_lost: int = 0
    acks: list[Ack] = field(default_factory=list)
    executions: list[Execution] = field(default_factory=list)
    gateway_answers: list[GatewayAnswer] = field(default_factory=list)
    # The gateway charge's step id, as its answers and refusals named it.
    gateway_step: str = ""
    # What the gateway charge went through, by the harness's clock, for a failing seed's
    # reader: each call's answer or failure, each decision waited for.
    trail: list[str] = field(default_factory=list)
    failures: Counter[str] = field(default_factory=Counter)
    caller_faults: Counter[str] = field(default_factory=Counter)
    # Deliveries dead-lettered on AUDIT_PERSISTENCE_FAILED (a twin's included): each main
    # one delivered again by a person.
    dead_lettered: int = 0
    violations: list[str] = field(default_factory=list)
    # The sidecar (by number) each attempt that began went to, twins' included.
    on_sidecars: list[int] = field(default_factory=list)
