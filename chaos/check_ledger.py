"""The acknowledged writes, the ledger and the store, held against each other and the plan.

Each acknowledged write is in the store and has a durable audit outcome saying what was
answered; each outcome that says applied names something the store holds; nothing is in the
store without its audited intent; a non-idempotent tool ran at most once, a step was refused
``IN_DOUBT`` only with cause, and each finished run's steps have their recorded end.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from chaos.expected import _Expected
from chaos.findings import Findings
from chaos.operator import RAN
from chaos.plan import SeedPlan
from chaos.plan_writes import GATEWAY_TOOL, Effect
from chaos.run_result import ALREADY_APPLIED, APPLIED, RunResult
from chaos.store_snapshot import StoreSnapshot
from sidecar.ledger.base import Phase, StoredEvent


def _check_ledger(
    found: Findings,
    plan: SeedPlan,
    results: dict[str, RunResult],
    store: StoreSnapshot,
    events: list[StoredEvent],
    want: _Expected,
) -> None:
    outcomes: dict[tuple[str, str], list[StoredEvent]] = defaultdict(list)
    intents: dict[str, list[StoredEvent]] = defaultdict(list)
    step_ends: set[tuple[str, str]] = set()
    # A step ends when its call's end is recorded, or when an operator decides it ran.
    ended_steps: set[str] = {
        s.event.derived_id
        for s in events
        if s.event.phase == Phase.DECISION and s.event.detail.get("decision") == RAN
    }
    first_end: dict[str, int] = {}
    last_in_doubt: dict[str, int] = {}
    for stored in events:
        e = stored.event
        if e.phase == "outcome":
            outcomes[(e.attempt_id, e.derived_id)].append(stored)
        elif e.phase in ("intent", "step_begin"):
            intents[e.derived_id].append(stored)
        elif e.phase == "step_end":
            step_ends.add((e.attempt_id, e.derived_id))
            ended_steps.add(e.derived_id)
            first_end.setdefault(e.derived_id, stored.seq)
        if e.phase == "outcome" and e.reason == "IN_DOUBT":
            last_in_doubt[e.derived_id] = stored.seq

    # Every acknowledged write: in the store, with a durable outcome saying what was answered.
    tables: dict[str, dict[str, Any]] = {
        "Create": {**store.artifacts, **store.proposals},
        "CreateThread": store.threads,
        "Notice": store.messages,
        "Send": store.messages,
    }
    for result in results.values():
        for ack in result.acks:
            if ack.rpc in tables and ack.id not in tables[ack.rpc]:
                found.lost(f"acknowledged {ack.rpc} {ack.id} ({ack.outcome}) is not in the store")
            if ack.rpc == "Edit" and ack.id and ack.id not in store.proposals:
                found.lost(f"acknowledged proposed edit {ack.id} is not in the store")
            if ack.rpc == "Edit" and ack.artifact_id not in store.artifacts:
                found.lost(f"edited artifact {ack.artifact_id} is not in the store")
            if ack.rpc == "EndStep":
                if (ack.attempt_id, ack.id) not in step_ends:
                    found.violation(f"acknowledged EndStep of {ack.id} has no durable step end")
                continue
            if ack.rpc == "BeginStep" and ack.effect == Effect.READ_ONLY:
                continue  # read-only steps are audited fail-soft (ADR-111)
            if not _audited(
                ack.rpc,
                ack.attempt_id,
                ack.id,
                ack.artifact_id,
                ack.path,
                ack.outcome,
                ack.version,
                outcomes,
                intents,
            ):
                found.violation(
                    f"acknowledged {ack.rpc} {ack.id or ack.path} ({ack.outcome}) in "
                    f"{ack.attempt_id} has no durable audit outcome"
                )

    # Every outcome that says applied names something the store holds.
    by_write_type: dict[str, dict[str, Any]] = {
        "create": store.artifacts,
        "create_proposal": store.proposals,
        "edit_proposal": store.proposals,
        "thread": store.threads,
        "notice": store.messages,
        "message": store.messages,
    }
    for (attempt_id, derived_id), stored_events in outcomes.items():
        for stored in stored_events:
            e = stored.event
            if e.outcome not in (APPLIED, ALREADY_APPLIED):
                continue
            table = by_write_type.get(e.write_type)
            if table is not None and derived_id not in table:
                found.violation(
                    f"ledger #{stored.seq} says {e.outcome} for {derived_id}, which the store lacks"
                )
            if e.write_type == "edit":
                artifact_id = next(
                    (
                        str(i.event.detail.get("artifact_id", ""))
                        for i in intents[derived_id]
                        if i.event.attempt_id == attempt_id
                    ),
                    "",
                )
                version = int(e.detail.get("version", 0))
                stored_artifact = store.artifacts.get(artifact_id)
                if stored_artifact is None or stored_artifact[1] < version:
                    found.violation(
                        f"ledger #{stored.seq} says edit {derived_id} made version "
                        f"{version} of {artifact_id}, beyond the store's"
                    )

    # Nothing reached the store without its audited intent first.
    for what, table in (
        ("artifact", store.artifacts),
        ("proposal", store.proposals),
        ("thread", store.threads),
        ("message", store.messages),
    ):
        for object_id in table:
            if not intents.get(object_id):
                found.violation(f"{what} {object_id} is in the store with no audited intent")

    # Tools: a non-idempotent one ran at most once; a finished run's steps all ended.
    executions: Counter[str] = Counter()
    for result in results.values():
        for execution in result.executions:
            executions[execution.step_id] += 1
            if (
                execution.effect is Effect.NON_IDEMPOTENT_WRITE
                and executions[execution.step_id] > 1
            ):
                found.duplicate(f"non-idempotent tool {execution.tool} ran again")
    doubted = {r.in_doubt_step for r in results.values() if r.in_doubt_step}
    for step_id, (tool, effect, run_id) in want.steps.items():
        if step_id in doubted:
            began_earlier = intents.get(step_id)
            if effect is not Effect.NON_IDEMPOTENT_WRITE or not began_earlier:
                found.violation(f"step {step_id} ({tool}) refused IN_DOUBT without cause")
            elif first_end.get(step_id, 1 << 62) < last_in_doubt.get(step_id, 0):
                # An attempt running beside it may end the step after the refusal; only a
                # refusal after the step's recorded end is wrong.
                found.violation(f"step {step_id} ({tool}) refused IN_DOUBT though it ended")
            continue
        # A run in doubt got as far as its last step but its gateway charge, which comes
        # after it: every other step ended before it.
        run = results[run_id]
        settled = run.finished or (run.in_doubt_step and tool != GATEWAY_TOOL)
        if settled and step_id not in ended_steps:
            found.lost(f"step {step_id} ({tool}) of a finished run has no recorded end")


def _audited(
    rpc: str,
    attempt_id: str,
    id_: str,
    artifact_id: str,
    path: str,
    outcome: str,
    version: int,
    outcomes: dict[tuple[str, str], list[StoredEvent]],
    intents: dict[str, list[StoredEvent]],
) -> bool:
    if rpc == "Edit" and not id_:
        # A direct edit sends no id to the store: its audit is found through its intent.
        candidates = [
            i.event.derived_id
            for events in intents.values()
            for i in events
            if i.event.attempt_id == attempt_id
            and i.event.rpc == "Edit"
            and i.event.detail.get("artifact_id") == artifact_id
            and i.event.detail.get("path") == path
        ]
        return any(
            o.event.outcome == outcome and int(o.event.detail.get("version", -1)) == version
            for derived in candidates
            for o in outcomes.get((attempt_id, derived), [])
        )
    return any(o.event.outcome == outcome for o in outcomes.get((attempt_id, id_), []))
