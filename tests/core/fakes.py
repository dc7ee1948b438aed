"""In-memory stand-ins for the ledger and the store client, for unit tests of RunActions.

Both are deterministic: no thread, no timer. Each call suspends exactly once, after its
effect (an event appended, an artifact made), as a real one can: a caller that stops
waiting at that moment has still changed the ledger or the store. Each call is named in
``trace`` as it begins, and ``in_flight`` names the call under way, so a test can tell
which await point a write had reached.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

from sidecar.core.actions import RunActions
from sidecar.core.attempts import AttemptRegistry
from sidecar.core.audit import InOneCommit, InOrder, InTheStoresThread, LandsFor
from sidecar.core.types import Settings
from sidecar.errors import ActonceError
from sidecar.ledger import permits
from sidecar.ledger.base import (
    FENCED_END,
    GENESIS_HASH,
    AuditEvent,
    LedgerError,
    Phase,
    StoredEvent,
    event_hash,
    fenced,
)
from sidecar.refstore.backend import parse_patch
from sidecar.refstore.patches import apply_patch
from sidecar.store_contract import (
    ARCHIVED,
    ID_USED,
    Owner,
    Refusal,
    StoredArtifact,
    StoredMessage,
)
from sidecar.upstream.base import (
    Committed,
    CreateArtifact,
    CreateThread,
    GetArtifact,
    GetOwner,
    ListMessages,
    OneCommit,
    PatchArtifact,
    PostMessage,
    ProposeCreate,
    ProposePatch,
    StoreCall,
    ThreeCommits,
)

_T = TypeVar("_T")
_R = TypeVar("_R")


def _no_hook(name: str) -> None:
    return None


@dataclass
class Trace:
    """The calls the fakes were asked for, in order, and the one under way.

    ``answering`` is called with each call's name as its answer comes back: a test can
    move a clock there, or raise to lose the answer of a call that took effect.
    """

    calls: list[str] = field(default_factory=list)
    in_flight: str = ""
    answering: Callable[[str], None] = _no_hook

    async def point(self, name: str) -> None:
        """Record ``name`` and suspend once, as a call that waits for an answer."""
        self.calls.append(name)
        self.in_flight = name
        try:
            await asyncio.sleep(0)
        finally:
            self.in_flight = ""
        self.answering(name)


class MemoryLedger:
    """An AuditLedger in a list. An event of a phase in ``failing`` is not stored, and
    its append fails, as on a full disk."""

    def __init__(self, trace: Trace | None = None) -> None:
        self.trace = trace if trace is not None else Trace()
        self.events: list[StoredEvent] = []
        self.failing: set[str] = set()
        self._newest: dict[tuple[str, str], str] = {}  # by (run, scope), as fencing is

    async def append(self, event: AuditEvent) -> int:
        if event.phase in self.failing:
            await self.trace.point(f"ledger.append {event.phase}")
            raise LedgerError("the ledger is failing")
        refusal = fenced(event, self._newest.get)
        if refusal is not None and event.phase != Phase.STEP_END:
            await self.trace.point(f"ledger.append {event.phase}")
            raise refusal
        if refusal is not None:  # recorded as it came, marked, as the SQL ledgers do
            event = dataclasses.replace(event, detail={**event.detail, FENCED_END: True})
        if event.phase == Phase.STEP_PERMIT:
            granted = permits.grant(event, datetime.now(UTC), decided=self._decided(event))
            if isinstance(granted, LedgerError):
                await self.trace.point(f"ledger.append {event.phase}")
                raise granted
            event = granted
        if event.phase == Phase.ATTEMPT_BEGIN:
            self._newest[(event.run_id, event.scope)] = event.attempt_id
        seq = len(self.events) + 1
        ts = datetime.now(UTC).isoformat()
        prev = self.events[-1].hash if self.events else GENESIS_HASH
        self.events.append(StoredEvent(seq, ts, event, prev, event_hash(seq, ts, event, prev)))
        await self.trace.point(f"ledger.append {event.phase}")
        if refusal is not None:
            raise refusal
        return seq

    def _decided(self, permit: AuditEvent) -> bool:
        """Whether an operator decided ``permit``'s step since its attempt began it."""
        begun = [
            e.seq
            for e in self.events
            if (e.event.derived_id, e.event.attempt_id, e.event.phase)
            == (permit.derived_id, permit.attempt_id, Phase.STEP_BEGIN)
        ]
        since = max(begun, default=0)
        return any(
            e.seq > since and e.event.derived_id == permit.derived_id
            for e in self.events
            if e.event.phase == Phase.DECISION
        )

    async def events_for(self, derived_id: str) -> list[StoredEvent]:
        found = [e for e in self.events if e.event.derived_id == derived_id]
        await self.trace.point("ledger.events_for")
        return found

    async def first_attempt(self, run_id: str, scope: str) -> AuditEvent | None:
        # Not a traced point: the write path's tests follow writes, not BeginAttempt.
        for stored in self.events:
            e = stored.event
            if (e.run_id, e.scope, e.phase) == (run_id, scope, Phase.ATTEMPT_BEGIN):
                return e
        return None

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def phases(self, phase: str) -> list[AuditEvent]:
        return [e.event for e in self.events if e.event.phase == phase]


_OPERATIONS = frozenset(
    call.operation
    for call in (CreateArtifact, GetArtifact, PatchArtifact, ProposeCreate, ProposePatch,
                 CreateThread, PostMessage, ListMessages, GetOwner)
)  # fmt: skip


def _id_used(what: str, used_id: str) -> Refusal:
    return Refusal("INVALID_STATE", f"{what} {used_id} exists", frozenset({ID_USED}))


@dataclass
class MemoryStore:
    """A StoreClient over dictionaries, refusing as the reference store does."""

    trace: Trace = field(default_factory=Trace)
    artifacts: dict[str, StoredArtifact] = field(default_factory=dict)
    proposals: dict[str, dict[str, Any]] = field(default_factory=dict)
    threads: dict[str, str] = field(default_factory=dict)
    messages: dict[str, StoredMessage] = field(default_factory=dict)
    turn_requests: list[str] = field(default_factory=list)
    # The deadline each call was given, by call.
    timeouts: list[tuple[str, float | None]] = field(default_factory=list)

    async def call(self, op: StoreCall[_T], timeout: float | None = None) -> _T:
        # Each call is made by the method of its operation's name, so that a test's store
        # can change one call by overriding that method.
        if op.operation not in _OPERATIONS:
            raise TypeError(f"{type(op).__name__} is not a call of this store")
        made: Callable[[Any, float | None], Awaitable[Any]] = getattr(self, f"_{op.operation}")
        return cast(_T, await made(op, timeout))

    async def _point(self, name: str, timeout: float | None) -> None:
        self.timeouts.append((name, timeout))
        await self.trace.point(f"store.{name}")

    def seed_artifact(self, artifact_id: str, kind: str, data: dict[str, Any]) -> None:
        self.artifacts[artifact_id] = StoredArtifact(
            id=artifact_id, kind=kind, version=1, data_json=json.dumps(data), archived=False
        )

    async def _create_artifact(self, op: CreateArtifact, timeout: float | None) -> StoredArtifact:
        if op.artifact_id in self.artifacts:
            await self._point("create_artifact", timeout)
            raise _id_used("artifact", op.artifact_id)
        made = StoredArtifact(
            id=op.artifact_id, kind=op.kind, version=1, data_json=op.data_json, archived=False
        )
        self.artifacts[op.artifact_id] = made
        await self._point("create_artifact", timeout)
        return made

    async def _get_owner(self, op: GetOwner, timeout: float | None) -> Owner:
        # No await point: the traces follow the writes. This store records no owners, so
        # every target is reachable, as data made before owners were recorded is.
        if op.target_id not in (self.threads if op.thread else self.artifacts):
            raise Refusal("NOT_FOUND", f"{op.target_id} not found")
        return Owner("")

    async def _get_artifact(self, op: GetArtifact, timeout: float | None) -> StoredArtifact:
        found = self.artifacts.get(op.artifact_id)
        await self._point("get_artifact", timeout)
        if found is None:
            raise Refusal("NOT_FOUND", f"artifact {op.artifact_id} not found")
        return found

    async def _patch_artifact(self, op: PatchArtifact, timeout: float | None) -> StoredArtifact:
        refusal = self._patch(op.artifact_id, op.expected_version, op.patch_json)
        await self._point("patch_artifact", timeout)
        if refusal is not None:
            raise refusal
        return self.artifacts[op.artifact_id]

    def _patch(self, artifact_id: str, expected_version: int, patch_json: str) -> Refusal | None:
        found = self.artifacts.get(artifact_id)
        if found is None:
            return Refusal("NOT_FOUND", f"artifact {artifact_id} not found")
        if found.archived:
            return Refusal("INVALID_STATE", "archived", frozenset({ARCHIVED}))
        if found.version != expected_version:
            return Refusal("VERSION_CONFLICT", f"version is {found.version}")
        try:
            data = apply_patch(parse_patch(patch_json), json.loads(found.data_json))
        except Refusal as error:
            return error
        self.artifacts[artifact_id] = StoredArtifact(
            id=artifact_id, kind=found.kind, version=found.version + 1,
            data_json=json.dumps(data, sort_keys=True), archived=False,
        )  # fmt: skip
        return None

    async def _propose_create(self, op: ProposeCreate, timeout: float | None) -> None:
        await self._propose(op.proposal_id, {"kind": op.kind, "data_json": op.data_json}, timeout)

    async def _propose_patch(self, op: ProposePatch, timeout: float | None) -> None:
        proposal = {"artifact_id": op.artifact_id, "patch_json": op.patch_json,
                    "base_version": op.base_version}  # fmt: skip
        await self._propose(op.proposal_id, proposal, timeout)

    async def _propose(
        self, proposal_id: str, proposal: dict[str, Any], timeout: float | None
    ) -> None:
        used = proposal_id in self.proposals
        if not used:
            self.proposals[proposal_id] = proposal
        await self._point("create_proposal", timeout)
        if used:
            raise _id_used("proposal", proposal_id)

    async def _create_thread(self, op: CreateThread, timeout: float | None) -> None:
        used = op.thread_id in self.threads
        if not used:
            self.threads[op.thread_id] = op.title
        await self._point("create_thread", timeout)
        if used:
            raise _id_used("thread", op.thread_id)

    async def _post_message(self, op: PostMessage, timeout: float | None) -> StoredMessage:
        refusal: Refusal | None = None
        if op.thread_id not in self.threads:
            refusal = Refusal("NOT_FOUND", f"thread {op.thread_id} not found")
        elif op.message_id in self.messages:
            refusal = _id_used("message", op.message_id)
        else:
            seq = sum(1 for m in self.messages.values() if m.thread_id == op.thread_id) + 1
            self.messages[op.message_id] = StoredMessage(
                id=op.message_id, thread_id=op.thread_id, kind=op.kind, text=op.text, seq=seq
            )
            if op.request_turn:
                self.turn_requests.append(op.message_id)
        await self._point("post_message", timeout)
        if refusal is not None:
            raise refusal
        return self.messages[op.message_id]

    async def _list_messages(
        self, op: ListMessages, timeout: float | None
    ) -> Sequence[StoredMessage]:
        await self._point("list_messages", timeout)
        if op.thread_id not in self.threads:
            raise Refusal("NOT_FOUND", f"thread {op.thread_id} not found")
        return [m for m in self.messages.values() if m.thread_id == op.thread_id]

    def ids(self) -> set[str]:
        """Every id the store holds."""
        return {*self.artifacts, *self.proposals, *self.threads, *self.messages}

    def holdings(self) -> dict[str, Any]:
        """What the store holds, comparable between two stores."""
        return {
            "artifacts": {
                i: (a.kind, a.version, json.loads(a.data_json), a.archived)
                for i, a in self.artifacts.items()
            },
            "proposals": dict(self.proposals),
            "threads": dict(self.threads),
            "messages": {i: (m.thread_id, m.kind, m.text) for i, m in self.messages.items()},
            "turn_requests": sorted(self.turn_requests),
        }


class OneCommitStore(MemoryStore):
    """A MemoryStore that also takes a OneCommit, as a store sharing the ledger's file does:
    the write and its audit as one job, all of it kept, or, when any part fails, none."""

    def __init__(self, ledger: MemoryLedger, trace: Trace) -> None:
        super().__init__(trace)
        self.ledger = ledger

    async def call(self, op: StoreCall[_T], timeout: float | None = None) -> _T:
        if isinstance(op, OneCommit):
            return cast(_T, await self._one_commit(op, timeout))
        return await super().call(op, timeout)

    async def _one_commit(self, op: OneCommit[_R], timeout: float | None) -> Committed[_R]:
        kept = (list(self.ledger.events), dict(self.ledger._newest), dict(self.artifacts),
                dict(self.proposals), dict(self.threads), dict(self.messages),
                list(self.turn_requests))  # fmt: skip
        self.trace.calls.append("store.commit_write")
        try:
            op.before()
            await self.ledger.append(op.intent)
            answer: object
            try:
                answer = await super().call(op.write, timeout)
            except Refusal as refusal:
                answer = refusal
            outcome, result = op.settle(answer)
            await self.ledger.append(outcome)
        except BaseException:
            (self.ledger.events, self.ledger._newest, self.artifacts, self.proposals,
             self.threads, self.messages, self.turn_requests) = kept  # fmt: skip
            raise
        return Committed(answer, result)


class ThreeCommitsStore(MemoryStore):
    """A MemoryStore that also takes a ThreeCommits, as a store client given its ledger does: the
    intent appended (the store not called when it is refused), the store called, then the
    outcome appended, each kept when it is made."""

    def __init__(self, ledger: MemoryLedger, trace: Trace) -> None:
        super().__init__(trace)
        self.ledger = ledger

    async def call(self, op: StoreCall[_T], timeout: float | None = None) -> _T:
        if isinstance(op, ThreeCommits):
            return cast(_T, await self._three_commits(op, timeout))
        return await super().call(op, timeout)

    async def _three_commits(self, op: ThreeCommits[_R], timeout: float | None) -> Committed[_R]:
        self.trace.calls.append("store.three_commits")
        op.before()
        await self.ledger.append(op.intent)
        answer: object
        try:
            answer = await super().call(op.write, timeout)
        except (Refusal, ActonceError) as refused:
            answer = refused
        outcome, result = op.settle(answer)
        try:
            await self.ledger.append(outcome)
        except LedgerError as lost:
            return Committed(answer, result, lost)
        return Committed(answer, result)


def _lands(store: MemoryStore) -> LandsFor:
    if isinstance(store, OneCommitStore):
        return InOneCommit
    return InTheStoresThread if isinstance(store, ThreeCommitsStore) else InOrder


def run_actions(
    ledger: MemoryLedger,
    store: MemoryStore,
    *,
    on_reread: Callable[[], None] = lambda: None,
    **settings: Any,
) -> RunActions:
    """RunActions over the fakes; ``settings`` as sidecar.core.types.Settings takes them."""
    return RunActions(
        ledger=ledger, store=store, attempts=AttemptRegistry(), settings=Settings(**settings),
        on_reread=on_reread, lands=_lands(store),
    )  # fmt: skip
