"""Steps: the agent's own tools, bracketed by BeginStep and EndStep (or AbortStep).

A step takes its id as a write does (claim or replay, take the id, release; see
:mod:`sidecar.core.writes`), and audits itself by its declared effect: fail
closed for a write step, best effort for a read-only one (docs/design.md,
"Steps"). Beginning a step asks the ledger whether an earlier attempt
already ended it (its result is answered again), or began a non-idempotent
write and never ended it (in doubt: a person decides).
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence

import structlog

from sidecar.core import writes
from sidecar.core.attempts import Attempt, StepState
from sidecar.core.audit import Audit, Subject, event
from sidecar.core.types import Outcome, WriteResult
from sidecar.core.writes import Landing, Write, WritePath
from sidecar.errors import AuditPersistenceFailed, InDoubt, StepAborted, StepEnded, UnknownStep
from sidecar.ledger import pending
from sidecar.ledger.base import AuditEvent, AuditLedger, LedgerError, Phase, StoredEvent
from sidecar.rules import effects, ids

log = structlog.get_logger()


class Steps:
    """BeginStep, EndStep and AbortStep of an attempt."""

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
    ) -> WriteResult:
        step = Write(
            rpc="BeginStep", write_type=ids.WriteType.STEP,
            identity=ids.step_identity(tool, args_digest), request_id=request_id,
            fingerprint=("BeginStep", tool, args_digest, int(declared)), digest=args_digest,
            detail={"tool": tool, "effect": declared.name},
        )  # fmt: skip
        writes.require_request_id(request_id)
        claim = await writes.claim_or_replay(attempt, request_id, step.fingerprint)
        if claim.answer is not None:
            return claim.answer
        landing = self.path.take_id(attempt, step, claim)
        state = StepState(tool, declared, identity=step.identity)
        return await self.path.to_the_end(attempt, self._land_begin(landing, state))

    async def _land_begin(self, landing: Landing, state: StepState) -> WriteResult:
        try:
            await self._audit_begin(landing, state)
            result = await self.path.perform(landing, lambda _: self._find_earlier(landing, state))
            await self._audit(state, writes.outcome_event(landing, result),
                              because="the write landed but its audit outcome was not persisted",
                              lost="audit_outcome_lost_fail_soft")  # fmt: skip
        except BaseException as error:  # a cancelled step, too, settles what it held
            writes.release(landing, error)
            raise
        return writes.answered(landing, result)

    async def _audit_begin(self, landing: Landing, state: StepState) -> None:
        began = event(landing.attempt, "BeginStep", Phase.STEP_BEGIN, landing.subject,
                      detail=landing.write.detail)  # fmt: skip
        await self._audit(state, began,
                          because="audit intent not persisted, the store was not called",
                          lost="audit_intent_lost_fail_soft")  # fmt: skip

    async def _find_earlier(self, landing: Landing, state: StepState) -> WriteResult:
        """What earlier attempts did with this step: ended it (its result again), left
        a non-idempotent write begun (in doubt), or nothing that stops this one."""
        attempt, step_id = landing.attempt, landing.derived_id
        history = await self._history(step_id, state)
        earlier = [e for e in history if e.event.attempt_id != attempt.attempt_id]
        result = _ended_result(earlier, history)
        if result is not None:
            state.ended = True
            attempt.steps[step_id] = state
            return WriteResult(Outcome.ALREADY_APPLIED, id=step_id, result_json=result)
        _refuse_if_in_doubt(earlier, history, state, step_id)
        attempt.steps[step_id] = state
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

    # -- EndStep and AbortStep --------------------------------------------------

    def begun(self, attempt: Attempt, step_id: str) -> StepState:
        """The step ``attempt`` began as ``step_id``; UNKNOWN_STEP if none."""
        state = attempt.steps.get(step_id)
        if state is None:
            raise UnknownStep(
                f"step {step_id} was not begun by attempt {attempt.attempt_id}",
                metadata={"step_id": step_id},
            )
        return state

    async def end(
        self, attempt: Attempt, step_id: str, *, result_json: str, result_digest: str,
        request_id: str,
    ) -> WriteResult:  # fmt: skip
        state = self.begun(attempt, step_id)
        claim = await writes.claim_or_replay(attempt, request_id,
                                             ("EndStep", step_id, result_digest))  # fmt: skip
        if claim.answer is not None:
            return claim.answer
        ending = self._end(attempt, state, step_id, result_json, result_digest, request_id)
        return await self.path.to_the_end(attempt, _answer_once(attempt, request_id, ending))

    async def _end(
        self, attempt: Attempt, state: StepState, step_id: str, result_json: str,
        result_digest: str, request_id: str,
    ) -> WriteResult:  # fmt: skip
        # One step ends once: a second EndStep, concurrent or later, waits for the
        # first and appends nothing, counts nothing.
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
            ended = event(attempt, "EndStep", Phase.STEP_END, subject,
                          detail={"tool": state.tool, "result_json": result_json})  # fmt: skip
            await self._audit(state, ended, because="the step's end was not persisted",
                              lost="step_end_audit_failed")  # fmt: skip
            state.ended = True
            attempt.outcomes[Outcome.APPLIED] += 1
            return WriteResult(Outcome.APPLIED, id=step_id)

    async def abort(
        self, attempt: Attempt, step_id: str, *, reason: str, request_id: str
    ) -> WriteResult:
        """Record that a begun step's effect did not happen, so a later try may run it.

        Audited like a step's end: fail-closed for a write step. The step gives
        its occurrence back, as a write that failed before it could land does,
        so that the same step begun again, now or by a retry, has the same id.
        """
        state = self.begun(attempt, step_id)
        claim = await writes.claim_or_replay(attempt, request_id, ("AbortStep", step_id, reason))
        if claim.answer is not None:
            return claim.answer
        aborting = self._abort(attempt, state, step_id, reason, request_id)
        return await self.path.to_the_end(attempt, _answer_once(attempt, request_id, aborting))

    async def _abort(
        self, attempt: Attempt, state: StepState, step_id: str, reason: str, request_id: str
    ) -> WriteResult:
        # An abort and an end of one step exclude each other: whichever comes
        # second finds the step settled.
        async with state.ending:
            if state.ended:
                raise StepEnded(
                    f"step {step_id} has ended: its effect happened and cannot be aborted",
                    metadata={"step_id": step_id},
                )
            if state.aborted:
                return WriteResult(Outcome.ALREADY_APPLIED, id=step_id)
            subject = Subject(ids.WriteType.STEP.value, step_id, request_id)
            aborted = event(attempt, "AbortStep", Phase.STEP_ABORT, subject,
                            detail={"tool": state.tool, "reason": reason})  # fmt: skip
            await self._audit(state, aborted, because="the step's abort was not persisted",
                              lost="step_abort_audit_failed")  # fmt: skip
            state.aborted = True
            _give_back_occurrence(attempt, step_id, state.identity)
            attempt.outcomes[Outcome.APPLIED] += 1
            return WriteResult(Outcome.APPLIED, id=step_id)

    async def _audit(
        self, state: StepState, record: AuditEvent, *, because: str, lost: str
    ) -> None:
        # A write step's audit fails closed; a read-only step's is best effort.
        if state.is_write:
            await self.audit.required(record, because=because)
        else:
            await self.audit.best_effort(record, lost=lost)


async def _answer_once(
    attempt: Attempt, request_id: str, work: Awaitable[WriteResult]
) -> WriteResult:
    """``work``'s answer, recorded for ``request_id``; a failure releases it."""
    try:
        result = await work
    except BaseException:  # a cancelled call, too, releases its request_id
        if request_id:
            attempt.released(request_id)
        raise
    if request_id:
        attempt.answered(request_id, result)
    return result


def _ended_result(earlier: Sequence[StoredEvent], history: Sequence[StoredEvent]) -> str | None:
    """The result an earlier attempt ended the step with, or an operator decided it
    ran with (``actonce audit resolve``); None if neither."""
    ended = [e for e in earlier if e.event.phase == Phase.STEP_END]
    if ended:
        return str(ended[0].event.detail.get("result_json", ""))
    decided = pending.latest_decision(history)
    if decided is not None and decided.decision is pending.Decision.RAN:
        return decided.result_json
    return None


def _refuse_if_in_doubt(
    earlier: Sequence[StoredEvent], history: Sequence[StoredEvent], state: StepState, step_id: str
) -> None:
    """IN_DOUBT if a try of a non-idempotent write began earlier and may have acted."""
    # An operator's decision settles the begins before it; a try that was aborted,
    # or refused before it ran, never acted.
    decided = pending.latest_decision(history)
    began = [
        e
        for e in pending.tries_that_may_have_acted(earlier)
        if decided is None or e.seq > decided.seq
    ]
    if not began:
        return
    recorded = max(_recorded_effect(e.event) for e in began)
    if max(recorded, state.effect) is effects.ToolEffect.NON_IDEMPOTENT_WRITE:
        raise InDoubt(
            f"step {step_id} ({state.tool}) is a non-idempotent write that began in an "
            "earlier attempt and never ended; it is not run again automatically",
            metadata={"step_id": step_id, "tool": state.tool},
        )


def _recorded_effect(event: AuditEvent) -> effects.ToolEffect:
    # A step read back from the ledger: its recorded effect if it names one,
    # else the effect its tool's name resolves to (unknown: non-idempotent).
    name = str(event.detail.get("effect", ""))
    if name in effects.ToolEffect.__members__:
        return effects.declared(effects.ToolEffect[name])
    return effects.effect_for(str(event.detail.get("tool", "")))


def _give_back_occurrence(attempt: Attempt, step_id: str, identity: ids.Identity) -> None:
    # The step's id names its occurrence: the one among those taken that derives it.
    for occurrence in attempt.occurrences.taken(ids.WriteType.STEP, identity):
        if step_id == writes.derive(attempt, ids.WriteType.STEP, identity, occurrence):
            attempt.occurrences.give_back(ids.WriteType.STEP, identity, occurrence)
            return
