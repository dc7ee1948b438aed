"""RunActions: every call of the agent API, without any protocol in sight.

Each method takes its input as a front decoded it through the API's one table
(:mod:`sidecar.fronts.operations`): JSON already parsed and canonicalized, once
(:class:`~sidecar.rules.canonical.JsonValue`). It checks its fields' rules, finds
the attempt, and hands the rest to the part that holds the rules: the write path
for the builtin writes (:mod:`sidecar.core.writes`), the steps
(:mod:`sidecar.core.steps`), the reads (:mod:`sidecar.core.reads`), the attempts'
begin and end (:mod:`sidecar.core.lifecycle`). What a builtin write asks of the
store, and how its answer is classified, is written here, one ``perform`` per write.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime
from functools import partial
from typing import TypeVar, Unpack

import structlog

from sidecar import store_contract
from sidecar.core.access import ARTIFACT, THREAD, Access, Owners, Reach, Target
from sidecar.core.attempts import Attempt, AttemptRegistry, AttemptStart, store_deadline
from sidecar.core.audit import Audit, InOrder, LandsFor, Subject, event
from sidecar.core.deliveries import ScopedAttempts
from sidecar.core.edit_queue import EditQueue
from sidecar.core.edits import Edit
from sidecar.core.lifecycle import Lifecycle
from sidecar.core.reads import Reads
from sidecar.core.steps import Steps
from sidecar.core.types import (
    AttemptCounts,
    Outcome,
    ReadResult,
    Settings,
    StepPermit,
    WriteResult,
)
from sidecar.core.writes import Calls, OneCall, Write, WritePath
from sidecar.errors import (
    ActonceError,
    InvalidArgument,
    SendNotAllowed,
)
from sidecar.ledger.base import AuditLedger, Phase
from sidecar.rules import canonical, edits, effects, ids
from sidecar.rules.canonical import Document, JsonValue
from sidecar.rules.grants import Grants
from sidecar.store_contract import Principal, Refusal, StoredArtifact
from sidecar.upstream.base import (
    CreateArtifact,
    CreateThread,
    GetArtifact,
    PostMessage,
    ProposeCreate,
    StoreClient,
    StoreWrite,
)

log = structlog.get_logger()

T = TypeVar("T")


def _no_reread() -> None:
    return None


def _with_key(detail: dict[str, object], key: str) -> dict[str, object]:
    """An intent's detail, with the key the caller named the write by, if any."""
    return {**detail, "key": key} if key else detail


def _applied_or_used(derived: str, answer: object) -> WriteResult:
    """A write of one store call whose answer carries nothing the caller needs: applied,
    or already applied when the store refused only because the id is used."""
    if isinstance(answer, Refusal):
        if not store_contract.counts_as_done(answer):
            raise store_contract.as_error(answer) from answer
        return WriteResult(Outcome.ALREADY_APPLIED, id=derived)
    if isinstance(answer, ActonceError):
        raise answer
    return WriteResult(Outcome.APPLIED, id=derived)


class RunActions:
    """The attempt-scoped write and read operations of the sidecar.

    ``on_reread`` hears of each re-read of an artifact after the store refused an
    edit with VERSION_CONFLICT (the metrics count them). ``lands`` makes how a write lands
    with its audit (sidecar.core.audit): in order unless the assembly, which knows where the
    store and the ledger are, says otherwise.
    ``grants`` opens other rules' artifacts and threads to a rule's attempts
    (sidecar.core.access); without it, each rule reaches only its own. ``capability_of``
    gives a new attempt its capability (sidecar.ops.auth.Capabilities, with
    ``--agent-capabilities``); without it, attempts have none.
    """

    def __init__(
        self,
        *,
        ledger: AuditLedger,
        store: StoreClient,
        attempts: AttemptRegistry,
        settings: Settings,
        on_reread: Callable[[], None] = _no_reread,
        lands: LandsFor = InOrder,
        grants: Grants | None = None,
        capability_of: Callable[[str], str] | None = None,
    ) -> None:
        self.ledger = ledger
        self.store = store
        self.attempts = attempts
        self.settings = settings
        self._on_reread = on_reread
        # Edits of one artifact in this sidecar queue rather than race (core/edit_queue.py).
        self._edit_queue = EditQueue()
        audit = Audit(ledger)
        self._audit = audit
        self._path = WritePath(audit, settings, lands(audit, store))
        self._steps = Steps(self._path, audit, ledger)
        self._reads = Reads(store, audit)
        timeout = settings.store_timeout_seconds
        self._reach = Reach(Owners(store), audit, grants or Grants(), timeout)
        self._lifecycle = Lifecycle(attempts, audit, settings)
        self._scoped = ScopedAttempts(attempts, self._lifecycle.begin)
        self._capability_of = capability_of

    # -- attempts -------------------------------------------------------------

    async def begin_attempt(self, **start: Unpack[AttemptStart]) -> Attempt:
        attempt = await self._lifecycle.begin(**start)
        if self._capability_of is not None:
            attempt.capability = self._capability_of(attempt.attempt_id)
        return attempt

    async def end_attempt(self, attempt_id: str) -> AttemptCounts:
        counts = await self._lifecycle.end(attempt_id)
        for scoped in self._scoped.ended(attempt_id):
            await self._lifecycle.end(scoped)  # a front's scoped attempts end with their delivery
        return counts

    async def scoped_attempt(self, delivery_attempt_id: str, scope: str) -> Attempt:
        """The scoped attempt of a tool call of the delivery, begun on the first call of
        its scope, the same one after (a front that binds scopes by a header)."""
        return await self._scoped.of(delivery_attempt_id, scope)

    async def extend_lease(self, attempt_id: str, lease_deadline: datetime) -> datetime:
        self._attempt(attempt_id)
        return await self._lifecycle.extend(attempt_id, lease_deadline)

    async def settle(self) -> None:
        """Wait until every write under way, also those whose callers gave up, has
        ended: before the ledger and the store are closed."""
        await self._path.settle()

    # -- writes ---------------------------------------------------------------

    async def create(
        self,
        *,
        attempt_id: str,
        kind: str,
        data: Document,
        propose: bool,
        request_id: str,
        key: str = "",
    ) -> WriteResult:
        canonical.require_name(kind, "kind")
        attempt = self._attempt(attempt_id)
        key = ids.require_key(key, run_id=attempt.run_id, scheme=attempt.id_scheme)
        data_digest = data.digest
        stored = data.text
        owner = Principal(attempt.rule)  # what it makes belongs to its rule

        def call(derived: str) -> StoreWrite:
            if propose:
                return ProposeCreate(derived, kind, stored, owner)
            return CreateArtifact(derived, kind, stored, owner)

        def made(derived: str, answer: object) -> WriteResult:
            if isinstance(answer, StoredArtifact):
                return WriteResult(Outcome.APPLIED, id=derived, version=answer.version)
            return _applied_or_used(derived, answer)

        perform = OneCall(self.store, call, made, lambda: self._deadline(attempt))

        write = Write(
            rpc="Create",
            write_type=ids.WriteType.CREATE_PROPOSAL if propose else ids.WriteType.CREATE,
            identity=(
                ids.keyed_create_identity(kind, key)
                if key
                else ids.create_identity(kind, data_digest)
            ),
            request_id=request_id,
            fingerprint=("Create", kind, data_digest, propose, key),
            digest=data_digest,
            detail=_with_key({"kind": kind}, key),
            key=key,
        )
        result = await self._path.write(attempt, write, perform)
        if result.outcome is Outcome.ALREADY_APPLIED and not propose:
            return await self._with_stored_version(result, attempt)
        return result

    async def edit(
        self,
        *,
        attempt_id: str,
        artifact_id: str,
        path: str,
        value: JsonValue,
        propose: bool,
        request_id: str,
    ) -> WriteResult:
        canonical.require_name(artifact_id, "artifact_id")
        pointer = edits.normalize_path(path)
        attempt = self._attempt(attempt_id)
        value_digest = value.digest
        identity = (
            ids.edit_proposal_identity(artifact_id, pointer, value_digest, scheme=attempt.id_scheme)
            if propose
            else ids.edit_identity(artifact_id, pointer)
        )
        write = Write(
            rpc="Edit",
            write_type=ids.WriteType.EDIT_PROPOSAL if propose else ids.WriteType.EDIT,
            identity=identity,
            request_id=request_id,
            fingerprint=("Edit", artifact_id, pointer, value_digest, propose),
            digest=value_digest,
            detail={"artifact_id": artifact_id, "path": pointer},
        )
        access = Access.PROPOSE if propose else Access.EDIT
        target = Target(ARTIFACT, artifact_id)
        principal = await self._reach.principal(attempt, "Edit", write.write_type, target, access)
        deadline = partial(self._deadline, attempt)
        queued = (self.store, deadline, self._on_reread, self._edit_queue)
        edit = Edit(*queued, artifact_id, pointer, value.value, propose, principal)
        return await self._path.write(attempt, write, Calls(edit.perform))

    async def notice(
        self, *, attempt_id: str, thread_id: str, text: str, request_id: str
    ) -> WriteResult:
        notice = ids.WriteType.NOTICE
        return await self._post("Notice", notice, attempt_id, thread_id, text, request_id)

    async def send(
        self, *, attempt_id: str, thread_id: str, text: str, request_id: str
    ) -> WriteResult:
        message = ids.WriteType.MESSAGE
        return await self._post("Send", message, attempt_id, thread_id, text, request_id)

    async def create_thread(
        self, *, attempt_id: str, title: str, request_id: str, key: str = ""
    ) -> WriteResult:
        canonical.require_name(title, "title")
        attempt = self._attempt(attempt_id)
        key = ids.require_key(key, run_id=attempt.run_id, scheme=attempt.id_scheme)

        perform = OneCall(
            self.store,
            lambda derived: CreateThread(derived, title, Principal(attempt.rule)),
            _applied_or_used,
            lambda: self._deadline(attempt),
        )

        write = Write(
            rpc="CreateThread",
            write_type=ids.WriteType.THREAD,
            identity=ids.keyed_thread_identity(key) if key else ids.thread_identity(title),
            request_id=request_id,
            fingerprint=("CreateThread", title, key),
            digest=canonical.text_digest(title),
            detail=_with_key({}, key),
            key=key,
        )
        return await self._path.write(attempt, write, perform)

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
            await self._refuse_send(attempt, rpc, write_type)
        target = Target(THREAD, thread_id)
        principal = await self._reach.principal(attempt, rpc, write_type, target, Access.POST)
        text_digest = canonical.text_digest(text)
        kind = "message" if is_send else "notice"

        def call(derived: str) -> StoreWrite:
            return PostMessage(derived, thread_id, kind, text, is_send, principal)

        perform = OneCall(self.store, call, _applied_or_used, lambda: self._deadline(attempt))

        write = Write(
            rpc=rpc,
            write_type=write_type,
            identity=ids.post_identity(thread_id, text_digest),
            request_id=request_id,
            fingerprint=(rpc, thread_id, text_digest),
            digest=text_digest,
            detail={"thread_id": thread_id},
        )
        return await self._path.write(attempt, write, perform)

    async def _refuse_send(self, attempt: Attempt, rpc: str, write_type: ids.WriteType) -> None:
        # Refused before anything else: a rule that may not start turns must not
        # reach the store however it calls.
        error = SendNotAllowed(
            f"rule {attempt.rule!r} is not on this sidecar's send allowlist; post a notice instead",
            metadata={"rule": attempt.rule},
        )
        attempt.failed += 1
        refusal = event(attempt, rpc, Phase.OUTCOME, Subject(write_type.value), refused=error)
        await self._audit.best_effort(refusal, lost="audit_refusal_record_lost")
        raise error

    # -- steps: the agent's own tools (docs/design.md, "Steps") --------------

    async def begin_step(
        self,
        *,
        attempt_id: str,
        tool: str,
        effect: int,
        args: JsonValue,
        request_id: str,
        key: str = "",
        wait_seconds: float | None = None,
        within_seconds: float | None = None,
        sent_by_sidecar: bool = False,
    ) -> WriteResult:
        """Begin a step. A BeginStep that repeats one of this attempt still running waits
        for it to end: ``wait_seconds`` (default: the settings'), and no longer than its
        caller waits for the answer (``within_seconds``, when it says). A step whose call
        the sidecar sends itself (``sent_by_sidecar``, the gateway's) is settled by the
        sidecar alone: ``by_sidecar`` on its end, abort or failure."""
        canonical.require_name(tool, "tool")
        attempt = self._attempt(attempt_id)
        key = ids.require_key(key, run_id=attempt.run_id, scheme=attempt.id_scheme)
        wait = self.settings.step_repeat_wait_seconds if wait_seconds is None else wait_seconds
        if within_seconds is not None:
            wait = min(wait, within_seconds)
        return await self._steps.begin(
            attempt,
            tool=tool,
            declared=effects.declared(effect),
            args_digest=args.digest,
            request_id=request_id,
            wait_seconds=wait,
            key=key,
            sent_by_sidecar=sent_by_sidecar,
        )

    async def end_step(
        self,
        *,
        attempt_id: str,
        step_id: str,
        result: JsonValue,
        request_id: str,
        by_sidecar: bool = False,
    ) -> WriteResult:
        canonical.require_name(step_id, "step_id")
        canonical.require_request_id(request_id)
        attempt = self._attempt(attempt_id)
        return await self._steps.end(
            attempt,
            step_id,
            result_json=result.text,
            result_digest=result.digest,
            request_id=request_id,
            by_sidecar=by_sidecar,
        )

    async def abort_step(
        self,
        *,
        attempt_id: str,
        step_id: str,
        reason: str,
        request_id: str,
        by_sidecar: bool = False,
    ) -> WriteResult:
        canonical.require_name(step_id, "step_id")
        if len(reason.encode("utf-8", "surrogatepass")) > canonical.MAX_NAME_BYTES:
            raise InvalidArgument("reason", f"is longer than {canonical.MAX_NAME_BYTES} bytes")
        canonical.require_no_nul(reason, "reason")
        canonical.require_request_id(request_id)
        attempt = self._attempt(attempt_id)
        return await self._steps.abort(
            attempt, step_id, reason=reason, request_id=request_id, by_sidecar=by_sidecar
        )

    async def fail_step(
        self,
        *,
        attempt_id: str,
        step_id: str,
        error: str,
        request_id: str,
        by_sidecar: bool = False,
    ) -> WriteResult:
        """Record that a begun step's call was sent and failed, or that its tool answered
        an error: it may have acted and has not ended (sidecar.core.steps)."""
        canonical.require_name(step_id, "step_id")
        canonical.require_request_id(request_id)
        attempt = self._attempt(attempt_id)
        return await self._steps.fail(
            attempt, step_id, error=error, request_id=request_id, by_sidecar=by_sidecar
        )

    async def permit_step(
        self, *, attempt_id: str, step_id: str, timeout_seconds: float, keyed: bool
    ) -> StepPermit:
        """Leave to send a begun step's call, with the call's one deadline: asked after the
        step began and before anything is sent (sidecar.ledger.permits). Refused (the
        attempt fenced, its lease passed by the ledger's clock, the step decided by an
        operator), the step is aborted, since nothing was sent, and the refusal raised."""
        canonical.require_name(step_id, "step_id")
        attempt = self._attempt(attempt_id)
        return await self._steps.permit(
            attempt,
            step_id,
            timeout_seconds=timeout_seconds,
            keyed=keyed,
            sidecar_id=self.settings.sidecar_id,
        )

    async def to_the_end(self, attempt_id: str, work: Awaitable[T]) -> T:
        """Await ``work``, a call of ``attempt_id``'s, in a task of its own that goes on
        if the caller gives up, as a write does: EndAttempt and the drain wait for it."""
        attempt = self._attempt(attempt_id)
        return await self._path.to_the_end(attempt, work)

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
        target = Target(ARTIFACT, artifact_id) if artifact_id is not None else None
        target = target or Target(THREAD, thread_id or "")
        principal = await self._reach.principal(attempt, "Read", "", target, Access.READ)
        return await self._reads.read(
            attempt, artifact_id=artifact_id, thread_id=thread_id, principal=principal
        )

    # -- helpers --------------------------------------------------------------

    def _attempt(self, attempt_id: str) -> Attempt:
        attempt = self.attempts.get(attempt_id)
        structlog.contextvars.bind_contextvars(run_id=attempt.run_id)
        return attempt

    async def _with_stored_version(self, result: WriteResult, attempt: Attempt) -> WriteResult:
        """A create an earlier call made answers the version the store holds, as the
        create that made it did: the store's refusal of the used id says none. A store
        that refuses the read (the artifact is not the rule's to read) leaves the version
        unsaid (0). A store that does not answer fails the call as it failed, retryable:
        one request identity gets one answer, and a version of 0 beside another call's
        read of the same create would be a second one. The repeat reads it again."""
        owner = Principal(attempt.rule)
        try:
            stored = await self.store.call(GetArtifact(result.id, owner), self._deadline(attempt))
        except Refusal as exc:
            log.warning("version_unread", artifact_id=result.id, error=str(exc))
            return result
        return replace(result, version=stored.version)

    def _deadline(self, attempt: Attempt) -> float:
        return store_deadline(attempt, self.settings.store_timeout_seconds)
