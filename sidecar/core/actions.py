"""RunActions: a write, step by step (DESIGN.md), without any gRPC in sight.

1. Validate. 2. Find the attempt. 3. Replay a request_id already answered, or
derive the id. 4. Persist the audit intent (fail closed: the store is not
called). 5. Call the store and classify. 6. Persist the audit outcome (fail
closed even though the write landed). 7. Return, so the servicer answers.
"""

from __future__ import annotations

import asyncio
import contextvars
import enum
import json
from collections.abc import Awaitable, Callable, Collection, Hashable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

import structlog

from sidecar import defaults
from sidecar.core.attempts import Attempt, AttemptRegistry, Claim, StepState
from sidecar.errors import (
    ActonceError,
    ArtifactArchived,
    AttemptFenced,
    AuditPersistenceFailed,
    InDoubt,
    InvalidArgument,
    LeaseExpired,
    RuleNotServed,
    SendNotAllowed,
    StepAborted,
    StepEnded,
    StoreRefused,
    UnknownStep,
)
from sidecar.ledger import pending
from sidecar.ledger.base import AuditEvent, AuditLedger, FencedError, LedgerError, Phase
from sidecar.rules import canonical, edits, effects, ids, refusals
from sidecar.upstream.client import Refusal, StoreClient, StoredArtifact, StoredMessage

log = structlog.get_logger()

# The front a call came through (grpc, mcp): each of its audit events says so in its
# detail. Set by the front, before it calls; the core only reads it.
FRONT: contextvars.ContextVar[str] = contextvars.ContextVar("actonce_front", default="grpc")


class Outcome(enum.StrEnum):
    """Mirrors actonce.v1.Outcome by name."""

    APPLIED = "OUTCOME_APPLIED"
    ALREADY_APPLIED = "OUTCOME_ALREADY_APPLIED"
    SKIPPED = "OUTCOME_SKIPPED"


@dataclass(frozen=True)
class WriteResult:
    """What a successful write answers."""

    outcome: Outcome
    id: str = ""
    version: int = 0
    proposal_id: str = ""
    result_json: str = ""


@dataclass(frozen=True)
class AttemptCounts:
    """An attempt's writes by outcome (EndAttempt)."""

    applied: int
    already_applied: int
    skipped: int
    failed: int


@dataclass(frozen=True)
class ReadResult:
    """An artifact, or a thread's messages."""

    artifact: StoredArtifact | None = None
    messages: Sequence[StoredMessage] = field(default_factory=tuple)


@dataclass
class Settings:
    """The operator's choices that the rules consult."""

    send_allowlist: Collection[str] = frozenset()
    # The rules this sidecar serves (--rules); None serves any rule the agent names.
    # Pinned by the operator, so that the send allowlist does not rest on the agent's
    # word for which rule it runs.
    rules: Collection[str] | None = None
    # A write needs this much lease left: the store call's own deadline, so
    # that no write is still in flight when the queue hands the run on.
    store_timeout_seconds: float = defaults.STORE_TIMEOUT_SECONDS
    # The derived-id scheme of a (run, scope) the ledger has no attempt of; one
    # it has keeps the scheme its first attempt began with.
    id_scheme: int = ids.SCHEME_VERSION


Perform = Callable[[str], Awaitable[WriteResult]]
T = TypeVar("T")

# Failures that say the write did not land: refused before it acted, or by the
# store. Any other failure once the store was called (a deadline, an unreachable
# store, an outcome that could not be audited) leaves it unknown.
_NOTHING_LANDED = (LeaseExpired, StoreRefused, ArtifactArchived, InDoubt)


@dataclass(frozen=True)
class _Write:
    """What the write path needs to know of a write besides its id."""

    rpc: str
    write_type: ids.WriteType
    identity: ids.Identity
    request_id: str
    phases: tuple[str, str]
    fail_soft: bool


class RunActions:
    """The attempt-scoped write and read operations of the sidecar."""

    def __init__(
        self,
        *,
        ledger: AuditLedger,
        store: StoreClient,
        attempts: AttemptRegistry,
        settings: Settings,
    ) -> None:
        self.ledger = ledger
        self.store = store
        self.attempts = attempts
        self.settings = settings
        self.read_audit_failures = 0
        self._landing: set[asyncio.Task[Any]] = set()

    # -- attempts -------------------------------------------------------------

    async def begin_attempt(
        self,
        *,
        run_id: str,
        rule: str,
        checkpoint: str,
        lease_deadline: datetime | None,
        scope: str = "",
    ) -> Attempt:
        canonical.require_name(run_id, "run_id")
        canonical.require_name(rule, "rule")
        if self.settings.rules is not None and rule not in self.settings.rules:
            raise RuleNotServed(f"rule {rule!r} is not one this sidecar serves (--rules)")
        if scope:
            canonical.require_name(scope, "scope")
        if len(checkpoint.encode("utf-8", "surrogatepass")) > canonical.MAX_TEXT_BYTES:
            raise InvalidArgument("checkpoint", f"is longer than {canonical.MAX_TEXT_BYTES} bytes")
        canonical.require_no_nul(checkpoint, "checkpoint")
        if lease_deadline is not None and lease_deadline <= _now():
            raise InvalidArgument("lease_deadline", "is in the past")
        id_scheme = await self._id_scheme(run_id, scope)
        attempt = self.attempts.begin(
            run_id=run_id, rule=rule, checkpoint=checkpoint, lease_deadline=lease_deadline,
            scope=scope, id_scheme=id_scheme,
        )  # fmt: skip
        structlog.contextvars.bind_contextvars(run_id=run_id, attempt_id=attempt.attempt_id)
        try:
            await self.ledger.append(
                AuditEvent(
                    run_id=run_id,
                    attempt_id=attempt.attempt_id,
                    rpc="BeginAttempt",
                    phase=Phase.ATTEMPT_BEGIN,
                    rule=rule,
                    checkpoint=checkpoint,
                    scope=scope,
                    detail={
                        "id_scheme": id_scheme,
                        **(
                            {"lease_deadline": lease_deadline.isoformat()} if lease_deadline else {}
                        ),
                        "front": FRONT.get(),
                    },
                )
            )
        except LedgerError as exc:
            self.attempts.end(attempt.attempt_id)
            raise AuditPersistenceFailed(str(exc)) from exc
        return attempt

    async def _id_scheme(self, run_id: str, scope: str) -> int:
        # A run keeps the scheme its first attempt began with, so that a retry
        # begun after an upgrade derives the ids the attempts before it did. A
        # scope has no version-1 form: a scoped attempt derives version 2 at least.
        try:
            first = await self.ledger.first_attempt(run_id, scope)
        except LedgerError as exc:
            raise AuditPersistenceFailed(
                f"the ledger could not be read to find the run's id scheme: {exc}"
            ) from exc
        if first is None:
            return max(self.settings.id_scheme, 2) if scope else self.settings.id_scheme
        recorded = first.detail.get("id_scheme", 1)  # attempts from before versions: 1
        if recorded not in ids.SCHEME_VERSIONS:
            raise AuditPersistenceFailed(
                f"run {run_id} began under id scheme {recorded}, which this sidecar does "
                "not know: a newer sidecar began it"
            )
        return int(recorded)

    async def end_attempt(self, attempt_id: str) -> AttemptCounts:
        ended = self.attempts.ended(attempt_id)
        if isinstance(ended, AttemptCounts):
            return ended
        attempt = self.attempts.get(attempt_id)
        # Writes whose callers gave up are still the attempt's: count them too.
        while attempt.writing:
            await asyncio.wait(set(attempt.writing))
        counts = AttemptCounts(
            applied=attempt.outcomes[Outcome.APPLIED],
            already_applied=attempt.outcomes[Outcome.ALREADY_APPLIED],
            skipped=attempt.outcomes[Outcome.SKIPPED],
            failed=attempt.outcomes["failed"],
        )
        try:
            await self.ledger.append(
                self._event(attempt, "EndAttempt", Phase.ATTEMPT_END, detail=counts.__dict__)
            )
        except LedgerError as exc:
            raise AuditPersistenceFailed(str(exc)) from exc
        self.attempts.end(attempt_id, counts)
        return counts

    async def extend_lease(self, attempt_id: str, lease_deadline: datetime) -> datetime:
        if lease_deadline <= _now():
            raise InvalidArgument("lease_deadline", "is in the past")
        attempt = self._attempt(attempt_id)
        attempt.lease_deadline = lease_deadline
        return lease_deadline

    # -- writes ---------------------------------------------------------------

    async def create(
        self, *, attempt_id: str, kind: str, data_json: str, propose: bool, request_id: str
    ) -> WriteResult:
        canonical.require_name(kind, "kind")
        _data, form = canonical.parse_canonical(data_json, "data_json")
        attempt = self._attempt(attempt_id)
        data_digest = canonical.digest(form)
        stored = form.decode("utf-8")
        write_type = ids.WriteType.CREATE_PROPOSAL if propose else ids.WriteType.CREATE

        async def perform(derived: str) -> WriteResult:
            try:
                timeout = self._store_timeout(attempt)
                if propose:
                    await self.store.propose_create(derived, kind, stored, timeout=timeout)
                    return WriteResult(Outcome.APPLIED, id=derived)
                artifact = await self.store.create_artifact(derived, kind, stored, timeout=timeout)
                return WriteResult(Outcome.APPLIED, id=derived, version=artifact.version)
            except Refusal as refusal:
                return self._already_applied(refusal, id=derived)

        return await self._write(
            attempt,
            rpc="Create",
            write_type=write_type,
            identity=ids.create_identity(kind, data_digest),
            request_id=request_id,
            fingerprint=("Create", kind, data_digest, propose),
            digest=data_digest,
            detail={"kind": kind},
            perform=perform,
        )

    async def edit(
        self,
        *,
        attempt_id: str,
        artifact_id: str,
        path: str,
        value_json: str,
        propose: bool,
        request_id: str,
    ) -> WriteResult:
        canonical.require_name(artifact_id, "artifact_id")
        pointer = edits.normalize_path(path)
        value, form = canonical.parse_canonical(value_json, "value_json")
        attempt = self._attempt(attempt_id)
        value_digest = canonical.digest(form)
        write_type = ids.WriteType.EDIT_PROPOSAL if propose else ids.WriteType.EDIT

        async def perform(derived: str) -> WriteResult:
            conflicts = 0
            while True:
                artifact = await self._get_artifact(
                    artifact_id, timeout=self._store_timeout(attempt)
                )
                if artifact.archived:
                    raise ArtifactArchived(
                        f"artifact {artifact_id} is archived; an edit of it is refused "
                        "before it is tried",
                        metadata={"states": refusals.ARCHIVED},
                    )
                document = json.loads(artifact.data_json)
                if edits.holds(document, pointer, value):
                    return WriteResult(Outcome.SKIPPED, version=artifact.version)
                patch = edits.set_patch(document, pointer, value)
                timeout = self._store_timeout(attempt)
                try:
                    if propose:
                        await self.store.propose_patch(
                            derived, artifact_id, patch, artifact.version, timeout=timeout
                        )
                        return WriteResult(
                            Outcome.APPLIED, version=artifact.version, proposal_id=derived
                        )
                    patched = await self.store.patch_artifact(
                        artifact_id, artifact.version, patch, timeout=timeout
                    )
                    return WriteResult(Outcome.APPLIED, version=patched.version)
                except Refusal as refusal:
                    if refusal.code == refusals.VERSION_CONFLICT:
                        conflicts += 1
                        log.info("version_conflict_reread", rereads=conflicts)
                        if conflicts <= refusals.VERSION_CONFLICT_REREADS:
                            continue
                    if propose:
                        result = self._already_applied(refusal, id="", version=artifact.version)
                        return WriteResult(
                            result.outcome, version=artifact.version, proposal_id=derived
                        )
                    raise _refused(refusal) from refusal

        identity = (
            ids.edit_proposal_identity(artifact_id, pointer, value_digest, scheme=attempt.id_scheme)
            if propose
            else ids.edit_identity(artifact_id, pointer)
        )
        return await self._write(
            attempt,
            rpc="Edit",
            write_type=write_type,
            identity=identity,
            request_id=request_id,
            fingerprint=("Edit", artifact_id, pointer, value_digest, propose),
            digest=value_digest,
            detail={"artifact_id": artifact_id, "path": pointer},
            perform=perform,
        )

    async def notice(
        self, *, attempt_id: str, thread_id: str, text: str, request_id: str
    ) -> WriteResult:
        return await self._post("Notice", ids.WriteType.NOTICE, attempt_id, thread_id, text,
                                request_id)  # fmt: skip

    async def send(
        self, *, attempt_id: str, thread_id: str, text: str, request_id: str
    ) -> WriteResult:
        return await self._post("Send", ids.WriteType.MESSAGE, attempt_id, thread_id, text,
                                request_id)  # fmt: skip

    async def create_thread(self, *, attempt_id: str, title: str, request_id: str) -> WriteResult:
        canonical.require_name(title, "title")
        attempt = self._attempt(attempt_id)

        async def perform(derived: str) -> WriteResult:
            try:
                await self.store.create_thread(derived, title, timeout=self._store_timeout(attempt))
                return WriteResult(Outcome.APPLIED, id=derived)
            except Refusal as refusal:
                return self._already_applied(refusal, id=derived)

        return await self._write(
            attempt,
            rpc="CreateThread",
            write_type=ids.WriteType.THREAD,
            identity=ids.thread_identity(title),
            request_id=request_id,
            fingerprint=("CreateThread", title),
            digest=canonical.text_digest(title),
            detail={},
            perform=perform,
        )

    async def _post(
        self,
        rpc: str,
        write_type: ids.WriteType,
        attempt_id: str,
        thread_id: str,
        text: str,
        request_id: str,
    ) -> WriteResult:
        canonical.require_name(thread_id, "thread_id")
        canonical.require_text(text, "text")
        attempt = self._attempt(attempt_id)
        is_send = write_type is ids.WriteType.MESSAGE
        if is_send and attempt.rule not in self.settings.send_allowlist:
            # Refused before anything else: a rule that may not start turns
            # must not reach the store however it calls.
            error = SendNotAllowed(
                f"rule {attempt.rule!r} is not on this sidecar's send allowlist; "
                "post a notice instead",
                metadata={"rule": attempt.rule},
            )
            attempt.outcomes["failed"] += 1
            await self._audit_refusal(attempt, rpc, write_type, error)
            raise error
        text_digest = canonical.text_digest(text)
        kind = "message" if is_send else "notice"

        async def perform(derived: str) -> WriteResult:
            try:
                await self.store.post_message(
                    derived, thread_id, kind, text, request_turn=is_send,
                    timeout=self._store_timeout(attempt),
                )  # fmt: skip
                return WriteResult(Outcome.APPLIED, id=derived)
            except Refusal as refusal:
                return self._already_applied(refusal, id=derived)

        return await self._write(
            attempt,
            rpc=rpc,
            write_type=write_type,
            identity=ids.post_identity(thread_id, text_digest),
            request_id=request_id,
            fingerprint=(rpc, thread_id, text_digest),
            digest=text_digest,
            detail={"thread_id": thread_id},
            perform=perform,
        )

    # -- steps: the agent's own tools (ADR-111) ---------------------------------

    async def begin_step(
        self, *, attempt_id: str, tool: str, effect: int, args_json: str, request_id: str
    ) -> WriteResult:
        canonical.require_name(tool, "tool")
        _args, form = canonical.parse_canonical(args_json, "args_json")
        attempt = self._attempt(attempt_id)
        declared = effects.declared(effect)
        args_digest = canonical.digest(form)
        is_write = effects.is_write(declared)
        identity = ids.step_identity(tool, args_digest)

        async def perform(step_id: str) -> WriteResult:
            try:
                history = await self.ledger.events_for(step_id)
            except LedgerError as exc:
                if is_write:
                    raise AuditPersistenceFailed(
                        f"the ledger could not be read to tell whether step {step_id} "
                        f"already ran: {exc}"
                    ) from exc
                log.warning("step_history_unreadable", error=str(exc))
                history = []
            earlier = [e for e in history if e.event.attempt_id != attempt.attempt_id]
            ended = [e for e in earlier if e.event.phase == Phase.STEP_END]
            if ended:
                attempt.steps[step_id] = StepState(tool, declared, ended=True, identity=identity)
                result = str(ended[0].event.detail.get("result_json", ""))
                return WriteResult(Outcome.ALREADY_APPLIED, id=step_id, result_json=result)
            # An operator's decision (actonce audit resolve) settles the begins before it.
            decided = pending.latest_decision(history)
            if decided is not None and decided.decision is pending.Decision.RAN:
                attempt.steps[step_id] = StepState(tool, declared, ended=True, identity=identity)
                return WriteResult(
                    Outcome.ALREADY_APPLIED, id=step_id, result_json=decided.result_json
                )
            # A try that was aborted, or refused before it ran, never acted.
            began = [
                e
                for e in pending.tries_that_may_have_acted(earlier)
                if decided is None or e.seq > decided.seq
            ]
            if began:
                recorded = max(_recorded_effect(e.event) for e in began)
                if max(recorded, declared) is effects.ToolEffect.NON_IDEMPOTENT_WRITE:
                    raise InDoubt(
                        f"step {step_id} ({tool}) is a non-idempotent write that began in an "
                        "earlier attempt and never ended; it is not run again automatically",
                        metadata={"step_id": step_id, "tool": tool},
                    )
            attempt.steps[step_id] = StepState(tool, declared, identity=identity)
            return WriteResult(Outcome.APPLIED, id=step_id)

        return await self._write(
            attempt,
            rpc="BeginStep",
            write_type=ids.WriteType.STEP,
            identity=identity,
            request_id=request_id,
            fingerprint=("BeginStep", tool, args_digest, int(declared)),
            digest=args_digest,
            detail={"tool": tool, "effect": declared.name},
            perform=perform,
            phases=(Phase.STEP_BEGIN, Phase.OUTCOME),
            fail_soft=not is_write,
        )

    async def end_step(
        self, *, attempt_id: str, step_id: str, result_json: str, request_id: str
    ) -> WriteResult:
        canonical.require_name(step_id, "step_id")
        _result, form = canonical.parse_canonical(result_json, "result_json")
        _require_request_id(request_id)
        attempt = self._attempt(attempt_id)
        state = attempt.steps.get(step_id)
        if state is None:
            raise UnknownStep(
                f"step {step_id} was not begun by attempt {attempt.attempt_id}",
                metadata={"step_id": step_id},
            )
        result_digest = canonical.digest(form)
        if request_id:
            claim = await attempt.claim(request_id, ("EndStep", step_id, result_digest))
            if claim.answer is not None:
                log.info("request_replayed", request_id=request_id)
                assert isinstance(claim.answer, WriteResult)
                return claim.answer
        return await self._to_the_end(
            attempt, self._end_step(attempt, state, step_id, form, result_digest, request_id)
        )

    async def _end_step(
        self,
        attempt: Attempt,
        state: StepState,
        step_id: str,
        form: bytes,
        result_digest: str,
        request_id: str,
    ) -> WriteResult:
        # One step ends once: a second EndStep, concurrent or later, waits for the
        # first and appends nothing, counts nothing.
        try:
            async with state.ending:
                if state.ended:
                    result = WriteResult(Outcome.ALREADY_APPLIED, id=step_id)
                elif state.aborted:
                    raise StepAborted(
                        f"step {step_id} was aborted: its effect was declared not to have "
                        "happened, so it cannot end; begin it again to run it",
                        metadata={"step_id": step_id},
                    )
                else:
                    await self._audit_step_end(attempt, state, step_id, form, result_digest,
                                               request_id)  # fmt: skip
                    state.ended = True
                    attempt.outcomes[Outcome.APPLIED] += 1
                    result = WriteResult(Outcome.APPLIED, id=step_id)
        except BaseException:
            if request_id:
                attempt.released(request_id)
            raise
        if request_id:
            attempt.answered(request_id, result)
        return result

    async def _audit_step_end(
        self,
        attempt: Attempt,
        state: StepState,
        step_id: str,
        form: bytes,
        result_digest: str,
        request_id: str,
    ) -> None:
        try:
            await self.ledger.append(
                self._event(
                    attempt, "EndStep", Phase.STEP_END, write_type=ids.WriteType.STEP.value,
                    derived_id=step_id, request_id=request_id, digest=result_digest,
                    detail={"tool": state.tool, "result_json": form.decode("utf-8")},
                )
            )  # fmt: skip
        except LedgerError as exc:
            if effects.is_write(effects.ToolEffect(state.effect)):
                raise AuditPersistenceFailed(f"the step's end was not persisted: {exc}") from exc
            log.warning("step_end_audit_failed", error=str(exc))

    async def abort_step(
        self, *, attempt_id: str, step_id: str, reason: str, request_id: str
    ) -> WriteResult:
        """Record that a begun step's effect did not happen, so a later try may run it.

        Audited like a step's end: fail-closed for a write step. The step gives
        its occurrence back, as a write that failed before it could land does,
        so that the same step begun again, now or by a retry, has the same id.
        """
        canonical.require_name(step_id, "step_id")
        if len(reason.encode("utf-8", "surrogatepass")) > canonical.MAX_NAME_BYTES:
            raise InvalidArgument("reason", f"is longer than {canonical.MAX_NAME_BYTES} bytes")
        canonical.require_no_nul(reason, "reason")
        _require_request_id(request_id)
        attempt = self._attempt(attempt_id)
        state = attempt.steps.get(step_id)
        if state is None:
            raise UnknownStep(
                f"step {step_id} was not begun by attempt {attempt.attempt_id}",
                metadata={"step_id": step_id},
            )
        if request_id:
            claim = await attempt.claim(request_id, ("AbortStep", step_id, reason))
            if claim.answer is not None:
                log.info("request_replayed", request_id=request_id)
                assert isinstance(claim.answer, WriteResult)
                return claim.answer
        return await self._to_the_end(
            attempt, self._abort_step(attempt, state, step_id, reason, request_id)
        )

    async def _abort_step(
        self, attempt: Attempt, state: StepState, step_id: str, reason: str, request_id: str
    ) -> WriteResult:
        # An abort and an end of one step exclude each other: whichever comes
        # second finds the step settled.
        try:
            async with state.ending:
                if state.ended:
                    raise StepEnded(
                        f"step {step_id} has ended: its effect happened and cannot be aborted",
                        metadata={"step_id": step_id},
                    )
                if state.aborted:
                    result = WriteResult(Outcome.ALREADY_APPLIED, id=step_id)
                else:
                    await self._audit_step_abort(attempt, state, step_id, reason, request_id)
                    state.aborted = True
                    occurrence = self._step_occurrence(attempt, step_id, state.identity)
                    if occurrence is not None:
                        attempt.occurrences.give_back(
                            ids.WriteType.STEP, state.identity, occurrence
                        )
                    attempt.outcomes[Outcome.APPLIED] += 1
                    result = WriteResult(Outcome.APPLIED, id=step_id)
        except BaseException:
            if request_id:
                attempt.released(request_id)
            raise
        if request_id:
            attempt.answered(request_id, result)
        return result

    async def _audit_step_abort(
        self, attempt: Attempt, state: StepState, step_id: str, reason: str, request_id: str
    ) -> None:
        try:
            await self.ledger.append(
                self._event(
                    attempt, "AbortStep", Phase.STEP_ABORT, write_type=ids.WriteType.STEP.value,
                    derived_id=step_id, request_id=request_id,
                    detail={"tool": state.tool, "reason": reason},
                )
            )  # fmt: skip
        except LedgerError as exc:
            if effects.is_write(effects.ToolEffect(state.effect)):
                raise AuditPersistenceFailed(f"the step's abort was not persisted: {exc}") from exc
            log.warning("step_abort_audit_failed", error=str(exc))

    @staticmethod
    def _step_occurrence(attempt: Attempt, step_id: str, identity: ids.Identity) -> int | None:
        # The step's id names its occurrence: the one among those taken that derives it.
        for occurrence in attempt.occurrences.taken(ids.WriteType.STEP, identity):
            if step_id == ids.derive_id(
                ids.WriteType.STEP, run_id=attempt.run_id, checkpoint=attempt.checkpoint,
                identity=identity, occurrence=occurrence, scope=attempt.scope,
                scheme=attempt.id_scheme,
            ):  # fmt: skip
                return occurrence
        return None

    # -- reads ----------------------------------------------------------------

    async def read(
        self, *, attempt_id: str, artifact_id: str | None, thread_id: str | None
    ) -> ReadResult:
        if artifact_id is None and thread_id is None:
            raise InvalidArgument("target", "name an artifact_id or a thread_id")
        if artifact_id is not None:
            canonical.require_name(artifact_id, "artifact_id")
        if thread_id is not None:
            canonical.require_name(thread_id, "thread_id")
        attempt = self._attempt(attempt_id)
        target = artifact_id if artifact_id is not None else thread_id
        try:
            if artifact_id is not None:
                result = ReadResult(artifact=await self._get_artifact(artifact_id))
            else:
                assert thread_id is not None
                try:
                    messages = await self.store.list_messages(thread_id)
                except Refusal as refusal:
                    raise _refused(refusal) from refusal
                result = ReadResult(messages=tuple(messages))
        except ActonceError as error:
            await self._audit_read(attempt, target or "", error)
            raise
        await self._audit_read(attempt, target or "", None)
        return result

    # -- the write, step by step ----------------------------------------------

    async def _write(
        self,
        attempt: Attempt,
        *,
        rpc: str,
        write_type: ids.WriteType,
        identity: ids.Identity,
        request_id: str,
        fingerprint: Hashable,
        digest: str,
        detail: dict[str, Any],
        perform: Perform,
        phases: tuple[str, str] = (Phase.INTENT, Phase.OUTCOME),
        fail_soft: bool = False,
    ) -> WriteResult:
        _require_request_id(request_id)
        claim = Claim()
        if request_id:
            claim = await attempt.claim(request_id, fingerprint)
            if claim.answer is not None:
                log.info("request_replayed", request_id=request_id)
                assert isinstance(claim.answer, WriteResult)
                return claim.answer
        write = _Write(rpc, write_type, identity, request_id, phases, fail_soft)
        try:
            self._check_lease(attempt)
        except ActonceError:
            bound = claim.occurrence is not None
            self._settle_failed(attempt, write, claim.occurrence, may_have_landed=bound)
            raise
        occurrence = claim.occurrence
        if occurrence is None:
            occurrence = attempt.occurrences.take(write_type, identity)
        derived = ids.derive_id(
            write_type,
            run_id=attempt.run_id,
            checkpoint=attempt.checkpoint,
            identity=identity,
            occurrence=occurrence,
            scope=attempt.scope,
            scheme=attempt.id_scheme,
        )
        structlog.contextvars.bind_contextvars(derived_id=derived)
        base = dict(
            write_type=write_type.value,
            derived_id=derived,
            request_id=request_id,
            occurrence=occurrence,
            digest=digest,
        )
        return await self._to_the_end(
            attempt,
            self._land(
                attempt, write, perform, base, detail, occurrence,
                acted_before=claim.occurrence is not None,
            ),
        )  # fmt: skip

    async def _to_the_end(self, attempt: Attempt, landing: Awaitable[T]) -> T:
        """Await ``landing`` in a task of its own that goes on if the caller gives up.

        A write cut off between its intent and its outcome would leave the store
        and the ledger in a state nobody knows; run to its end, it settles its
        request_id with an answer that a repeat gets.
        """
        task: asyncio.Task[T] = asyncio.ensure_future(landing)
        self._landing.add(task)
        attempt.writing.add(task)

        def landed(done: asyncio.Task[T]) -> None:
            self._landing.discard(done)
            attempt.writing.discard(done)
            if not done.cancelled():
                done.exception()  # its caller, if it gave up, never will look

        task.add_done_callback(landed)
        return await asyncio.shield(task)

    async def _land(
        self,
        attempt: Attempt,
        write: _Write,
        perform: Perform,
        base: dict[str, Any],
        detail: dict[str, Any],
        occurrence: int,
        *,
        acted_before: bool,
    ) -> WriteResult:
        """Audit the intent, perform, audit the outcome; then settle the request_id."""
        acting = False
        try:
            await self._audit_intent(attempt, write, base, detail)
            acting = True  # from here on the write may land
            try:
                result = await perform(base["derived_id"])
            except ActonceError as error:
                await self._audit_failure(attempt, write.rpc, error, base)
                raise
            try:
                await self.ledger.append(
                    self._event(
                        attempt, write.rpc, write.phases[1], outcome=result.outcome.value,
                        detail={"version": result.version}, **base,
                    )
                )  # fmt: skip
            except LedgerError as exc:
                if not write.fail_soft:
                    raise AuditPersistenceFailed(
                        f"the write landed but its audit outcome was not persisted: {exc}"
                    ) from exc
                log.warning("audit_outcome_lost_fail_soft", error=str(exc))
        except BaseException as error:
            if isinstance(error, ActonceError):
                attempt.outcomes["failed"] += 1
            landed = acting and not isinstance(error, _NOTHING_LANDED)
            self._settle_failed(attempt, write, occurrence, may_have_landed=acted_before or landed)
            raise
        return self._succeeded(attempt, write.request_id, result, occurrence)

    async def _audit_intent(
        self, attempt: Attempt, write: _Write, base: dict[str, Any], detail: dict[str, Any]
    ) -> None:
        try:
            await self.ledger.append(
                self._event(attempt, write.rpc, write.phases[0], detail=detail, **base)
            )
        except FencedError as exc:
            raise AttemptFenced(
                f"{exc}; this attempt stops and the newer one goes on",
                metadata={"run_id": attempt.run_id},
            ) from exc
        except LedgerError as exc:
            if not write.fail_soft:
                raise AuditPersistenceFailed(
                    f"audit intent not persisted, the store was not called: {exc}"
                ) from exc
            log.warning("audit_intent_lost_fail_soft", error=str(exc))

    @staticmethod
    def _settle_failed(
        attempt: Attempt, write: _Write, occurrence: int | None, *, may_have_landed: bool
    ) -> None:
        """Settle what a write that failed held: its occurrence and its request_id.

        A write with a request_id that may have landed keeps both: its occurrence is
        its own for good, and a repeat of the request makes the same write again,
        under the same id. Any other gives its occurrence back and releases its
        request_id: made again, it is the same write, with the same id.
        """
        if may_have_landed and write.request_id:
            assert occurrence is not None
            attempt.unsettled(write.request_id, occurrence)
            return
        if occurrence is not None:
            attempt.occurrences.give_back(write.write_type, write.identity, occurrence)
        if write.request_id:
            attempt.released(write.request_id)

    async def settle(self) -> None:
        """Wait until every write under way, also those whose callers gave up, has
        ended: before the ledger and the store are closed."""
        while self._landing:
            await asyncio.wait(set(self._landing))

    @staticmethod
    def _succeeded(
        attempt: Attempt, request_id: str, result: WriteResult, occurrence: int
    ) -> WriteResult:
        attempt.outcomes[result.outcome] += 1
        if request_id:
            attempt.answered(request_id, result)
        log.info("write", outcome=result.outcome.value, occurrence=occurrence)
        return result

    # -- helpers --------------------------------------------------------------

    def _attempt(self, attempt_id: str) -> Attempt:
        attempt = self.attempts.get(attempt_id)
        structlog.contextvars.bind_contextvars(run_id=attempt.run_id)
        return attempt

    def _check_lease(self, attempt: Attempt) -> None:
        if attempt.lease_deadline is None:
            return
        left = (attempt.lease_deadline - _now()).total_seconds()
        if left < self.settings.store_timeout_seconds:
            raise LeaseExpired(
                f"the attempt's lease has {max(left, 0.0):.3f}s left, less than the store "
                f"call's deadline of {self.settings.store_timeout_seconds}s; refused before "
                "acting",
                metadata={"lease_seconds_left": f"{max(left, 0.0):.3f}"},
            )

    def _store_timeout(self, attempt: Attempt) -> float:
        """The deadline of a write's next store call, no later than the lease's end;
        LeaseExpired, before the call, if the lease would not outlast it."""
        self._check_lease(attempt)
        timeout = self.settings.store_timeout_seconds
        if attempt.lease_deadline is None:
            return timeout
        return min(timeout, (attempt.lease_deadline - _now()).total_seconds())

    async def _get_artifact(
        self, artifact_id: str, *, timeout: float | None = None
    ) -> StoredArtifact:
        try:
            return await self.store.get_artifact(artifact_id, timeout=timeout)
        except Refusal as refusal:
            raise _refused(refusal) from refusal

    @staticmethod
    def _already_applied(refusal: Refusal, *, id: str, version: int = 0) -> WriteResult:
        if refusals.is_used_id_only(refusal.code, refusal.states):
            return WriteResult(Outcome.ALREADY_APPLIED, id=id, version=version)
        raise _refused(refusal) from refusal

    def _event(self, attempt: Attempt, rpc: str, phase: str, **fields: Any) -> AuditEvent:
        fields["detail"] = {**fields.get("detail", {}), "front": FRONT.get()}
        return AuditEvent(
            run_id=attempt.run_id,
            attempt_id=attempt.attempt_id,
            rpc=rpc,
            phase=phase,
            rule=attempt.rule,
            checkpoint=attempt.checkpoint,
            scope=attempt.scope,
            **fields,
        )

    async def _audit_failure(
        self, attempt: Attempt, rpc: str, error: ActonceError, base: dict[str, Any]
    ) -> None:
        # A failed write acknowledges nothing; its intent is already durable,
        # so the failure's own record is best effort.
        try:
            await self.ledger.append(
                self._event(
                    attempt, rpc, Phase.OUTCOME, reason=error.reason,
                    failure_class=error.failure_class.value, **base,
                )
            )  # fmt: skip
        except LedgerError as exc:
            log.warning("audit_failure_record_lost", error=str(exc))

    async def _audit_refusal(
        self, attempt: Attempt, rpc: str, write_type: ids.WriteType, error: ActonceError
    ) -> None:
        try:
            await self.ledger.append(
                self._event(
                    attempt, rpc, Phase.OUTCOME, write_type=write_type.value,
                    reason=error.reason, failure_class=error.failure_class.value,
                )
            )  # fmt: skip
        except LedgerError as exc:
            log.warning("audit_refusal_record_lost", error=str(exc))

    async def _audit_read(self, attempt: Attempt, target: str, error: ActonceError | None) -> None:
        # Reads audit fail-soft: a ledger failure is logged and counted, and
        # the read still answers.
        try:
            await self.ledger.append(
                self._event(
                    attempt, "Read", Phase.READ, derived_id=target,
                    reason=error.reason if error else "",
                    failure_class=error.failure_class.value if error else "",
                )
            )  # fmt: skip
        except LedgerError as exc:
            self.read_audit_failures += 1
            log.warning("read_audit_failed", error=str(exc))


def _require_request_id(request_id: str) -> None:
    if len(request_id) > canonical.MAX_NAME_BYTES:
        raise InvalidArgument("request_id", f"is longer than {canonical.MAX_NAME_BYTES}")
    canonical.require_no_nul(request_id, "request_id")


def _recorded_effect(event: AuditEvent) -> effects.ToolEffect:
    # A step read back from the ledger: its recorded effect if it names one,
    # else the effect its tool's name resolves to (unknown: non-idempotent).
    name = str(event.detail.get("effect", ""))
    if name in effects.ToolEffect.__members__:
        return effects.declared(effects.ToolEffect[name])
    return effects.effect_for(str(event.detail.get("tool", "")))


def _refused(refusal: Refusal) -> StoreRefused:
    metadata = {"states": ",".join(sorted(refusal.states))} if refusal.states else {}
    return StoreRefused(
        f"the store refused: {refusal.message}",
        reason=refusal.code,
        failure_class=refusals.failure_class(refusal.code),
        metadata=metadata,
    )


def _now() -> datetime:
    return datetime.now(UTC)
