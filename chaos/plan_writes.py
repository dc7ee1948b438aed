"""The writes a run makes, phase by phase, and how a model spells their JSON.

A run is split into segments, one per checkpoint: the queue records a segment's checkpoint
once an attempt finishes it, and a later attempt starts from there. A segment is a list of
phases; the writes of a phase do not depend on each other, so the agent makes them in any
order, or at once, and a write that needs another's id (an edit needs its artifact, a notice
its thread) comes in a later phase.

Some writes are deliberately identical: the same data created twice, the same text posted
twice to one thread, two threads of one title, the same tool called twice with the same
arguments. ADR-0019 makes each of those two writes, not one, and the checker expects two.
Identical writes in one phase are interchangeable (which gets occurrence 0 depends on the
order of the attempt), so no later write targets either of them.

Edits name members of nested objects and elements of arrays. An edit sets a value: at an
array index it replaces the element there, so edits of several indices in one phase land the
same in any order.

What the writes are is the seed's; how their JSON is spelled (``render_json``) changes from
attempt to attempt, as a model's would, and the derived ids do not.
"""

from __future__ import annotations

import enum
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# Only this rule may Send; it is on the sidecar's allowlist in every seed.
SEND_RULE = "pager"
NOTICE_RULE = "triage"


class OpKind(enum.StrEnum):
    """What a planned write is."""

    CREATE = "create"
    PROPOSE_CREATE = "propose_create"
    EDIT = "edit"
    PROPOSE_EDIT = "propose_edit"
    THREAD = "thread"
    NOTICE = "notice"
    SEND = "send"
    STEP = "step"
    # A charge through the sidecar's MCP gateway (chaos.upstream), not the agent's own step.
    GATEWAY = "gateway"


class Effect(enum.IntEnum):
    """actonce.v1.ToolEffect by wire number."""

    READ_ONLY = 1
    IDEMPOTENT_WRITE = 2
    NON_IDEMPOTENT_WRITE = 3


@dataclass(frozen=True)
class Op:
    """One planned write. ``index`` names it within its run; ``target`` is the index of the
    create or thread it acts on."""

    index: int
    kind: OpKind
    artifact_kind: str = ""
    data: Any = None
    target: int = -1
    path: str = ""
    value: Any = None
    title: str = ""
    text: str = ""
    tool: str = ""
    effect: Effect = Effect.IDEMPOTENT_WRITE
    args: Any = None
    # Send the call twice with one request_id, as a transport retry would (AIP-155).
    repeat_request: bool = False


@dataclass(frozen=True)
class Segment:
    """The writes made from one checkpoint, phase by phase."""

    checkpoint: str
    phases: tuple[tuple[Op, ...], ...]
    # Each attempt of this segment begins with a lease this long (0: none).
    lease_seconds: float = 0.0

    def ops(self) -> Iterator[Op]:
        for phase in self.phases:
            yield from phase


@dataclass(frozen=True)
class RunPlan:
    """One run of a rule: its segments in order."""

    run_id: str
    rule: str
    segments: tuple[Segment, ...]

    def ops(self) -> Iterator[Op]:
        for segment in self.segments:
            yield from segment.ops()


_KINDS = ("ticket", "incident", "note")
_FIELD_KEYS = ("status", "owner", "a/b", "tilde~key", "prioritá", "n")
_NESTED_KEYS = ("x", "y", "z~1")
# Initial array elements: strings no planned value equals, so that a proposal at an index is
# never skipped because its value is already there.
_LIST_START = ("l0", "l1", "l2", "l3", "l4")
_PROPOSED_LIST = ("p0", "p1", "p2")
_TITLES = ("Disk full on db-1", "Deploy review", "Pager: 5xx spike", "Weekly triage ✓")
_TEXTS = (
    "Looking into it.",
    "Root cause: a full disk on db-1.\nCleaning up now.",
    "Escalating to the on-call engineer 🚨",
    "  leading and trailing spaces  ",
    "Résumé: tout va bien.",
    "ack",
)
_TOOLS = (
    ("lookup_customer", Effect.READ_ONLY),
    ("upsert_ticket", Effect.IDEMPOTENT_WRITE),
    ("page_oncall", Effect.IDEMPOTENT_WRITE),
)
# Only ever the last write of a run: a kill between its BeginStep and EndStep leaves it in
# doubt, and a run in doubt is settled by an operator, not by a retry.
_CHARGE = ("charge_card", Effect.NON_IDEMPOTENT_WRITE)
# The gateway's charge (chaos.upstream.TOOL), listed by the sidecar as NAME__charge.
GATEWAY_TOOL = "payments__charge"


def _json_value(rng: random.Random, depth: int = 0) -> Any:
    choice = rng.randrange(8 if depth < 2 else 5)
    if choice == 0:
        return rng.randint(-1000, 1000)
    if choice == 1:
        return rng.choice(["open", "closed", "ü", "", "line\nbreak", '"quoted"'])
    if choice == 2:
        return rng.random() < 0.5
    if choice == 3:
        return None
    if choice == 4:
        return round(rng.uniform(-100, 100), 3)
    if choice == 5:
        return [_json_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {f"k{i}": _json_value(rng, depth + 1) for i in range(rng.randint(0, 3))}


def _pointer_token(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


class _RunBuilder:
    def __init__(self, rng: random.Random, seed: int, number: int) -> None:
        self.rng = rng
        self.seed = seed
        self.number = number
        self.rule = SEND_RULE if rng.random() < 0.6 else NOTICE_RULE
        self.next_index = 0
        # Targets later writes may name: creates and threads without an identical twin in
        # their own phase.
        self.artifacts: list[int] = []
        self.threads: list[int] = []
        self.bodies: list[tuple[str, Any]] = []
        self.titles: list[str] = []
        self.posts: list[tuple[int, str]] = []
        self.steps: list[tuple[str, Effect, Any]] = []
        self.created: dict[int, Any] = {}

    def _op(self, kind: OpKind, **fields: Any) -> Op:
        op = Op(index=self.next_index, kind=kind, repeat_request=self.rng.random() < 0.1, **fields)
        self.next_index += 1
        return op

    def _create(self, kind: OpKind) -> Op:
        if self.bodies and self.rng.random() < 0.3:
            artifact_kind, data = self.rng.choice(self.bodies)
        else:
            n = len(self.bodies)
            body = {"seed": self.seed, "run": self.number, "n": n, "v": _json_value(self.rng)}
            artifact_kind = self.rng.choice(_KINDS)
            # Edits set values under "fields", "nested" and in "list", which exist from the
            # start: an edit's parent must exist, and an index must name an element.
            data = {
                "body": body,
                "fields": {},
                "nested": {"a": {"b": {}}},
                "list": list(_LIST_START[: self.rng.randint(2, len(_LIST_START))]),
                "plist": list(_PROPOSED_LIST),
            }
            self.bodies.append((artifact_kind, data))
        op = self._op(kind, artifact_kind=artifact_kind, data=data)
        self.created[op.index] = data
        return op

    def _phase(self, size: int, *, segment_edits: dict[tuple[int, str], Any]) -> list[Op]:
        ops: list[Op] = []
        edited: dict[tuple[int, str], Any] = {}
        for _ in range(size):
            weights = {
                OpKind.CREATE: 3.0,
                OpKind.PROPOSE_CREATE: 1.0,
                OpKind.THREAD: 1.5,
                OpKind.STEP: 1.5,
                OpKind.EDIT: 3.5 if self.artifacts else 0.0,
                OpKind.PROPOSE_EDIT: 1.0 if self.artifacts else 0.0,
                OpKind.NOTICE: 2.0 if self.threads else 0.0,
                OpKind.SEND: 1.5 if self.threads and self.rule == SEND_RULE else 0.0,
            }
            kinds = [k for k, w in weights.items() if w > 0]
            kind = self.rng.choices(kinds, weights=[weights[k] for k in kinds])[0]
            if kind in (OpKind.CREATE, OpKind.PROPOSE_CREATE):
                ops.append(self._create(kind))
            elif kind is OpKind.THREAD:
                if self.titles and self.rng.random() < 0.25:
                    title = self.rng.choice(self.titles)
                else:
                    title = (
                        f"{self.rng.choice(_TITLES)} #{self.seed}.{self.number}.{len(self.titles)}"
                    )
                    self.titles.append(title)
                ops.append(self._op(kind, title=title))
            elif kind is OpKind.STEP:
                if self.steps and self.rng.random() < 0.3:
                    tool, effect, args = self.rng.choice(self.steps)
                else:
                    tool, effect = self.rng.choice(_TOOLS)
                    args = {"seed": self.seed, "run": self.number, "q": _json_value(self.rng)}
                    self.steps.append((tool, effect, args))
                ops.append(self._op(kind, tool=tool, effect=effect, args=args))
            elif kind is OpKind.EDIT:
                target = self.rng.choice(self.artifacts)
                path = self._edit_path(target)
                if (target, path) in edited:
                    # Two edits of one path in one phase could land in either order; only an
                    # identical one is order-free (the second is skipped).
                    value = edited[(target, path)]
                elif (target, path) in segment_edits and self.rng.random() < 0.3:
                    value = segment_edits[(target, path)]  # already there: skipped
                else:
                    value = _json_value(self.rng)
                edited[(target, path)] = value
                ops.append(self._op(kind, target=target, path=path, value=value))
            elif kind is OpKind.PROPOSE_EDIT:
                # Proposed values live under paths no direct edit sets, so a proposal is never
                # skipped because a direct edit put its value there first.
                target = self.rng.choice(self.artifacts)
                path = (
                    f"/fields/proposed{self.rng.randrange(3)}"
                    if self.rng.random() < 0.5
                    else f"/plist/{self.rng.randrange(len(_PROPOSED_LIST))}"
                )
                ops.append(self._op(kind, target=target, path=path, value=_json_value(self.rng)))
            else:
                if self.posts and self.rng.random() < 0.3:
                    thread, text = self.rng.choice(self.posts)
                else:
                    thread = self.rng.choice(self.threads)
                    text = (
                        f"{self.rng.choice(_TEXTS)} [{self.seed}.{self.number}.{len(self.posts)}]"
                    )
                    self.posts.append((thread, text))
                ops.append(self._op(kind, target=thread, text=text))
        for (target, path), value in edited.items():
            segment_edits[(target, path)] = value
        self._publish(ops)
        return ops

    def _edit_path(self, target: int) -> str:
        """A path a direct edit may set: an object member, nested or not, or an element."""
        where = self.rng.random()
        if where < 0.4:
            return f"/fields/{_pointer_token(self.rng.choice(_FIELD_KEYS))}"
        if where < 0.7:
            data = self.created[target]
            return f"/list/{self.rng.randrange(len(data['list']))}"
        parent = self.rng.choice(("/nested/a", "/nested/a/b"))
        return f"{parent}/{_pointer_token(self.rng.choice(_NESTED_KEYS))}"

    def _publish(self, ops: list[Op]) -> None:
        # A create or thread with an identical twin in its phase may get either id: never a
        # target, so that what a later write lands on is decided by the plan alone.
        def identity(op: Op) -> str:
            if op.kind is OpKind.CREATE:
                return json.dumps([op.artifact_kind, op.data], sort_keys=True)
            return op.title

        for kind, targets in ((OpKind.CREATE, self.artifacts), (OpKind.THREAD, self.threads)):
            same = [op for op in ops if op.kind is kind]
            keys = [identity(op) for op in same]
            targets.extend(
                op.index for op, key in zip(same, keys, strict=True) if keys.count(key) == 1
            )

    def build(self) -> RunPlan:
        segments: list[Segment] = []
        for number in range(self.rng.randint(1, 3)):
            segment_edits: dict[tuple[int, str], Any] = {}
            phases = [
                tuple(self._phase(self.rng.randint(2, 5), segment_edits=segment_edits))
                for _ in range(self.rng.randint(2, 3))
            ]
            segments.append(Segment(checkpoint=f"cp-{number}", phases=tuple(phases)))
        if self.rng.random() < 0.35:
            tool, effect = _CHARGE
            charge = self._op(
                OpKind.STEP,
                tool=tool,
                effect=effect,
                args={"seed": self.seed, "run": self.number, "amount": 42},
            )
            last = segments[-1]
            segments[-1] = Segment(last.checkpoint, (*last.phases, (charge,)))
        return RunPlan(
            run_id=f"chaos-{self.seed}-{self.number}", rule=self.rule, segments=tuple(segments)
        )


def render_json(value: Any, rng: random.Random) -> str:
    """JSON text of ``value`` as a model might emit it on one attempt or another.

    Key order, spacing, escaping of non-ASCII and ``2.0`` against ``2`` vary; the canonical
    form (RFC 8785), and so the derived id, does not.
    """
    return json.dumps(
        _reshuffle(value, rng),
        ensure_ascii=rng.random() < 0.5,
        separators=(",", ":") if rng.random() < 0.5 else (", ", ": "),
    )


def _reshuffle(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {key: _reshuffle(item, rng) for key, item in items}
    if isinstance(value, list):
        return [_reshuffle(item, rng) for item in value]
    if isinstance(value, int) and not isinstance(value, bool) and rng.random() < 0.3:
        return float(value)  # written "N.0"
    return value
