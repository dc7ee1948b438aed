"""The agent's calls to the sidecar, made as a caller that gives up makes them, and its records.

The agent is also a caller that gives up (:class:`CallerFault`): at the seed's rate a write
is sent with a deadline of a few milliseconds, cancelled mid-way, or has its connection
closed under it, and is then repeated with the same ``request_id`` until it is answered, as
AIP-155 and every gRPC retry policy tell a caller to do; a write that failed on the
sidecar's side may be repeated the same way; and a write may be sent twice with one
``request_id``, at once or once answered, and both must get the first answer.

Everything the agent is told is recorded in its run's result (chaos.run_result): each
acknowledged write, and anything the sidecar answered that the contract does not allow. The
state the agent's parts share (its plan, its sidecars' methods, its result) is set up here.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence

import grpc
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import types_pb2
from google.protobuf.message import Message

from chaos.operator import Operator
from chaos.plan_writes import Op, RunPlan
from chaos.processes import Killer, clock
from chaos.run_result import APPLIED, Ack, RunResult
from chaos.sidecar_api import (
    _TRANSPORT_RETRYABLE,
    Api,
    AttemptFailed,
    CallerFault,
    Method,
    R,
    failure_of,
)

# The faults one write call can meet before it is repeated.
_GIVING_UP = (CallerFault.DEADLINE, CallerFault.CANCEL, CallerFault.RESET)
# How often a call given up on is repeated with its request_id before the attempt gives up.
_REPEATS = 4


def _outcome(value: int) -> str:
    return types_pb2.Outcome.Name(types_pb2.Outcome.ValueType(value))


class AgentCalls:
    """An agent's calls to the sidecar and its records of them; the state its parts share."""

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
