"""A seed's plan: the runs, the writes each makes, and when processes are killed.

Everything here is a pure function of the seed, so a failing seed replays the same plan and
the same kill schedule. A run is split into segments, one per checkpoint: the queue records a
segment's checkpoint once an attempt finishes it, and a later attempt starts from there. A
segment is a list of phases; the writes of a phase do not depend on each other, so the agent
makes them in any order, or at once, and a write that needs another's id (an edit needs its
artifact, a notice its thread) comes in a later phase.

Some writes are deliberately identical: the same data created twice, the same text posted
twice to one thread, two threads of one title, the same tool called twice with the same
arguments. ADR-0019 makes each of those two writes, not one, and the checker expects two.
Identical writes in one phase are interchangeable (which gets occurrence 0 depends on the
order of the attempt), so no later write targets either of them.

Edits name members of nested objects and elements of arrays. An edit sets a value: at an
array index it replaces the element there, so edits of several indices in one phase land the
same in any order.

The seed also decides how often the agent behaves as a caller that gives up
(``caller_fault_rate``): a call with a short deadline, a call cancelled or its connection
reset mid-way, each repeated with its ``request_id`` until answered, and a second attempt of
the run begun while the first still works, as when a queue's lease runs out early.

And it decides what time does (drawn from a generator of its own, so that the writes and
kills above stay what they were): some runs end with a charge made through the sidecar's
MCP gateway to a payments upstream (chaos.upstream) whose answer may take longer than the
attempt's lease or the gateway's upstream timeout, in a segment of its own under a lease;
the sidecar may be frozen (SIGSTOP, then SIGCONT) at call counts or while that charge is
under way, for less or more than the time after which a silent sidecar's calls become
decidable; an operator may watch ``actonce audit pending`` and decide what it lists from
what the upstream counted; and on PostgreSQL that operator's clock, or the sidecar's, may
disagree with the ledger's by minutes (faketime).
"""

from __future__ import annotations

import enum
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
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
    # Chance that a write call meets a caller fault (agent.CallerFault), and that an attempt
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


def sidecar_name(number: int) -> str:
    """The harness's name of sidecar ``number``: the first is "sidecar", as with one."""
    return "sidecar" if number == 0 else f"sidecar{number}"


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
