"""RunActions: a write, step by step (DESIGN.md), without any gRPC in sight.

1. Validate. 2. Find the attempt. 3. Replay a request_id already answered, or
derive the id. 4. Persist the audit intent (fail closed: the store is not
called). 5. Call the store and classify. 6. Persist the audit outcome (fail
closed even though the write landed). 7. Return, so the servicer answers.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Awaitable, Callable, Collection, Hashable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import structlog

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
    StoreRefused,
    UnknownStep,
)
from sidecar.ledger import pending
from sidecar.ledger.base import AuditEvent, AuditLedger, FencedError, LedgerError, Phase
from sidecar.rules import canonical, edits, effects, ids, refusals
from sidecar.rules.attempts import Attempt, AttemptRegistry, StepState
from sidecar.upstream.client import Refusal, StoreClient, StoredArtifact, StoredMessage

log = structlog.get_logger()


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
    store_timeout_seconds: float = 5.0


Perform = Callable[[str], Awaitable[WriteResult]]


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

    # -- attempts -------------------------------------------------------------

    async def begin_attempt(
        self, *, run_id: str, rule: str, checkpoint: str, lease_deadline: datetime | None
    ) -> Attempt:
        canonical.require_name(run_id, "run_id")
        canonical.require_name(rule, "rule")
        if self.settings.rules is not None and rule not in self.settings.rules:
            raise RuleNotServed(f"rule {rule!r} is not one this sidecar serves (--rules)")
        if len(checkpoint.encode("utf-8", "surrogatepass")) > canonical.MAX_TEXT_BYTES:
            raise InvalidArgument("checkpoint", f"is longer than {canonical.MAX_TEXT_BYTES} bytes")
        canonical.require_no_nul(checkpoint, "checkpoint")
        if lease_deadline is not None and lease_deadline <= _now():
            raise InvalidArgument("lease_deadline", "is in the past")
        attempt = self.attempts.begin(
            run_id=run_id, rule=rule, checkpoint=checkpoint, lease_deadline=lease_deadline
        )
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
                    detail={"lease_deadline": lease_deadline.isoformat()} if lease_deadline else {},
                )
            )
        except LedgerError as exc:
            self.attempts.end(attempt.attempt_id)
            raise AuditPersistenceFailed(str(exc)) from exc
        return attempt

    async def end_attempt(self, attempt_id: str) -> AttemptCounts:
        ended = self.attempts.ended(attempt_id)
        if isinstance(ended, AttemptCounts):
            return ended
        attempt = self.attempts.get(attempt_id)
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
                if propose:
                    await self.store.propose_create(derived, kind, stored)
                    return WriteResult(Outcome.APPLIED, id=derived)
                artifact = await self.store.create_artifact(derived, kind, stored)
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
                artifact = await self._get_artifact(artifact_id)
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
                try:
                    if propose:
                        await self.store.propose_patch(
                            derived, artifact_id, patch, artifact.version
                        )
                        return WriteResult(
                            Outcome.APPLIED, version=artifact.version, proposal_id=derived
                        )
                    patched = await self.store.patch_artifact(artifact_id, artifact.version, patch)
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

        return await self._write(
            attempt,
            rpc="Edit",
            write_type=write_type,
            identity=ids.edit_identity(artifact_id, pointer),
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
                await self.store.create_thread(derived, title)
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
                await self.store.post_message(derived, thread_id, kind, text, request_turn=is_send)
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
                attempt.steps[step_id] = StepState(tool, declared, ended=True)
                result = str(ended[0].event.detail.get("result_json", ""))
                return WriteResult(Outcome.ALREADY_APPLIED, id=step_id, result_json=result)
            # An operator's decision (actonce audit resolve) settles the begins before it.
            decided = pending.latest_decision(history)
            if decided is not None and decided.decision is pending.Decision.RAN:
                attempt.steps[step_id] = StepState(tool, declared, ended=True)
                return WriteResult(
                    Outcome.ALREADY_APPLIED, id=step_id, result_json=decided.result_json
                )
            began = [
                e
                for e in earlier
                if e.event.phase == Phase.STEP_BEGIN and (decided is None or e.seq > decided.seq)
            ]
            if began:
                recorded = max(_recorded_effect(e.event) for e in began)
                if max(recorded, declared) is effects.ToolEffect.NON_IDEMPOTENT_WRITE:
                    raise InDoubt(
                        f"step {step_id} ({tool}) is a non-idempotent write that began in an "
                        "earlier attempt and never ended; it is not run again automatically",
                        metadata={"step_id": step_id, "tool": tool},
                    )
            attempt.steps[step_id] = StepState(tool, declared)
            return WriteResult(Outcome.APPLIED, id=step_id)

        return await self._write(
            attempt,
            rpc="BeginStep",
            write_type=ids.WriteType.STEP,
            identity=ids.step_identity(tool, args_digest),
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
        attempt = self._attempt(attempt_id)
        state = attempt.steps.get(step_id)
        if state is None:
            raise UnknownStep(
                f"step {step_id} was not begun by attempt {attempt.attempt_id}",
                metadata={"step_id": step_id},
            )
        if state.ended:
            return WriteResult(Outcome.ALREADY_APPLIED, id=step_id)
        stored = form.decode("utf-8")
        try:
            await self.ledger.append(
                self._event(
                    attempt, "EndStep", Phase.STEP_END, write_type=ids.WriteType.STEP.value,
                    derived_id=step_id, request_id=request_id,
                    digest=canonical.digest(form),
                    detail={"tool": state.tool, "result_json": stored},
                )
            )  # fmt: skip
        except LedgerError as exc:
            if effects.is_write(effects.ToolEffect(state.effect)):
                raise AuditPersistenceFailed(f"the step's end was not persisted: {exc}") from exc
            log.warning("step_end_audit_failed", error=str(exc))
        state.ended = True
        attempt.outcomes[Outcome.APPLIED] += 1
        return WriteResult(Outcome.APPLIED, id=step_id)

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
        if len(request_id) > canonical.MAX_NAME_BYTES:
            raise InvalidArgument("request_id", f"is longer than {canonical.MAX_NAME_BYTES}")
        canonical.require_no_nul(request_id, "request_id")
        if request_id:
            replayed = await attempt.replay(request_id, fingerprint)
            if replayed is not None:
                log.info("request_replayed", request_id=request_id)
                assert isinstance(replayed, WriteResult)
                return replayed
        try:
            self._check_lease(attempt)
            occurrence = attempt.occurrences.take(write_type, identity)
        except ActonceError:
            attempt.failed(request_id)
            raise
        derived = ids.derive_id(
            write_type,
            run_id=attempt.run_id,
            checkpoint=attempt.checkpoint,
            identity=identity,
            occurrence=occurrence,
        )
        structlog.contextvars.bind_contextvars(derived_id=derived)
        base = dict(
            write_type=write_type.value,
            derived_id=derived,
            request_id=request_id,
            occurrence=occurrence,
            digest=digest,
        )
        landed = False
        try:
            try:
                await self.ledger.append(
                    self._event(attempt, rpc, phases[0], detail=detail, **base)
                )
            except FencedError as exc:
                raise AttemptFenced(
                    f"{exc}; this attempt stops and the newer one goes on",
                    metadata={"run_id": attempt.run_id},
                ) from exc
            except LedgerError as exc:
                if not fail_soft:
                    raise AuditPersistenceFailed(
                        f"audit intent not persisted, the store was not called: {exc}"
                    ) from exc
                log.warning("audit_intent_lost_fail_soft", error=str(exc))
            try:
                result = await perform(derived)
            except ActonceError as error:
                await self._audit_failure(attempt, rpc, error, base)
                raise
            landed = True
            try:
                await self.ledger.append(
                    self._event(
                        attempt, rpc, phases[1], outcome=result.outcome.value,
                        detail={"version": result.version}, **base,
                    )
                )  # fmt: skip
            except LedgerError as exc:
                if fail_soft:
                    log.warning("audit_outcome_lost_fail_soft", error=str(exc))
                    return self._succeeded(attempt, request_id, result, occurrence)
                raise AuditPersistenceFailed(
                    f"the write landed but its audit outcome was not persisted: {exc}"
                ) from exc
        except BaseException as error:
            # Also a cancelled call (the caller's deadline passed): its
            # request_id is released, or a transport retry of it would wait
            # forever for an answer that never comes.
            if isinstance(error, ActonceError):
                attempt.outcomes["failed"] += 1
            if not landed:
                # The slot goes back so that this write, tried again, gets the
                # same id; if it landed after all, the store refuses the id.
                attempt.occurrences.give_back(write_type, identity, occurrence)
            attempt.failed(request_id)
            raise
        return self._succeeded(attempt, request_id, result, occurrence)

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

    async def _get_artifact(self, artifact_id: str) -> StoredArtifact:
        try:
            return await self.store.get_artifact(artifact_id)
        except Refusal as refusal:
            raise _refused(refusal) from refusal

    @staticmethod
    def _already_applied(refusal: Refusal, *, id: str, version: int = 0) -> WriteResult:
        if refusals.is_used_id_only(refusal.code, refusal.states):
            return WriteResult(Outcome.ALREADY_APPLIED, id=id, version=version)
        raise _refused(refusal) from refusal

    def _event(self, attempt: Attempt, rpc: str, phase: str, **fields: Any) -> AuditEvent:
        return AuditEvent(
            run_id=attempt.run_id,
            attempt_id=attempt.attempt_id,
            rpc=rpc,
            phase=phase,
            rule=attempt.rule,
            checkpoint=attempt.checkpoint,
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
