"""The scripted agent and the queue that retries its run.

The agent makes a run's planned writes through the sidecar, segment by segment. Each attempt
begins from the run's last recorded checkpoint; when any call of the attempt fails, the
attempt is over and the queue begins a new one, as a queue whose lease ran out would. The
order of a phase's writes, whether they go at once, and how their JSON is spelled change from
attempt to attempt, as a model's would; what the writes are does not.

Everything the agent was told is recorded: each acknowledged write (the checker demands a
durable audit outcome for each, and the object in the store), each tool it actually ran
(the checker demands that a non-idempotent tool ran at most once), and anything the sidecar
answered that the contract does not allow.

It is also a caller that gives up (:class:`CallerFault`): at the seed's rate a write is sent
with a deadline of a few milliseconds, cancelled mid-way, or has its connection closed under
it, and is then repeated with the same ``request_id`` until it is answered, as AIP-155 and
every gRPC retry policy tell a caller to do; a write that failed on the sidecar's side may be
repeated the same way; and an attempt may get a twin, a second attempt of the same run begun
while the first still works, as when a queue hands a run on before its lease really ended.

A gateway charge (``OpKind.GATEWAY``) is a tools/call through the sidecar's MCP front, made
with the MCP SDK's client; a caller that gives up on it repeats it with its request identity.
A charge that may have acted (``UPSTREAM_FAILED``, ``UNKNOWN``) is delivered again, and one
in doubt waits, when the seed has an operator, for the operator's decision
(chaos.operator), and is then delivered again; without one it is left for a person.

A call refused ``AUDIT_PERSISTENCE_FAILED`` (``UNKNOWN``: the ledger did not make an event
durable within the sidecar's bound, as under a freeze of the sidecar or a machine loaded far
past its cores) is never repeated, as no client repeats it (docs/design.md, "Refusals
and failure classes"): the queue dead-letters the run, and the person who looks at the dead letters
delivers it again once the ledger answers, as a queue's redrive does. The redelivery begins a
new attempt, whose writes get their derived ids back; what the failed call may have left (an
intent without its outcome, a step begun) is for the new attempt to meet as any other.
"""

from __future__ import annotations

import contextlib
import enum
import json
import random
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar, cast

import grpc
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import types_pb2
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from chaos.gateway import Answer, Unanswered, call_charge
from chaos.operator import Operator
from chaos.plan import attempt_sidecar
from chaos.plan_kills import sidecar_name
from chaos.plan_writes import Effect, Op, OpKind, RunPlan, Segment, render_json
from chaos.processes import Killer, clock
from chaos.upstream import charge_id

SERVICE = "actonce.v1.RunActionsService"
# How long the agent waits for one answer: far above any healthy call, so that only a
# stuck sidecar runs into it.
CALL_TIMEOUT_SECONDS = 15.0
# A gateway charge's answer may wait out a freeze, a slow handshake and a slow upstream.
GATEWAY_TIMEOUT_SECONDS = 30.0
# How often a gateway charge's caller gives up and repeats it, or sends it twice, with its
# request identity.
CHARGE_FAULT_RATE = 0.5
# How long a charge in doubt waits for the operator: its call's deadline, the silence after
# which a frozen or killed sidecar's call may be decided, and the operator's rounds.
DECISION_WAIT_SECONDS = 90.0
# The refusal a client never repeats, after which the run is dead-lettered (docs/design.md),
# and how long the run stays there before the person who looks at it delivers it again.
AUDIT_PERSISTENCE_FAILED = "AUDIT_PERSISTENCE_FAILED"
REDRIVE_SECONDS = 1.0

APPLIED = "OUTCOME_APPLIED"
ALREADY_APPLIED = "OUTCOME_ALREADY_APPLIED"
SKIPPED = "OUTCOME_SKIPPED"

# Transport failures with no ErrorInfo that mean "the sidecar is not there": retry the run.
_TRANSPORT_RETRYABLE = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
}

R = TypeVar("R", bound=Message)

_CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 500),
]


class CallerFault(enum.StrEnum):
    """How a caller gives up on a call, or calls again (counted by kind in the summary)."""

    DEADLINE = "deadline"  # a deadline of a few milliseconds, then a repeat
    CANCEL = "cancel"  # the call cancelled mid-way, then a repeat
    RESET = "reset"  # the call's connection closed under it, then a repeat
    TWIN = "twin"  # two calls at once with one request_id
    REPEAT = "repeat"  # a repeat with the same request_id after a failure the sidecar answered
    OVERLAP = "overlap"  # a second attempt of the run begun while the first still works
    GIVE_UP = "give_up"  # a gateway charge given up on, then repeated with its identity


# The faults one write call can meet before it is repeated.
_GIVING_UP = (CallerFault.DEADLINE, CallerFault.CANCEL, CallerFault.RESET)
# How often a call given up on is repeated with its request_id before the attempt gives up.
_REPEATS = 4


@dataclass(frozen=True)
class Failure:
    """A failed call as the agent sees it: its status and, if any, its ErrorInfo."""

    code: str
    reason: str
    failure_class: str
    message: str
    metadata: dict[str, str]

    @property
    def retryable(self) -> bool:
        if self.reason:
            return self.failure_class == "RETRYABLE"
        return self.code in {c.name for c in _TRANSPORT_RETRYABLE}

    def __str__(self) -> str:
        return f"{self.code} {self.reason or '(no ErrorInfo)'}/{self.failure_class}: {self.message}"


def failure_of(error: grpc.RpcError) -> Failure:
    """Decode a failed call: status code, and the ErrorInfo the sidecar attaches."""
    call = cast(grpc.Call, error)
    code = call.code()
    status = rpc_status.from_call(call)
    if status is not None:
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                return Failure(
                    code.name,
                    info.reason,
                    info.metadata.get("failure_class", ""),
                    status.message,
                    dict(info.metadata),
                )
    return Failure(code.name, "", "", call.details() or "", {})


class AttemptFailed(Exception):
    """A call of the attempt failed; the attempt is over. ``lease_lapsed``: its begin was
    refused for a lease already past when it arrived (the sidecar was frozen longer than the
    lease while the begin waited), as a queue's lease runs out before its worker starts."""

    def __init__(self, failure: Failure, *, lease_lapsed: bool = False) -> None:
        super().__init__(str(failure))
        self.failure = failure
        self.lease_lapsed = lease_lapsed


@dataclass(frozen=True)
class Method(Generic[R]):
    """One RPC of the service, called as an agent calls it: on the sidecar its attempt went
    to, or on the one ``sidecar`` pins (BeginAttempt, which has no attempt yet)."""

    name: str
    response: type[R]
    api: Api
    sidecar: int | None = None

    def on(self, sidecar: int) -> Method[R]:
        return replace(self, sidecar=sidecar)

    def sidecar_for(self, request: Message) -> int:
        return self.sidecar if self.sidecar is not None else self.api.sidecar_of(request)

    def call(self, request: Message) -> grpc.UnaryUnaryMultiCallable[Message, Message]:
        """The callable of the sidecar ``request`` goes to."""
        return self.api.callable(self.sidecar_for(request), self.name, self.response)

    def __call__(self, request: Message) -> R:
        return cast(R, self.call(request)(request, timeout=CALL_TIMEOUT_SECONDS))


class Api:
    """Blocking calls to the RunActionsService of one sidecar or several sharing a ledger
    and a store; a call of an attempt goes to the sidecar its BeginAttempt went to."""

    def __init__(self, target: str | Sequence[str]) -> None:
        self.targets = [target] if isinstance(target, str) else list(target)
        self.target = self.targets[0]
        # Short reconnect backoff: after a restart the agent should find the sidecar at once,
        # not after gRPC's default backoff of up to two minutes.
        self.channels = [grpc.insecure_channel(t, options=_CHANNEL_OPTIONS) for t in self.targets]
        self.channel = self.channels[0]
        self._callables: dict[tuple[int, str], grpc.UnaryUnaryMultiCallable[Message, Message]] = {}
        self._routes: dict[str, int] = {}
        self._lock = threading.Lock()

    def method(self, name: str, response: type[R]) -> Method[R]:
        return Method(name, response, self)

    def route(self, attempt_id: str, sidecar: int) -> None:
        """Send the calls of ``attempt_id`` to sidecar number ``sidecar``."""
        with self._lock:
            self._routes[attempt_id] = sidecar

    def sidecar_of(self, request: Message) -> int:
        """The sidecar a request goes to: its attempt's (every request but BeginAttempt's
        names its attempt)."""
        with self._lock:
            return self._routes.get(getattr(request, "attempt_id", ""), 0)

    def callable(
        self, sidecar: int, name: str, response: type[Message]
    ) -> grpc.UnaryUnaryMultiCallable[Message, Message]:
        with self._lock:
            key = (sidecar, name)
            if key not in self._callables:
                self._callables[key] = self._callable(self.channels[sidecar], name, response)
            return self._callables[key]

    @staticmethod
    def _callable(
        channel: grpc.Channel, name: str, response: type[Message]
    ) -> grpc.UnaryUnaryMultiCallable[Message, Message]:
        return channel.unary_unary(
            f"/{SERVICE}/{name}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=response.FromString,
        )

    def give_up(
        self, method: Method[R], request: Message, fault: CallerFault, rng: random.Random
    ) -> R:
        """Make the call as a caller that gives up on it: its answer if one came in time,
        else the grpc.RpcError (or grpc.FutureCancelledError) the caller saw."""
        if fault is CallerFault.DEADLINE:
            return cast(R, method.call(request)(request, timeout=rng.uniform(0.001, 0.060)))
        if fault is CallerFault.CANCEL:
            future = method.call(request).future(request, timeout=CALL_TIMEOUT_SECONDS)
            time.sleep(rng.uniform(0.0, 0.040))
            future.cancel()
            return cast(R, future.result())
        # RESET: a connection of its own, closed while the call is in flight.
        target = self.targets[method.sidecar_for(request)]
        channel = grpc.insecure_channel(target, options=_CHANNEL_OPTIONS)
        try:
            call = self._callable(channel, method.name, method.response)
            future = call.future(request, timeout=CALL_TIMEOUT_SECONDS)
            time.sleep(rng.uniform(0.0, 0.040))
        finally:
            channel.close()
        return cast(R, future.result())

    def close(self) -> None:
        for channel in self.channels:
            channel.close()


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


def expected_result(op: Op) -> Any:
    """What a tool returns: a function of what the call is, so that a result recorded by an
    earlier attempt is what this one would have got."""
    return {"tool": op.tool, "args": op.args}


def _outcome(value: int) -> str:
    return types_pb2.Outcome.Name(types_pb2.Outcome.ValueType(value))


def _outcome_value(name: str) -> int:
    """An outcome's number from its name; 0 (unspecified) for a name the API lacks."""
    try:
        return int(types_pb2.Outcome.Value(name))
    except ValueError:
        return 0


def _charges_upstream(segment: Segment) -> bool:
    return any(op.kind is OpKind.GATEWAY for op in segment.ops())


class Agent:
    """Runs one run to the end: its writes, and the queue's retries."""

    def __init__(
        self,
        plan: RunPlan,
        api: Api,
        killer: Killer,
        *,
        seed: int,
        lost_checkpoint_rate: float,
        caller_fault_rate: float = 0.0,
        max_attempts: int = 300,
        deadline_seconds: float = 240.0,
        gateway: str | Sequence[str] = "",
        operator: Operator | None = None,
    ) -> None:
        self.plan = plan
        # Each sidecar's MCP front, http://HOST:PORT, in the order of api's targets.
        self.gateways = [gateway] if isinstance(gateway, str) else list(gateway)
        self.operator = operator
        self.killer = killer
        self.seed = seed
        self.lost_checkpoint_rate = lost_checkpoint_rate
        self.caller_fault_rate = caller_fault_rate
        self.api = api
        self.max_attempts = max_attempts
        self.deadline_seconds = deadline_seconds
        self.result = RunResult(plan.run_id)
        self._decisions_seen = 0
        self._lock = threading.Lock()
        self._begin = api.method("BeginAttempt", pb.BeginAttemptResponse)
        self._end = api.method("EndAttempt", pb.EndAttemptResponse)
        self._create = api.method("Create", pb.CreateResponse)
        self._edit = api.method("Edit", pb.EditResponse)
        self._notice = api.method("Notice", pb.NoticeResponse)
        self._send = api.method("Send", pb.SendResponse)
        self._thread = api.method("CreateThread", pb.CreateThreadResponse)
        self._read = api.method("Read", pb.ReadResponse)
        self._begin_step = api.method("BeginStep", pb.BeginStepResponse)
        self._end_step = api.method("EndStep", pb.EndStepResponse)

    # -- the queue --------------------------------------------------------------

    def run(self) -> RunResult:
        queue_rng = random.Random(f"{self.seed}/{self.plan.run_id}/queue")
        ids: dict[int, str] = {}
        lost: set[int] = set()
        segment_no = 0
        failures_in_a_row = 0
        started = time.monotonic()
        while segment_no < len(self.plan.segments):
            if (
                self.result.attempts >= self.max_attempts
                or time.monotonic() - started > self.deadline_seconds
            ):
                self._violation(
                    f"run did not finish after {self.result.attempts} attempts "
                    f"(segment {segment_no})"
                )
                return self.result
            self.result.attempts += 1
            rng = random.Random(f"{self.seed}/{self.plan.run_id}/{self.result.attempts}")
            segment = self.plan.segments[segment_no]
            known = dict(ids)
            twin: threading.Thread | None = None
            if rng.random() < self.caller_fault_rate / 2:
                # The queue hands the run on while this attempt still works: a second worker
                # begins an attempt of its own, which fences this one.
                self._count(CallerFault.OVERLAP)
                twin_rng = random.Random(f"{self.seed}/{self.plan.run_id}/{self.result.attempts}/t")
                twin = threading.Thread(
                    target=self._twin,
                    args=(segment, dict(ids), twin_rng, self._sidecar(self.result.attempts, True)),
                )
                twin.start()
            try:
                self._attempt(segment, known, rng, self._sidecar(self.result.attempts))
            except AttemptFailed as failed:
                failure = failed.failure
                self.result.failures[failure.reason or failure.code] += 1
                if failed.lease_lapsed:
                    continue  # the lease ran out before the begin arrived: the queue delivers again
                charging = _charges_upstream(segment)
                if failure.reason == "IN_DOUBT":
                    # ADR-111: never re-run automatically; the run settles for an operator.
                    step_id = failure.metadata.get("step_id", "?")
                    if charging and self.operator is not None:
                        if self._decided(step_id):
                            continue  # the operator decided: the queue delivers it again
                        return self.result
                    self.result.in_doubt_step = step_id
                    if self.operator is not None:
                        self.operator.unwatch(self.plan.run_id)
                    return self.result
                if failure.reason == AUDIT_PERSISTENCE_FAILED:
                    self._dead_letter(failure)
                    time.sleep(REDRIVE_SECONDS)
                    continue  # a person delivers the run again
                # A charge that may have acted: the run is delivered again, and finds it
                # in doubt.
                may_have_acted = charging and failure.failure_class == "UNKNOWN"
                if not failure.retryable and not may_have_acted:
                    self._violation(f"attempt {self.result.attempts} got {failure}")
                    return self.result
                failures_in_a_row += 1
                time.sleep(min(0.02 * 2**failures_in_a_row, 0.5))
                continue
            finally:
                if twin is not None:
                    twin.join()
            failures_in_a_row = 0
            if segment_no not in lost and queue_rng.random() < self.lost_checkpoint_rate:
                # The worker died right after the attempt finished: the checkpoint was never
                # recorded, and the segment runs again from the old one.
                lost.add(segment_no)
                self.result.checkpoints_lost += 1
                continue
            ids = known
            segment_no += 1
        self.result.finished = True
        if self.operator is not None:
            self.operator.unwatch(self.plan.run_id)
        return self.result

    def _dead_letter(self, failure: Failure) -> None:
        with self._lock:
            self.result.dead_lettered += 1
            self.result.trail.append(f"{clock()} dead-lettered: {failure}")

    def _decided(self, step_id: str) -> bool:
        """Wait for the operator's next decision on the run's charge; a violation when none
        comes (the step never became decidable)."""
        assert self.operator is not None
        self.result.gateway_step = self.result.gateway_step or step_id
        since = self._decisions_seen
        self._trail(f"in doubt: waiting for the operator on {step_id}")
        decision = self.operator.wait_decided(self.plan.run_id, since, DECISION_WAIT_SECONDS)
        if decision is not None:
            self._trail(f"decided {decision.decision} (the upstream showed {decision.counted})")
        if decision is None:
            self.result.in_doubt_step = step_id
            self._violation(
                f"charge {step_id} in doubt was not listed as decidable within "
                f"{DECISION_WAIT_SECONDS:g} s"
            )
            self.operator.unwatch(self.plan.run_id)
            return False
        self._decisions_seen += 1
        return True

    # -- one attempt ------------------------------------------------------------

    def _sidecar(self, attempt: int, twin: bool = False) -> int:
        """The sidecar attempt number ``attempt`` (or its twin) goes to."""
        sidecars = len(self.api.targets)
        return attempt_sidecar(self.seed, self.plan.run_id, attempt, sidecars, twin=twin)

    def _service(self, attempt: str) -> str:
        """The harness's name of the sidecar ``attempt`` is on, for a kill waiting for it."""
        return sidecar_name(self.api.sidecar_of(pb.EndAttemptRequest(attempt_id=attempt)))

    def _attempt(
        self, segment: Segment, known: dict[int, str], rng: random.Random, sidecar: int = 0
    ) -> None:
        request = pb.BeginAttemptRequest(
            run_id=self.plan.run_id, rule=self.plan.rule, checkpoint=segment.checkpoint
        )
        if segment.lease_seconds:
            # The queue's lease, by the harness's clock: the ledger's on this host.
            lease = Timestamp()
            lease.FromNanoseconds(int((time.time() + segment.lease_seconds) * 1e9))
            request.lease_deadline.CopyFrom(lease)
        sent = time.monotonic()
        try:
            attempt = self._call(self._begin.on(sidecar), request).attempt_id
        except AttemptFailed as failed:
            lapsed = (
                segment.lease_seconds > 0
                and time.monotonic() - sent >= segment.lease_seconds
                and failed.failure.reason == "INVALID_ARGUMENT"
                and "lease_deadline" in failed.failure.message
            )
            raise AttemptFailed(failed.failure, lease_lapsed=lapsed) from None
        self.api.route(attempt, sidecar)
        with self._lock:
            self.result.on_sidecars.append(sidecar)
        try:
            for phase in segment.phases:
                self._phase(attempt, phase, known, rng)
                if rng.random() < 0.3:
                    self._read_back(attempt, known, rng)
        except AttemptFailed as failed:
            if failed.failure.reason == "IN_DOUBT" and _charges_upstream(segment):
                # The worker parks the run for a person and lets its attempt go: a live
                # attempt on a live sidecar keeps its step in flight, listed for nobody.
                with contextlib.suppress(AttemptFailed):
                    self._call(self._end, pb.EndAttemptRequest(attempt_id=attempt))
            raise
        self._call(self._end, pb.EndAttemptRequest(attempt_id=attempt))

    def _twin(
        self, segment: Segment, known: dict[int, str], rng: random.Random, sidecar: int = 0
    ) -> None:
        """A second worker's attempt of the run: its answers count like any, its end does
        not move the queue on."""
        time.sleep(rng.uniform(0.0, 0.05))
        try:
            self._attempt(segment, known, rng, sidecar)
        except AttemptFailed as failed:
            failure = failed.failure
            # Fenced, in doubt about a step the other attempt began, or a gateway charge that
            # may have acted: each as it should be.
            may_have_acted = _charges_upstream(segment) and failure.failure_class == "UNKNOWN"
            if failed.lease_lapsed:
                return  # its lease ran out before its begin arrived
            if failure.reason == AUDIT_PERSISTENCE_FAILED:
                self._dead_letter(failure)  # its delivery only: the queue's goes on
            elif not failure.retryable and failure.reason != "IN_DOUBT" and not may_have_acted:
                self._violation(f"a twin attempt got {failure}")

    def _phase(
        self, attempt: str, phase: tuple[Op, ...], known: dict[int, str], rng: random.Random
    ) -> None:
        ops = list(phase)
        rng.shuffle(ops)
        workers = rng.choice((1, 1, 2, 4))
        # Each write gets its own generator, seeded here, so that threads do not race on one.
        seeds = [rng.random() for _ in ops]
        found: dict[int, str] = {}
        if workers == 1:
            for op, s in zip(ops, seeds, strict=True):
                found.update(self._op(attempt, op, known, random.Random(s)))
        else:
            with ThreadPoolExecutor(workers) as pool:
                futures = [
                    pool.submit(self._op, attempt, op, known, random.Random(s))
                    for op, s in zip(ops, seeds, strict=True)
                ]
                first: AttemptFailed | None = None
                for future in futures:
                    try:
                        found.update(future.result())
                    except AttemptFailed as failed:
                        first = first or failed
                if first is not None:
                    raise first
        known.update(found)

    def _op(
        self, attempt: str, op: Op, known: dict[int, str], rng: random.Random
    ) -> dict[int, str]:
        request_id = f"{attempt[-8:]}:{op.index}"
        if op.kind in (OpKind.CREATE, OpKind.PROPOSE_CREATE):
            propose = op.kind is OpKind.PROPOSE_CREATE
            created = self._write(
                self._create,
                pb.CreateRequest(
                    attempt_id=attempt,
                    kind=op.artifact_kind,
                    data_json=render_json(op.data, rng),
                    propose=propose,
                    request_id=request_id,
                ),
                op,
                rng,
            )
            self._expect(op, created.outcome, (APPLIED, ALREADY_APPLIED))
            self._ack(attempt, op, "Create", created.id, created.outcome, created.version)
            return {} if propose else {op.index: created.id}
        if op.kind in (OpKind.EDIT, OpKind.PROPOSE_EDIT):
            propose = op.kind is OpKind.PROPOSE_EDIT
            artifact_id = known[op.target]
            edited = self._write(
                self._edit,
                pb.EditRequest(
                    attempt_id=attempt,
                    artifact_id=artifact_id,
                    path=op.path,
                    value_json=render_json(op.value, rng),
                    propose=propose,
                    request_id=request_id,
                ),
                op,
                rng,
            )
            allowed = (APPLIED, ALREADY_APPLIED) if propose else (APPLIED, SKIPPED)
            self._expect(op, edited.outcome, allowed)
            self._ack(
                attempt,
                op,
                "Edit",
                edited.proposal_id,
                edited.outcome,
                edited.version,
                artifact_id=artifact_id,
                path=op.path,
            )
            return {}
        if op.kind is OpKind.THREAD:
            thread = self._write(
                self._thread,
                pb.CreateThreadRequest(attempt_id=attempt, title=op.title, request_id=request_id),
                op,
                rng,
            )
            self._expect(op, thread.outcome, (APPLIED, ALREADY_APPLIED))
            self._ack(attempt, op, "CreateThread", thread.thread_id, thread.outcome)
            return {op.index: thread.thread_id}
        if op.kind in (OpKind.NOTICE, OpKind.SEND):
            if op.kind is OpKind.NOTICE:
                posted: pb.NoticeResponse | pb.SendResponse = self._write(
                    self._notice,
                    pb.NoticeRequest(
                        attempt_id=attempt,
                        thread_id=known[op.target],
                        text=op.text,
                        request_id=request_id,
                    ),
                    op,
                    rng,
                )
            else:
                posted = self._write(
                    self._send,
                    pb.SendRequest(
                        attempt_id=attempt,
                        thread_id=known[op.target],
                        text=op.text,
                        request_id=request_id,
                    ),
                    op,
                    rng,
                )
            self._expect(op, posted.outcome, (APPLIED, ALREADY_APPLIED))
            rpc = "Notice" if op.kind is OpKind.NOTICE else "Send"
            self._ack(attempt, op, rpc, posted.message_id, posted.outcome)
            return {}
        if op.kind is OpKind.GATEWAY:
            self._charge(attempt, op, rng, request_id)
            return {}
        self._step(attempt, op, rng, request_id)
        return {}

    def _charge(self, attempt: str, op: Op, rng: random.Random, request_id: str) -> None:
        """The gateway charge: a tools/call through the MCP front, maybe given up on and
        repeated with its request identity, maybe sent twice at once with it."""
        self.killer.before_step(self.plan.run_id, self._service(attempt))
        if self.operator is not None:
            self.operator.watch(self.plan.run_id)
        in_header = rng.random() < 0.5
        # Far more often than a write: a charge is made once or twice a seed, and a repeat of
        # its request identity is where a charge was found made twice.
        if rng.random() < CHARGE_FAULT_RATE:
            fault = rng.choice((CallerFault.GIVE_UP, CallerFault.TWIN))
            self._count(fault)
            if fault is CallerFault.TWIN and rng.random() < 0.5:
                # Repeated once answered: the recorded answer, never a second charge.
                self._charge_once(attempt, op, request_id, in_header, GATEWAY_TIMEOUT_SECONDS)
                self._charge_once(attempt, op, request_id, in_header, GATEWAY_TIMEOUT_SECONDS)
                return
            if fault is CallerFault.TWIN:
                twin = threading.Thread(
                    target=self._charge_once,
                    args=(attempt, op, request_id, in_header, GATEWAY_TIMEOUT_SECONDS, True),
                )
                twin.start()
                try:
                    self._charge_once(attempt, op, request_id, in_header, GATEWAY_TIMEOUT_SECONDS)
                finally:
                    twin.join()
                return
            try:
                self._charge_once(attempt, op, request_id, in_header, rng.uniform(0.2, 1.5))
                return
            except AttemptFailed as failed:
                if failed.failure.reason:
                    raise  # answered: a repeat would be answered the same
            self._charge_once(attempt, op, request_id, in_header, GATEWAY_TIMEOUT_SECONDS)
            return
        # Without a request identity as often as with one: a plain call, made once.
        identity = request_id if rng.random() < 0.5 else ""
        self._charge_once(attempt, op, identity, in_header, GATEWAY_TIMEOUT_SECONDS)

    def _charge_once(
        self,
        attempt: str,
        op: Op,
        request_id: str,
        in_header: bool,
        timeout: float,
        quiet: bool = False,
    ) -> None:
        """One call of the charge; AttemptFailed unless it was answered as done (``quiet``:
        a twin's failure is its own, the other call's answer the attempt's)."""
        self.killer.before_call()
        self._trail(f"{attempt[-6:]} {request_id or '-'} calls, for up to {timeout:.1f}s")
        try:
            answer = call_charge(
                self.gateways[self.api.sidecar_of(pb.EndAttemptRequest(attempt_id=attempt))],
                attempt, op.tool, op.args,
                timeout=timeout, request_id=request_id, in_header=in_header,
            )  # fmt: skip
        except Unanswered as gone:
            self._trail(f"{attempt[-6:]} {request_id or '-'} unanswered in {timeout:.1f}s: {gone}")
            if quiet:
                return
            raise AttemptFailed(Failure("UNAVAILABLE", "", "", str(gone), {})) from None
        said = answer.reason or answer.outcome
        self._trail(f"{attempt[-6:]} {request_id or '-'} {said} {answer.charge_id}".strip())
        self._answered(attempt, op, answer, quiet)

    def _answered(self, attempt: str, op: Op, answer: Answer, quiet: bool) -> None:
        step_id = answer.step_id or answer.metadata.get("step_id", "")
        if step_id:
            with self._lock:
                self.result.gateway_step = self.result.gateway_step or step_id
        if answer.error:
            if not answer.reason:
                self._violation(f"op {op.index}: a gateway error without a reason")
            if quiet:
                return
            failure = Failure(
                "GATEWAY", answer.reason, answer.failure_class, answer.message, answer.metadata
            )
            raise AttemptFailed(failure)
        self._expect(op, _outcome_value(answer.outcome), (APPLIED, ALREADY_APPLIED))
        first = charge_id(str(op.args["customer"]), 1)
        if answer.charge_id != first:
            self._violation(f"op {op.index}: the charge answered {answer.charge_id}, not {first}")
        with self._lock:
            self.result.gateway_answers.append(
                GatewayAnswer(self.plan.run_id, attempt, step_id, answer.outcome, answer.charge_id)
            )

    def _step(self, attempt: str, op: Op, rng: random.Random, request_id: str) -> None:
        if op.effect is Effect.NON_IDEMPOTENT_WRITE:
            self.killer.before_step(self.plan.run_id, self._service(attempt))
        began = self._write(
            self._begin_step,
            pb.BeginStepRequest(
                attempt_id=attempt,
                tool=op.tool,
                effect=int(op.effect),  # type: ignore[arg-type]
                args_json=render_json(op.args, rng),
                request_id=request_id,
            ),
            op,
            rng,
        )
        self._expect(op, began.outcome, (APPLIED, ALREADY_APPLIED))
        self._ack(attempt, op, "BeginStep", began.step_id, began.outcome, effect=int(op.effect))
        if _outcome(began.outcome) == ALREADY_APPLIED:
            # An earlier attempt ran it and recorded what it returned: not run again.
            recorded = json.loads(began.result_json) if began.result_json else None
            if recorded != expected_result(op):
                self._violation(f"step {began.step_id} replayed result {began.result_json!r}")
            return
        with self._lock:
            self.result.executions.append(
                Execution(self.plan.run_id, began.step_id, op.tool, op.effect)
            )
        ended = self._write(
            self._end_step,
            pb.EndStepRequest(
                attempt_id=attempt,
                step_id=began.step_id,
                result_json=render_json(expected_result(op), rng),
                request_id=request_id + ":end",
            ),
            op,
            rng,
        )
        self._expect(op, ended.outcome, (APPLIED, ALREADY_APPLIED))
        self._ack(attempt, op, "EndStep", began.step_id, ended.outcome, effect=int(op.effect))

    def _read_back(self, attempt: str, known: dict[int, str], rng: random.Random) -> None:
        if not known:
            return
        index = rng.choice(sorted(known))
        target = known[index]
        request = (
            pb.ReadRequest(attempt_id=attempt, thread_id=target)
            if target.startswith("thr_")
            else pb.ReadRequest(attempt_id=attempt, artifact_id=target)
        )
        answer = self._call(self._read, request)
        if target.startswith("art_"):
            op = next(op for op in self.plan.ops() if op.index == index)
            data = json.loads(answer.artifact.data_json)
            if answer.artifact.id != target or data.get("body") != op.data["body"]:
                self._violation(f"Read of {target} answered another artifact's data")

    # -- calls ------------------------------------------------------------------

    def _call(self, method: Method[R], request: Message) -> R:
        self.killer.before_call()
        try:
            return method(request)
        except grpc.RpcError as error:
            failure = failure_of(error)
            if not failure.reason and failure.code not in {c.name for c in _TRANSPORT_RETRYABLE}:
                self._violation(f"a status without ErrorInfo: {failure}")
            raise AttemptFailed(failure) from None

    def _write(self, method: Method[R], request: Message, op: Op, rng: random.Random) -> R:
        """One write as this caller makes it: at once, twice at once, or given up on and
        repeated with its request_id."""
        if op.repeat_request:
            self._count(CallerFault.TWIN)
            return self._twice(method, request, op)
        if rng.random() < self.caller_fault_rate:
            fault = rng.choice(_GIVING_UP)
            self._count(fault)
            self.killer.before_call()
            try:
                return self.api.give_up(method, request, fault, rng)
            except grpc.FutureCancelledError:
                pass
            except grpc.RpcError as error:
                failure = failure_of(error)
                if failure.reason and not failure.retryable:
                    raise AttemptFailed(failure) from None
            return self._repeat(method, request)
        try:
            return self._call(method, request)
        except AttemptFailed as failed:
            if rng.random() >= self.caller_fault_rate:
                raise
            if failed.failure.retryable:
                self._count(CallerFault.REPEAT)
                return self._repeat(method, request)
            if failed.failure.reason == "IN_DOUBT":
                self._count(CallerFault.REPEAT)
                self._repeat_in_doubt(method, request, op)
            raise

    def _repeat_in_doubt(self, method: Method[R], request: Message, op: Op) -> None:
        """A step refused IN_DOUBT, asked again with its request_id, must not be run now."""
        try:
            again = self._call(method, request)
        except AttemptFailed:
            return
        if _outcome(getattr(again, "outcome", 0)) == APPLIED:
            self._violation(f"op {op.index}: a step refused IN_DOUBT was let run when repeated")

    def _repeat(self, method: Method[R], request: Message) -> R:
        """Send the call again with its request_id until it is answered, a few times."""
        for tries in range(_REPEATS):
            try:
                return self._call(method, request)
            except AttemptFailed as failed:
                if not failed.failure.retryable or tries == _REPEATS - 1:
                    raise
                time.sleep(0.02 * (tries + 1))
        raise AssertionError("unreachable")

    def _twice(self, method: Method[R], request: Message, op: Op) -> R:
        # A transport retry of the same call: one request_id, sent again at once or after the
        # first answer. Both must get the first answer, and the write is made once.
        second: list[R | AttemptFailed] = []

        def again() -> None:
            try:
                second.append(self._call(method, request))
            except AttemptFailed as failed:
                second.append(failed)

        if op.index % 2:
            twin = threading.Thread(target=again)
            twin.start()
            first = self._call(method, request)
            twin.join()
        else:
            first = self._call(method, request)
            again()
        answer = second[0]
        if isinstance(answer, AttemptFailed):
            raise answer
        if answer.SerializeToString(deterministic=True) != first.SerializeToString(
            deterministic=True
        ):
            self._violation(f"op {op.index}: a repeated request_id got another answer")
        return first

    def _count(self, fault: CallerFault) -> None:
        with self._lock:
            self.result.caller_faults[fault.value] += 1

    # -- records ----------------------------------------------------------------

    def _expect(self, op: Op, outcome: int, allowed: tuple[str, ...]) -> None:
        if _outcome(outcome) not in allowed:
            self._violation(f"op {op.index} ({op.kind}) answered {_outcome(outcome)}")

    def _ack(
        self,
        attempt: str,
        op: Op,
        rpc: str,
        id_: str,
        outcome: int,
        version: int = 0,
        *,
        artifact_id: str = "",
        path: str = "",
        effect: int = 0,
    ) -> None:
        ack = Ack(
            self.plan.run_id,
            attempt,
            op.index,
            rpc,
            id_,
            _outcome(outcome),
            version,
            artifact_id,
            path,
            effect,
        )
        with self._lock:
            self.result.acks.append(ack)

    def _trail(self, text: str) -> None:
        with self._lock:
            self.result.trail.append(f"{clock()} {text}")

    def _violation(self, text: str) -> None:
        with self._lock:
            self.result.violations.append(f"{self.plan.run_id}: {text}")
