"""The independent checker: the store's database and the audit ledger against the plan.

It trusts nothing the sidecar answered. It reads the store's tables directly (SQLite file or
PostgreSQL database) and the ledger through its read-only readers, and holds them against
what the plan intends, counted two ways: by content (how many artifacts hold this data, how
many messages of this text a thread has) and by id (the ids the derived-id specification,
docs/derived-ids.md, gives each planned write). What the agent was told is only used to
demand that each acknowledged write is in the store and has a durable audit outcome.

Findings:
- a duplicate: an object more times than the plan makes it, or a non-idempotent tool run
  more than once;
- a loss: a planned or acknowledged object missing, an edit's value not in place, a sent
  message without its turn request, a finished run's step without its recorded end;
- a violation: everything else the contract forbids (an acknowledged write without its
  audit outcome, an outcome that says applied for something the store lacks, an object in
  the store with no audited intent, a broken hash chain, an unexpected answer).

A gateway charge is held against what the payments upstream counted in its own file
(:class:`GatewayRecord`): each logical charge made at most once upstream (more is a
duplicate); a finished run's charge made exactly once, and never listed as pending after;
one left in doubt listed by ``actonce audit pending``; each operator's decision consistent
with the upstream's count (``ran`` with one charge); and, in the ledger, no decision while a
permitted call may still be under way: none before the permit's deadline unless that call's
end was recorded first, and no step end, after a ``did_not_run``, from an attempt that began
the step before it.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonpointer
import psycopg

from chaos.operator import DID_NOT_RUN, RAN, Decision, Listing
from chaos.plan import SeedPlan
from chaos.plan_writes import GATEWAY_TOOL, Effect, Op, OpKind, RunPlan
from chaos.run_result import ALREADY_APPLIED, APPLIED, RunResult
from sidecar.ledger.base import LedgerReader, Phase, StoredEvent
from sidecar.ledger.inspect import verify
from sidecar.rules import canonical, ids


@dataclass
class StoreSnapshot:
    """The store's rows, read directly from its database."""

    # id -> (kind, version, data_json, archived)
    artifacts: dict[str, tuple[str, int, str, bool]] = field(default_factory=dict)
    # id -> (kind, data_json, artifact_id, patch_json, base_version)
    proposals: dict[str, tuple[str, str, str, str, int]] = field(default_factory=dict)
    threads: dict[str, str] = field(default_factory=dict)
    # id -> (thread_id, kind, text)
    messages: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    turn_requests: list[str] = field(default_factory=list)


_QUERIES = (
    ("artifacts", "SELECT id, kind, version, data_json, archived FROM {p}artifacts"),
    (
        "proposals",
        "SELECT id, kind, data_json, artifact_id, patch_json, base_version FROM {p}proposals",
    ),
    ("threads", "SELECT id, title FROM {p}threads"),
    ("messages", "SELECT id, thread_id, kind, text FROM {p}messages"),
    ("turn_requests", "SELECT message_id FROM {p}turn_requests"),
)


def _snapshot(rows: dict[str, list[tuple[Any, ...]]]) -> StoreSnapshot:
    snap = StoreSnapshot()
    for r in rows["artifacts"]:
        snap.artifacts[str(r[0])] = (str(r[1]), int(r[2]), str(r[3]), bool(r[4]))
    for r in rows["proposals"]:
        snap.proposals[str(r[0])] = (str(r[1]), str(r[2]), str(r[3]), str(r[4]), int(r[5]))
    snap.threads = {str(r[0]): str(r[1]) for r in rows["threads"]}
    snap.messages = {str(r[0]): (str(r[1]), str(r[2]), str(r[3])) for r in rows["messages"]}
    snap.turn_requests = [str(r[0]) for r in rows["turn_requests"]]
    return snap


def read_sqlite_store(path: Path) -> StoreSnapshot:
    """The reference store's SQLite file, opened read-only."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return _snapshot(
            {name: conn.execute(sql.format(p="")).fetchall() for name, sql in _QUERIES}
        )
    finally:
        conn.close()


def read_postgres_store(dsn: str) -> StoreSnapshot:
    """The reference store's PostgreSQL tables (prefixed ``store_``)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return _snapshot(
            {name: list(conn.execute(sql.format(p="store_")).fetchall()) for name, sql in _QUERIES}
        )


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


@dataclass
class Findings:
    """What the checker found in one seed."""

    duplicates: int = 0
    losses: int = 0
    violations: list[str] = field(default_factory=list)

    def duplicate(self, text: str, count: int = 1) -> None:
        self.duplicates += count
        self.violations.append(f"DUPLICATE x{count}: {text}")

    def lost(self, text: str, count: int = 1) -> None:
        self.losses += count
        self.violations.append(f"LOSS x{count}: {text}")

    def violation(self, text: str) -> None:
        self.violations.append(text)


@dataclass
class _Expected:
    """What the plan intends, by derived id and by content."""

    artifacts: dict[str, tuple[str, Any]] = field(default_factory=dict)  # id -> kind, data
    create_proposals: dict[str, tuple[str, Any]] = field(default_factory=dict)
    edit_proposals: dict[str, tuple[str, str]] = field(default_factory=dict)  # id -> art, path
    edit_proposal_values: Counter[tuple[str, str, bytes]] = field(default_factory=Counter)
    threads: dict[str, str] = field(default_factory=dict)
    messages: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    steps: dict[str, tuple[str, Effect, str]] = field(default_factory=dict)  # tool, effect, run
    # Counts by content.
    artifact_bodies: Counter[tuple[str, bytes]] = field(default_factory=Counter)
    proposal_bodies: Counter[tuple[str, bytes]] = field(default_factory=Counter)
    titles: Counter[str] = field(default_factory=Counter)
    posts: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    # (run, op index) -> the ids an answer to that write may name.
    answers: dict[tuple[str, int], frozenset[str]] = field(default_factory=dict)


def _expected(plan: SeedPlan, results: dict[str, RunResult]) -> _Expected:
    want = _Expected()
    for run in plan.runs:
        _expect_run(run, results[run.run_id], want)
    return want


class _Deriver:
    """The ids one segment's writes get, in plan order (docs/derived-ids.md)."""

    def __init__(self, run_id: str, checkpoint: str) -> None:
        self.run_id = run_id
        self.checkpoint = checkpoint
        self.taken: Counter[tuple[ids.WriteType, ids.Identity]] = Counter()
        # The ids of each identity's writes: identical writes of one segment are
        # interchangeable, so an answer may name any of them.
        self.made: defaultdict[tuple[ids.WriteType, ids.Identity], set[str]] = defaultdict(set)
        self.last: tuple[ids.WriteType, ids.Identity] | None = None

    def __call__(self, write_type: ids.WriteType, identity: ids.Identity) -> str:
        occurrence = self.taken[(write_type, identity)]
        self.taken[(write_type, identity)] += 1
        self.last = (write_type, identity)
        made = ids.derive_id(
            write_type,
            run_id=self.run_id,
            checkpoint=self.checkpoint,
            identity=identity,
            occurrence=occurrence,
            scheme=ids.SCHEME_VERSION,  # the sidecars under test begin new runs on it
        )
        self.made[(write_type, identity)].add(made)
        return made


def _expect_run(run: RunPlan, result: RunResult, want: _Expected) -> None:
    by_index: dict[int, str] = {}
    for segment in run.segments:
        derive = _Deriver(run.run_id, segment.checkpoint)
        keyed: dict[int, tuple[ids.WriteType, ids.Identity]] = {}
        for op in segment.ops():
            derive.last = None
            _expect_op(run, op, derive, by_index, want)
            if derive.last is not None:
                keyed[op.index] = derive.last
        for index, key in keyed.items():
            want.answers[(run.run_id, index)] = frozenset(derive.made[key])


def _expect_op(
    run: RunPlan, op: Op, derive: _Deriver, by_index: dict[int, str], want: _Expected
) -> None:
    if op.kind in (OpKind.CREATE, OpKind.PROPOSE_CREATE):
        digest = canonical.json_digest(op.data)
        body = (op.artifact_kind, canonical.canonical(op.data["body"]))
        if op.kind is OpKind.CREATE:
            made = derive(ids.WriteType.CREATE, ids.create_identity(op.artifact_kind, digest))
            want.artifacts[made] = (op.artifact_kind, json.loads(json.dumps(op.data)))
            want.artifact_bodies[body] += 1
            by_index[op.index] = made
        else:
            made = derive(
                ids.WriteType.CREATE_PROPOSAL, ids.create_identity(op.artifact_kind, digest)
            )
            want.create_proposals[made] = (op.artifact_kind, op.data)
            want.proposal_bodies[body] += 1
    elif op.kind is OpKind.EDIT:
        artifact_id = by_index[op.target]
        set_value(want.artifacts[artifact_id][1], op.path, op.value)
    elif op.kind is OpKind.PROPOSE_EDIT:
        artifact_id = by_index[op.target]
        identity = ids.edit_proposal_identity(
            artifact_id, op.path, canonical.json_digest(op.value), scheme=ids.SCHEME_VERSION
        )
        made = derive(ids.WriteType.EDIT_PROPOSAL, identity)
        want.edit_proposals[made] = (artifact_id, op.path)
        want.edit_proposal_values[(artifact_id, op.path, canonical.canonical(op.value))] += 1
    elif op.kind is OpKind.THREAD:
        made = derive(ids.WriteType.THREAD, ids.thread_identity(op.title))
        want.threads[made] = op.title
        want.titles[op.title] += 1
        by_index[op.index] = made
    elif op.kind in (OpKind.NOTICE, OpKind.SEND):
        thread_id = by_index[op.target]
        write_type = ids.WriteType.NOTICE if op.kind is OpKind.NOTICE else ids.WriteType.MESSAGE
        kind = "notice" if op.kind is OpKind.NOTICE else "message"
        made = derive(write_type, ids.post_identity(thread_id, canonical.text_digest(op.text)))
        want.messages[made] = (thread_id, kind, op.text)
        want.posts[(thread_id, kind, op.text)] += 1
    else:
        made = derive(
            ids.WriteType.STEP, ids.step_identity(op.tool, canonical.json_digest(op.args))
        )
        want.steps[made] = (op.tool, op.effect, run.run_id)


def set_value(document: Any, path: str, value: Any) -> None:
    """What an edit does to the model: set ``value`` at ``path``; an array's element is
    replaced, an object's member added or replaced (ADR-0019: an edit sets a value)."""
    pointer = jsonpointer.JsonPointer(path)
    parent = jsonpointer.JsonPointer.from_parts(pointer.parts[:-1]).resolve(document)
    token = pointer.parts[-1]
    if isinstance(parent, list):
        parent[int(token)] = value
    else:
        parent[token] = value


def _compare_counts(found: Findings, what: str, want: Counter[Any], have: Counter[Any]) -> None:
    for key in sorted(set(want) | set(have), key=repr):
        if have[key] > want[key]:
            found.duplicate(
                f"{what} {key!r}: {have[key]} in the store, planned {want[key]}",
                have[key] - want[key],
            )
        elif have[key] < want[key]:
            found.lost(
                f"{what} {key!r}: {have[key]} in the store, planned {want[key]}",
                want[key] - have[key],
            )


def _compare_ids(found: Findings, what: str, want: Iterable[str], have: Iterable[str]) -> None:
    expected, actual = set(want), set(have)
    for missing in sorted(expected - actual):
        found.violation(f"{what} {missing} (planned, by its derived id) is not in the store")
    for extra in sorted(actual - expected):
        found.violation(f"{what} {extra} is in the store but no planned write has its id")


def check(
    plan: SeedPlan,
    results: dict[str, RunResult],
    store: StoreSnapshot,
    reader: LedgerReader,
    gateway: GatewayRecord | None = None,
) -> Findings:
    """Hold the store and the ledger against the plan and the agent's acknowledgements, and
    a seed's gateway charges against what the upstream counted."""
    found = Findings()
    for result in results.values():
        for text in result.violations:
            found.violation(text)
        if not result.finished and not result.in_doubt_step:
            found.violation(f"{result.run_id}: the run neither finished nor settled in doubt")
    want = _expected(plan, results)
    complete = all(r.finished or r.in_doubt_step for r in results.values())

    # Every answer names an id the model gives that write (any of its identical twins').
    for result in results.values():
        for ack in result.acks:
            allowed = want.answers.get((result.run_id, ack.op_index))
            if ack.id and allowed is not None and ack.id not in allowed:
                found.violation(
                    f"{result.run_id}: op {ack.op_index} ({ack.rpc}) in {ack.attempt_id} was "
                    f"answered {ack.id} ({ack.outcome}); the model gives {sorted(allowed)}"
                )

    # By content: how many times each planned thing is in the store.
    have_bodies = Counter(
        (kind, canonical.canonical(json.loads(data)["body"]))
        for kind, _v, data, _a in store.artifacts.values()
    )
    have_proposal_bodies = Counter(
        (kind, canonical.canonical(json.loads(data)["body"]))
        for kind, data, artifact_id, _p, _b in store.proposals.values()
        if not artifact_id
    )
    have_edit_proposals: Counter[tuple[str, str, bytes]] = Counter()
    for _k, _d, artifact_id, patch_json, _b in store.proposals.values():
        if artifact_id:
            (operation,) = json.loads(patch_json)
            have_edit_proposals[
                (artifact_id, operation["path"], canonical.canonical(operation["value"]))
            ] += 1
    if complete:
        _compare_counts(found, "artifact", want.artifact_bodies, have_bodies)
        _compare_counts(found, "proposed create", want.proposal_bodies, have_proposal_bodies)
        _compare_counts(found, "proposed edit", want.edit_proposal_values, have_edit_proposals)
        _compare_counts(found, "thread titled", want.titles, Counter(store.threads.values()))
        _compare_counts(found, "message", want.posts, Counter(store.messages.values()))
        # By id: the derived-id specification says which ids the plan's writes have.
        _compare_ids(found, "artifact", want.artifacts, store.artifacts)
        _compare_ids(
            found, "proposal", [*want.create_proposals, *want.edit_proposals], store.proposals
        )
        _compare_ids(found, "thread", want.threads, store.threads)
        _compare_ids(found, "message", want.messages, store.messages)
        # Every edit's value is in place: the final document is the plan's.
        for artifact_id, (_kind, data) in want.artifacts.items():
            stored = store.artifacts.get(artifact_id)
            if stored is not None and canonical.canonical(
                json.loads(stored[2])
            ) != canonical.canonical(data):
                found.lost(
                    f"artifact {artifact_id} holds {stored[2]}, the plan leaves {json.dumps(data)}"
                )

    # A sent message and its turn request commit together: none untaken, none twice.
    turns = Counter(store.turn_requests)
    for message_id, (_thread, kind, _text) in store.messages.items():
        if kind == "message" and turns[message_id] != 1:
            found.lost(f"message {message_id} has {turns[message_id]} turn requests")
    for message_id in turns:
        if store.messages.get(message_id, ("", "", ""))[1] != "message":
            found.violation(f"turn request for {message_id}, which is no sent message")

    events = list(reader.events())
    _check_ledger(found, plan, results, store, events, want)
    if gateway is not None:
        _check_gateway(found, plan, results, events, want, gateway)
    _check_decisions(found, events)
    verdict = verify(reader)
    if not verdict.intact:
        found.violation(f"ledger chain broken at event {verdict.first_bad}: {verdict.problem}")
    return found


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


def _when(text: object) -> datetime | None:
    """A time as the ledger writes it (naive means UTC); None when unreadable."""
    try:
        stamp = datetime.fromisoformat(str(text))
    except ValueError:
        return None
    return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=UTC)


# The ledger's leave to send a step's call (sidecar.ledger.permits), by its phase's name.
_STEP_PERMIT = "step_permit"
# What ends a permitted call, recorded by the attempt that holds the permit.
_CALL_ENDS = frozenset({Phase.STEP_END, Phase.STEP_FAILED, Phase.STEP_ABORT})


def _check_decisions(found: Findings, events: list[StoredEvent]) -> None:
    """No operator's decision while a permitted call may be under way, by the ledger's own
    records and clock (design: "A send permit")."""
    by_step: defaultdict[str, list[StoredEvent]] = defaultdict(list)
    for stored in events:
        by_step[stored.event.derived_id].append(stored)
    for step_id, history in by_step.items():
        for decision in (s for s in history if s.event.phase == Phase.DECISION):
            decided_at = _when(decision.ts)
            if decision.event.detail.get("decision") == DID_NOT_RUN:
                # Permits or none: an attempt that began the step before the decision and
                # recorded its end after it was under way when decided.
                began_before = {
                    s.event.attempt_id
                    for s in history
                    if s.event.phase == Phase.STEP_BEGIN and s.seq < decision.seq
                }
                for end in history:
                    if (
                        end.event.phase == Phase.STEP_END
                        and end.seq > decision.seq
                        and end.event.attempt_id in began_before
                    ):
                        found.violation(
                            f"ledger #{end.seq}: attempt {end.event.attempt_id} ended {step_id} "
                            f"after it was decided did_not_run at #{decision.seq}: its call was "
                            "under way when decided"
                        )
            for permit in (s for s in history if s.event.phase == _STEP_PERMIT):
                if permit.seq > decision.seq:
                    began = [s for s in history if s.event.phase == Phase.STEP_BEGIN
                             and s.event.attempt_id == permit.event.attempt_id]  # fmt: skip
                    if began and began[0].seq < decision.seq:
                        found.violation(
                            f"ledger #{permit.seq}: a permit for {step_id} to attempt "
                            f"{permit.event.attempt_id}, which began it before the decision "
                            f"#{decision.seq}"
                        )
                    continue
                ends = [
                    s
                    for s in history
                    if s.event.phase in _CALL_ENDS
                    and s.event.attempt_id == permit.event.attempt_id
                    and s.seq > permit.seq
                ]
                if any(end.seq < decision.seq for end in ends):
                    continue  # the call ended before anyone decided
                deadline = _when(permit.event.detail.get("deadline", ""))
                if decided_at is not None and deadline is not None and decided_at < deadline:
                    found.violation(
                        f"ledger #{decision.seq}: {step_id} decided at {decision.ts}, while the "
                        f"call permitted at #{permit.seq} could be under way until {deadline}"
                    )
