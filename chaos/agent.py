"""The scripted agent and the queue that retries its run.

The agent makes a run's planned writes through the sidecar, segment by segment. Each attempt
begins from the run's last recorded checkpoint; when any call of the attempt fails, the
attempt is over and the queue begins a new one, as a queue whose lease ran out would. An
attempt may get a twin, a second attempt of the same run begun while the first still works,
as when a queue hands a run on before its lease really ended.

This module is the queue's part: the run's deliveries, each an attempt begun on the sidecar
the seed picks. What an attempt writes, and in what order, is the scripted model's
(chaos.agent_model); its steps and its gateway charge are its tool calls
(chaos.agent_tools); each call to the sidecar, and the records of what it answered, are
chaos.agent_calls'.

A gateway charge that may have acted (``UPSTREAM_FAILED``, ``UNKNOWN``) is delivered again,
and one in doubt waits, when the seed has an operator, for the operator's decision
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
import random
import threading
import time

from actonce_api.v1 import run_actions_pb2 as pb
from google.protobuf.timestamp_pb2 import Timestamp

from chaos.agent_model import AgentModel
from chaos.plan import attempt_sidecar
from chaos.plan_writes import OpKind, Segment
from chaos.processes import clock
from chaos.run_result import RunResult
from chaos.sidecar_api import AttemptFailed, CallerFault, Failure

# How long a charge in doubt waits for the operator: its call's deadline, the silence after
# which a frozen or killed sidecar's call may be decided, and the operator's rounds.
DECISION_WAIT_SECONDS = 90.0
# The refusal a client never repeats, after which the run is dead-lettered (docs/design.md),
# and how long the run stays there before the person who looks at it delivers it again.
AUDIT_PERSISTENCE_FAILED = "AUDIT_PERSISTENCE_FAILED"
REDRIVE_SECONDS = 1.0


def _charges_upstream(segment: Segment) -> bool:
    return any(op.kind is OpKind.GATEWAY for op in segment.ops())


class Agent(AgentModel):
    """Runs one run to the end: its writes, and the queue's retries."""

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
