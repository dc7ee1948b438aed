"""The agent's tool calls: a step it runs itself between BeginStep and EndStep, and a charge.

A step the sidecar answers ``ALREADY_APPLIED`` is not run again, and the result it recorded
must be what the tool returns (``expected_result``); each tool the agent actually runs is
recorded, as the checker demands that a non-idempotent tool ran at most once.

A gateway charge (``OpKind.GATEWAY``) is a tools/call through the sidecar's MCP front, made
with the MCP SDK's client; a caller that gives up on it repeats it with its request identity,
or sends it twice at once with it. An answer as done must name the upstream's first charge.
"""

from __future__ import annotations

import json
import random
import threading
from typing import Any

from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import types_pb2

from chaos.agent_calls import AgentCalls, _outcome
from chaos.gateway import Answer, Unanswered, call_charge
from chaos.plan_kills import sidecar_name
from chaos.plan_writes import Effect, Op, render_json
from chaos.run_result import ALREADY_APPLIED, APPLIED, Execution, GatewayAnswer
from chaos.sidecar_api import AttemptFailed, CallerFault, Failure
from chaos.upstream import charge_id

# A gateway charge's answer may wait out a freeze, a slow handshake and a slow upstream.
GATEWAY_TIMEOUT_SECONDS = 30.0
# How often a gateway charge's caller gives up and repeats it, or sends it twice, with its
# request identity.
CHARGE_FAULT_RATE = 0.5


def expected_result(op: Op) -> Any:
    """What a tool returns: a function of what the call is, so that a result recorded by an
    earlier attempt is what this one would have got."""
    return {"tool": op.tool, "args": op.args}


def _outcome_value(name: str) -> int:
    """An outcome's number from its name; 0 (unspecified) for a name the API lacks."""
    try:
        return int(types_pb2.Outcome.Value(name))
    except ValueError:
        return 0


class AgentTools(AgentCalls):
    """The agent's tool calls: the steps it runs itself, and the gateway charge."""

    def _service(self, attempt: str) -> str:
        """The harness's name of the sidecar ``attempt`` is on, for a kill waiting for it."""
        return sidecar_name(self.api.sidecar_of(pb.EndAttemptRequest(attempt_id=attempt)))

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
