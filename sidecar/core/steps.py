"""Steps: the agent's own tools, bracketed by BeginStep and EndStep (or AbortStep).

A step takes its id as a write does (take the id, release; see
:mod:`sidecar.core.writes`), and audits itself by its declared effect: fail
closed for a write step, best effort for a read-only one (docs/design.md,
"Steps"). Beginning a step asks the ledger whether an earlier attempt
already ended it (its result is answered again), or began a non-idempotent
write and never ended it (in doubt: a person decides). A read-only step is run
every time.

Within one attempt, a step is under way from its begin to its end: a BeginStep
without a request identity that is identical to a step still running, or to one
whose call was sent and failed (it may have acted), is that step repeated. It
waits for the step, then gets its result; a non-idempotent step that did not end
is ``IN_DOUBT``; an idempotent or read-only one is run again under the same id.
Only once the step ended is an identical BeginStep a new step; not a keyed one: the key
names one step, and a BeginStep under it in the same attempt, by any request identity, is
that step repeated, its result once it ended, as a redelivery's is.

A step is one write in its attempt's counts (EndAttempt): its begin's outcome counts it,
made now or by an earlier attempt; its end or abort settles that write and counts
nothing more, so that one tool call is one write on every front.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Hashable
from datetime import datetime

import structlog

from sidecar.core import attempts, audit, step_history, writes
from sidecar.core.attempts import Attempt, Claim, StepState, StepStatus
from sidecar.core.audit import Audit, Subject, event
from sidecar.core.types import Outcome, StepPermit, WriteResult
from sidecar.core.writes import Landing, Write, WritePath
from sidecar.errors import (
    ActonceError,
    AuditPersistenceFailed,
    InDoubt,
    InvalidArgument,
    LeaseExpired,
    StepAborted,
    StepEnded,
    UnknownStep,
)
from sidecar.ledger import permits
from sidecar.ledger.base import AuditEvent, AuditLedger, LedgerError, Phase, StoredEvent
from sidecar.rules import canonical, effects, ids

log = structlog.get_logger()

# What a failed step's error keeps in the ledger, at most: enough for an operator to read.
ERROR_TEXT_BYTES = 2048


class Steps:
    """BeginStep, EndStep, AbortStep, and a failed step's record, of an attempt."""

    def __init__(self, path: WritePath, audit: Audit, ledger: AuditLedger) -> None:
        self.path = path
        self.audit = audit
        self.ledger = ledger

    # -- BeginStep --------------------------------------------------------------

    async def begin(
        self,
        attempt: Attempt,
        *,
        tool: str,
        declared: effects.ToolEffect,
        args_digest: str,
        request_id: str,
        wait_seconds: float,
        key: str = "",
        sent_by_sidecar: bool = False,
    ) -> WriteResult:
        identity = (
            ids.keyed_step_identity(tool, key) if key else ids.step_identity(tool, args_digest)
        )
        detail = {"tool": tool, "effect": declared.name}
        step = Write(
            rpc="BeginStep",
            write_type=ids.WriteType.STEP,
            identity=identity,
            request_id=request_id,
            fingerprint=("BeginStep", tool, args_digest, int(declared), key),
            digest=args_digest,
            detail={**detail, "key": key} if key else detail,
            key=key,
        )
        canonical.require_request_id(request_id)
        writes.bind_key(attempt, step)
        claim = Claim()
        if request_id:
            claim = await writes.claim_or_replay(attempt, request_id, step.fingerprint)
            if claim.answer is not None:
                repeated = await _repeat_of_identified(
                    attempt, claim.answer, declared, wait_seconds
                )
                if repeated is not None:
                    return repeated
                claim = Claim()  # its step was aborted: begun anew, under the same id
        else:
            repeated = await _repeat_of_open_step(attempt, step.identity, declared, wait_seconds)
            if repeated is not None:
                return repeated
        if key:
            repeated = await _repeat_of_keyed_step(attempt, step, claim, declared, wait_seconds)
            if repeated is not None:
                return repeated
        landing = self.path.take_id(attempt, step, claim)
        # Registered before anything is awaited: an identical call from now on repeats it.
        state = StepState(
            tool,
            declared,
            identity=step.identity,
            occurrence=landing.occurrence,
            step_id=landing.derived_id,
            sent_by_sidecar=sent_by_sidecar,
        )
        attempt.steps[landing.derived_id] = state
        return await self.path.to_the_end(attempt, self._land_begin(landing, state))

    async def _land_begin(self, landing: Landing, state: StepState) -> WriteResult:
        try:
            await self._audit_begin(landing, state)
            result = await self._look_up_earlier(landing, state)
            await self._audit(
                state,
                writes.outcome_event(landing, result),
                because="the step began but its audit outcome was not persisted",
                lost="audit_outcome_lost_fail_soft",
            )
        except BaseException as error:  # a cancelled begin, too, settles what it held
            _refused(landing.attempt, state)
            writes.release(landing, error)
            raise
        return writes.answered(landing, result)

    async def _audit_begin(self, landing: Landing, state: StepState) -> None:
        began = event(
            landing.attempt,
            "BeginStep",
            Phase.STEP_BEGIN,
            landing.subject,
            detail=landing.write.detail,
        )
        await self._audit(
            state,
            began,
            because="audit intent not persisted, the store was not called",
            lost="audit_intent_lost_fail_soft",
        )

    async def _look_up_earlier(self, landing: Landing, state: StepState) -> WriteResult:
        # A refusal found in the ledger (in doubt, say) closes this try: recorded, best effort.
        try:
            return await self._find_earlier(landing, state)
        except ActonceError as error:
            refusal = event(
                landing.attempt, "BeginStep", Phase.OUTCOME, landing.subject, refused=error
            )
            await self.audit.best_effort(refusal, lost="audit_failure_record_lost")
            raise

    async def _find_earlier(self, landing: Landing, state: StepState) -> WriteResult:
        """What earlier attempts did with this step: ended it (its result again), left
        a non-idempotent write begun (in doubt), or nothing that stops this one."""
        attempt, step_id = landing.attempt, landing.derived_id
        history = await self._history(step_id, state)
        earlier = [e for e in history if e.event.attempt_id != attempt.attempt_id]
        effect = step_history.effect_with_earlier(state.effect, earlier)
        if effect is not effects.ToolEffect.READ_ONLY:  # a read-only step runs every time
            result = step_history.ended_result(earlier, history)
            if result is not None:
                state.settle(StepStatus.ENDED, result)
                return WriteResult(Outcome.ALREADY_APPLIED, id=step_id, result_json=result)
        step_history.refuse_if_in_doubt(earlier, history, state, step_id)
        return WriteResult(Outcome.APPLIED, id=step_id)

    async def _history(self, step_id: str, state: StepState) -> list[StoredEvent]:
        try:
            return await self.ledger.events_for(step_id)
        except LedgerError as exc:
            if state.is_write:
                raise AuditPersistenceFailed(
                    f"the ledger could not be read to tell whether step {step_id} "
                    f"already ran: {exc}"
                ) from exc
            log.warning("step_history_unreadable", error=str(exc))
            return []

    # -- a send permit -------------------------------------------------------------

    async def permit(
        self,
        attempt: Attempt,
        step_id: str,
        *,
        timeout_seconds: float,
        keyed: bool,
        sidecar_id: str,
    ) -> StepPermit:
        """Leave to send a begun step's call, and the call's one deadline
        (sidecar.ledger.permits). A non-idempotent or keyed step's permit is granted by the
        ledger, atomically against fencing, the lease by the ledger's clock and operators'
        decisions; any other step's is its budget alone. A call refused its permit was
        never sent: its step is aborted here, and the refusal raised."""
        started = time.monotonic()  # before anything is awaited: the bound ends no later
        state = self.begun(attempt, step_id)
        ends = attempts.lease_end(attempt)
        seconds = timeout_seconds
        if ends is not None:
            seconds = min(seconds, (ends - attempts.now()).total_seconds())
        if seconds <= 0.0:  # by this process's clock already: nothing to ask the ledger
            await self._not_permitted(attempt, state, _lease_passed(ends))
        if not (keyed or state.effect is effects.ToolEffect.NON_IDEMPOTENT_WRITE):
            return StepPermit(step_id, seconds, started)
        asked = event(
            attempt,
            "PermitStep",
            Phase.STEP_PERMIT,
            Subject(ids.WriteType.STEP.value, step_id, occurrence=state.occurrence),
            detail={
                "tool": state.tool,
                "effect": state.effect.name,
                permits.ASKED_SECONDS: timeout_seconds,
                permits.LEASE_DEADLINE: ends.isoformat() if ends is not None else "",
                permits.SIDECAR: sidecar_id,
            },
        )
        try:
            seq = await self.ledger.append(asked)
        except LedgerError as exc:
            await self._not_permitted(attempt, state, audit.not_durable(asked, exc))
            raise  # not reached: _not_permitted raises
        return await self._granted(step_id, seq, started)

    async def _granted(self, step_id: str, seq: int, started: float) -> StepPermit:
        # The ledger fixed the budget by its own clock: this process keeps to that one.
        try:
            history = await self.ledger.events_for(step_id)
        except LedgerError as exc:
            raise AuditPersistenceFailed(
                f"the permit of step {step_id} is recorded but could not be read back: {exc}"
            ) from exc
        for stored in history:
            if stored.seq == seq:
                detail = stored.event.detail
                seconds = float(detail.get(permits.SECONDS, 0.0))
                return StepPermit(step_id, seconds, started, str(detail.get(permits.DEADLINE, "")))
        raise AuditPersistenceFailed(f"the permit of step {step_id} was not found once recorded")

    async def _not_permitted(self, attempt: Attempt, state: StepState, error: ActonceError) -> None:
        """Abort a step whose call may not be sent, then raise ``error``: nothing was sent,
        so the step is not in doubt. An abort that cannot be recorded leaves it begun: a
        person then decides it (it never acted)."""
        with contextlib.suppress(ActonceError):
            await self._abort(attempt, state, canonical.as_reason(f"not sent: {error.message}"), "")
        error.nothing_sent = True
        raise error

    # -- EndStep, AbortStep, and a failed call ----------------------------------

    def begun(self, attempt: Attempt, step_id: str) -> StepState:
        """The step ``attempt`` began as ``step_id``; UNKNOWN_STEP if none."""
        state = attempt.steps.get(step_id)
        if state is None:
            raise UnknownStep(
                f"step {step_id} was not begun by attempt {attempt.attempt_id}",
                metadata={"step_id": step_id},
            )
        return state

    def settled_by(self, attempt: Attempt, step_id: str, *, by_sidecar: bool) -> StepState:
        """The begun step ``step_id``, for a caller to record how its call ended: refused
        when the sidecar sends its call and the caller is not the sidecar. A call under way
        that another caller aborted would be sent again by the next try, though it acted."""
        state = self.begun(attempt, step_id)
        if state.sent_by_sidecar and not by_sidecar:
            raise InvalidArgument(
                "step_id",
                f"{step_id} is a call the sidecar's gateway sends: how it ended is its "
                "answer's to say, not an EndStep's or an AbortStep's",
            )
        return state

    async def end(
        self,
        attempt: Attempt,
        step_id: str,
        *,
        result_json: str,
        result_digest: str,
        request_id: str,
        by_sidecar: bool = False,
    ) -> WriteResult:
        state = self.settled_by(attempt, step_id, by_sidecar=by_sidecar)
        return await self._once(
            attempt,
            request_id,
            ("EndStep", step_id, result_digest),
            lambda: self._end(attempt, state, result_json, result_digest, request_id),
        )

    async def _end(
        self,
        attempt: Attempt,
        state: StepState,
        result_json: str,
        result_digest: str,
        request_id: str,
    ) -> WriteResult:
        # One step ends once: a second EndStep, concurrent or later, waits for the
        # first and appends nothing, counts nothing.
        step_id = state.step_id
        async with state.ending:
            if state.ended:
                return WriteResult(Outcome.ALREADY_APPLIED, id=step_id)
            if state.aborted:
                raise StepAborted(
                    f"step {step_id} was aborted: its effect was declared not to have "
                    "happened, so it cannot end; begin it again to run it",
                    metadata={"step_id": step_id},
                )
            subject = Subject(ids.WriteType.STEP.value, step_id, request_id, digest=result_digest)
            ended = event(
                attempt,
                "EndStep",
                Phase.STEP_END,
                subject,
                detail={
                    "tool": state.tool,
                    "effect": state.effect.name,
                    "result_json": result_json,
                },
            )
            await self._audit(
                state,
                ended,
                because="the step's end was not persisted",
                lost="step_end_audit_failed",
            )
            state.settle(StepStatus.ENDED, result_json)
            return WriteResult(Outcome.APPLIED, id=step_id)

    async def abort(
        self,
        attempt: Attempt,
        step_id: str,
        *,
        reason: str,
        request_id: str,
        by_sidecar: bool = False,
    ) -> WriteResult:
        """Record that a begun step's effect did not happen, so a later try may run it.

        Audited like a step's end: fail-closed for a write step. The step gives
        its occurrence back, as a write that failed before it could land does,
        so that the same step begun again, now or by a retry, has the same id.
        """
        state = self.settled_by(attempt, step_id, by_sidecar=by_sidecar)
        return await self._once(
            attempt,
            request_id,
            ("AbortStep", step_id, reason),
            lambda: self._abort(attempt, state, reason, request_id),
        )

    async def _abort(
        self, attempt: Attempt, state: StepState, reason: str, request_id: str
    ) -> WriteResult:
        # An abort and an end of one step exclude each other: whichever comes
        # second finds the step settled.
        step_id = state.step_id
        async with state.ending:
            if state.ended:
                raise StepEnded(
                    f"step {step_id} has ended: its effect happened and cannot be aborted",
                    metadata={"step_id": step_id},
                )
            if state.aborted:
                return WriteResult(Outcome.ALREADY_APPLIED, id=step_id)
            subject = Subject(ids.WriteType.STEP.value, step_id, request_id)
            aborted = event(
                attempt,
                "AbortStep",
                Phase.STEP_ABORT,
                subject,
                detail={"tool": state.tool, "reason": reason},
            )
            await self._audit(
                state,
                aborted,
                because="the step's abort was not persisted",
                lost="step_abort_audit_failed",
            )
            state.settle(StepStatus.ABORTED)
            attempt.occurrences.give_back(ids.WriteType.STEP, state.identity, state.occurrence)
            return WriteResult(Outcome.APPLIED, id=step_id)

    async def fail(
        self,
        attempt: Attempt,
        step_id: str,
        *,
        error: str,
        request_id: str,
        by_sidecar: bool = False,
    ) -> WriteResult:
        """Record that a begun step's call was sent and failed, or that its tool answered
        an error: it may have acted, and it has not ended. A later attempt never takes
        it for done: it runs an idempotent or read-only step again, and finds a
        non-idempotent one in doubt, with ``error`` for the operator to read."""
        state = self.settled_by(attempt, step_id, by_sidecar=by_sidecar)
        fingerprint = ("FailStep", step_id, error)
        return await self._once(
            attempt, request_id, fingerprint, lambda: self._fail(attempt, state, error)
        )

    async def _fail(self, attempt: Attempt, state: StepState, error: str) -> WriteResult:
        step_id = state.step_id
        async with state.ending:
            if state.ended:
                raise StepEnded(
                    f"step {step_id} has ended: its effect happened; it cannot fail now",
                    metadata={"step_id": step_id},
                )
            if state.aborted or state.status is StepStatus.FAILED:
                return WriteResult(Outcome.APPLIED, id=step_id)
            subject = Subject(ids.WriteType.STEP.value, step_id)
            failed = event(
                attempt,
                "FailStep",
                Phase.STEP_FAILED,
                subject,
                detail={"tool": state.tool, "error": _bounded(error)},
            )
            try:
                await self._audit(
                    state,
                    failed,
                    because="the step's failure was not persisted",
                    lost="step_failure_audit_failed",
                )
            finally:
                # Whether or not the ledger took it, the step may have acted: a repeat
                # in this attempt must not wait for it any more.
                state.settle(StepStatus.FAILED)
            return WriteResult(Outcome.APPLIED, id=step_id)

    async def _once(
        self,
        attempt: Attempt,
        request_id: str,
        fingerprint: Hashable,
        work: Callable[[], Awaitable[WriteResult]],
    ) -> WriteResult:
        """``work``'s answer, kept for ``request_id`` when there is one: a repeat of it
        gets that answer (the step's own state settles repeats without one)."""
        claim = Claim()
        if request_id:
            claim = await writes.claim_or_replay(attempt, request_id, fingerprint)
            if claim.answer is not None:
                return claim.answer
        return await self.path.to_the_end(attempt, _answer_once(claim, work()))

    async def _audit(
        self, state: StepState, record: AuditEvent, *, because: str, lost: str
    ) -> None:
        # A write step's audit fails closed; a read-only step's is best effort.
        if state.is_write:
            await self.audit.required(record, because=because)
        else:
            await self.audit.best_effort(record, lost=lost)


async def _repeat_of_open_step(
    attempt: Attempt, identity: ids.Identity, declared: effects.ToolEffect, wait_seconds: float
) -> WriteResult | None:
    """The answer to a BeginStep that repeats a step of this attempt still open, or
    None when it repeats none (a new step begins)."""
    state = attempt.open_step(identity)
    while state is not None:
        repeated = await _repeat_of(state, declared, wait_seconds)
        if repeated is not None:
            return repeated
        state = attempt.open_step(identity)
    return None


async def _repeat_of_keyed_step(
    attempt: Attempt,
    step: Write,
    claim: Claim,
    declared: effects.ToolEffect,
    wait_seconds: float,
) -> WriteResult | None:
    """The answer to a keyed BeginStep (``claim`` its call's) whose key this attempt already
    began a step under: the key names one step, so it is that step repeated, ended or not
    (:func:`_repeat_of`), where an unkeyed step once ended is a new one. None when the
    attempt began none under the key, or that step was aborted: it begins anew."""
    keyed_id = writes.derive(attempt, step.write_type, step.identity, 0, keyed=True)
    state = attempt.steps.get(keyed_id)
    if state is None:
        return None
    try:
        repeated = await _repeat_of(state, declared, wait_seconds)
    except BaseException:
        claim.released()
        raise
    if repeated is not None:
        claim.answered(repeated)
    return repeated


async def _repeat_of_identified(
    attempt: Attempt, began: WriteResult, declared: effects.ToolEffect, wait_seconds: float
) -> WriteResult | None:
    """The answer to a BeginStep whose request identity an earlier BeginStep of this attempt
    was answered under (``began``). The identity stands for the whole call, steps included:
    a repeat never sends again. A step an earlier attempt ended answers its result; one this
    attempt began answers as its step stands (:func:`_repeat_of`); None when that step was
    aborted, so that it begins anew under the same id."""
    if began.outcome is not Outcome.APPLIED:
        return began
    state = attempt.steps.get(began.id)
    if state is None:
        return None
    return await _repeat_of(state, declared, wait_seconds)


async def _repeat_of(
    state: StepState, declared: effects.ToolEffect, wait_seconds: float
) -> WriteResult | None:
    """A repeat of ``state``'s step: it waits (``wait_seconds`` at most) for a step still
    running, then gets its result once it ended; a step still running past the wait, or
    sent and failed, is in doubt when non-idempotent and run again under the same id (the
    same key) otherwise. None when the step was aborted or refused: it never acted."""
    if state.status is StepStatus.RUNNING:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(state.settled.wait(), timeout=max(wait_seconds, 0.0))
    if state.status is StepStatus.ENDED:
        return WriteResult(Outcome.ALREADY_APPLIED, id=state.step_id, result_json=state.result_json)
    if state.status in (StepStatus.ABORTED, StepStatus.REFUSED):
        return None
    return _open_step_again(state, declared)


def _open_step_again(state: StepState, declared: effects.ToolEffect) -> WriteResult:
    # Still running past the wait, or sent and failed: it may have acted.
    if max(state.effect, declared) is effects.ToolEffect.NON_IDEMPOTENT_WRITE:
        running = state.status is StepStatus.RUNNING
        raise InDoubt(
            f"step {state.step_id} ({state.tool}) is a non-idempotent write that "
            + ("is still running" if running else "was sent and did not end")
            + " in this attempt; an identical call is that step repeated, and it is not "
            "run again automatically",
            step_id=state.step_id,
            tool=state.tool,
        )
    state.run_again()
    return WriteResult(Outcome.APPLIED, id=state.step_id)


def _refused(attempt: Attempt, state: StepState) -> None:
    # A begin that failed ran nothing: an identical call waiting for it begins anew.
    state.settle(StepStatus.REFUSED)
    if attempt.steps.get(state.step_id) is state:
        del attempt.steps[state.step_id]


async def _answer_once(claim: Claim, work: Awaitable[WriteResult]) -> WriteResult:
    """``work``'s answer, recorded on ``claim``; a failure releases it."""
    try:
        result = await work
    except BaseException:  # a cancelled call, too, releases its claim
        claim.released()
        raise
    claim.answered(result)
    return result


def _lease_passed(ends: datetime | None) -> LeaseExpired:
    when = ends.isoformat() if ends is not None else "?"
    return LeaseExpired(
        f"the attempt's lease ran out at {when}; the call was not sent: the queue retries the run",
        metadata={"lease_deadline": when},
    )


def _bounded(text: str) -> str:
    encoded = text.encode("utf-8", "replace")
    if len(encoded) <= ERROR_TEXT_BYTES:
        return text
    return encoded[: ERROR_TEXT_BYTES - 3].decode("utf-8", "ignore") + "..."
