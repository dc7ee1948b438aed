"""What a seed's plan intends the store to hold, the model the checker holds the store to.

Counted two ways: by derived id (the ids the derived-id specification, docs/derived-ids.md,
gives each planned write, segment by segment) and by content (how many artifacts hold this
data, how many messages of this text a thread has), with the ids an answer to each write may
name (any of its identical twins') and what each edit leaves in its artifact.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import jsonpointer

from chaos.plan import SeedPlan
from chaos.plan_writes import Effect, Op, OpKind, RunPlan
from chaos.run_result import RunResult
from sidecar.rules import canonical, ids


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
