"""What the sidecar asks of an artifact store: the StoreClient seam, one method.

``StoreClient.call(op, timeout)`` makes one call of the store contract, given as data: one of
the small operations below (:class:`CreateArtifact`, :class:`GetArtifact`, ...), each typed by
what it answers. It is the whole seam, as httpx's ``handle_request`` is: the transports
(:mod:`sidecar.upstream.grpc`, to any ArtifactStoreService; :mod:`sidecar.upstream.inprocess`,
straight to the embedded store's backend), the middleware around them (the metrics' timing and
the traces' spans) and the test fakes implement it and nothing else. Every one answers with
the contract's records and refuses with its :class:`~sidecar.store_contract.Refusal`, so the
core cannot tell them apart. A call that reaches an artifact or a thread carries the
:class:`~sidecar.store_contract.Principal` it acts for, which the store checks the owner
against. Opening and closing a transport is the assembly's, which made it.

A transport whose store shares the ledger's file (the embedded store in a data folder of one
file) also takes :class:`OneCommit`: a write's audit intent, its one store call and its outcome
in one transaction and one durable commit, all three or none. It is an operation like the
others, so that the middleware sees it go by; the assembly, which knows where the store is,
tells the core whether to send it.

A transport that is given the ledger of a store it does not share a file with (the embedded
store in a data folder of two files, or on PostgreSQL) takes :class:`ThreeCommits` instead: the
same three, committed one after another, but as one job of the transport's batch thread, one
hand-off from the event loop and back. Everywhere else the core makes the three commits itself,
one hand-off each.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Generic, Protocol, TypeVar

from sidecar.errors import StoreUnavailable
from sidecar.ledger.base import AuditEvent, LedgerError
from sidecar.store_contract import (
    Owner,
    Principal,
    Refusal,
    RefusalCode,
    StoredArtifact,
    StoredMessage,
)

_A = TypeVar("_A", covariant=True)
_T = TypeVar("_T")
_R = TypeVar("_R")

# The id a readiness probe reads: no store holds it, and any answer proves the store is there.
PROBE_ID = "actonce-health-probe"


class StoreCall(Generic[_A]):
    """One call of the store, answering an ``_A``. ``operation`` names it for the metrics'
    labels and the spans (the sidecar's own word); ``rpc`` is the contract's RPC."""

    __slots__ = ()
    operation: ClassVar[str]
    rpc: ClassVar[str]

    @property
    def store_id(self) -> str:
        """The id the call names, for the metrics and the spans."""
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class CreateArtifact(StoreCall[StoredArtifact]):
    artifact_id: str
    kind: str
    data_json: str
    principal: Principal | None = None
    operation: ClassVar[str] = "create_artifact"
    rpc: ClassVar[str] = "CreateArtifact"

    @property
    def store_id(self) -> str:
        return self.artifact_id


@dataclass(frozen=True, slots=True)
class GetArtifact(StoreCall[StoredArtifact]):
    artifact_id: str
    principal: Principal | None = None
    operation: ClassVar[str] = "get_artifact"
    rpc: ClassVar[str] = "GetArtifact"

    @property
    def store_id(self) -> str:
        return self.artifact_id


@dataclass(frozen=True, slots=True)
class PatchArtifact(StoreCall[StoredArtifact]):
    artifact_id: str
    expected_version: int
    patch_json: str
    principal: Principal | None = None
    operation: ClassVar[str] = "patch_artifact"
    rpc: ClassVar[str] = "PatchArtifact"

    @property
    def store_id(self) -> str:
        return self.artifact_id


@dataclass(frozen=True, slots=True)
class ProposeCreate(StoreCall[None]):
    proposal_id: str
    kind: str
    data_json: str
    principal: Principal | None = None
    operation: ClassVar[str] = "propose_create"
    rpc: ClassVar[str] = "CreateProposal"

    @property
    def store_id(self) -> str:
        return self.proposal_id


@dataclass(frozen=True, slots=True)
class ProposePatch(StoreCall[None]):
    proposal_id: str
    artifact_id: str
    patch_json: str
    base_version: int
    principal: Principal | None = None
    operation: ClassVar[str] = "propose_patch"
    rpc: ClassVar[str] = "CreateProposal"

    @property
    def store_id(self) -> str:
        return self.proposal_id


@dataclass(frozen=True, slots=True)
class CreateThread(StoreCall[None]):
    thread_id: str
    title: str
    principal: Principal | None = None
    operation: ClassVar[str] = "create_thread"
    rpc: ClassVar[str] = "CreateThread"

    @property
    def store_id(self) -> str:
        return self.thread_id


@dataclass(frozen=True, slots=True)
class PostMessage(StoreCall[StoredMessage]):
    message_id: str
    thread_id: str
    kind: str
    text: str
    request_turn: bool
    principal: Principal | None = None
    operation: ClassVar[str] = "post_message"
    rpc: ClassVar[str] = "PostMessage"

    @property
    def store_id(self) -> str:
        return self.message_id


@dataclass(frozen=True, slots=True)
class ListMessages(StoreCall[Sequence[StoredMessage]]):
    thread_id: str
    principal: Principal | None = None
    operation: ClassVar[str] = "list_messages"
    rpc: ClassVar[str] = "ListMessages"

    @property
    def store_id(self) -> str:
        return self.thread_id


@dataclass(frozen=True, slots=True)
class GetOwner(StoreCall[Owner]):
    """The owner of an artifact or (``thread=True``) a thread: what a call checks its grants
    against before it acts (sidecar.core.access)."""

    target_id: str
    thread: bool = False
    operation: ClassVar[str] = "get_owner"
    rpc: ClassVar[str] = "GetOwner"

    @property
    def store_id(self) -> str:
        return self.target_id


# The calls a write can be made of alone: what a OneCommit carries.
StoreWrite = CreateArtifact | ProposeCreate | CreateThread | PostMessage


def nothing() -> None:
    """Checks nothing: what a OneCommit runs first when it is given no check."""
    return None


# What the write makes of the store's answer (its record, a Refusal, or the error the call
# failed with), inside the commit: its outcome's event, and what the write answers.
Settle = Callable[[object], tuple[AuditEvent, _R]]


@dataclass(frozen=True, slots=True)
class Committed(Generic[_R]):
    """What a OneCommit or a ThreeCommits answers once it is durable: the store's own answer to
    its write (a record, or the Refusal or error it was refused with) and what ``settle`` made
    of it. ``outcome_lost`` is a ThreeCommits' alone: the error its outcome's commit failed
    with, after the store's call (which may have landed) was made."""

    answer: object
    result: _R
    outcome_lost: LedgerError | None = None


@dataclass(frozen=True, slots=True)
class OneCommit(StoreCall[Committed[_R]], Generic[_R]):
    """Append ``intent``, make ``write``, append the event ``settle`` makes of its answer, all
    in one transaction, and answer once that is durable. ``before`` runs first, where the job
    runs: what it raises refuses the write before anything is written (the lease, checked
    again after any wait for the file).

    FencedError when the intent is fenced (nothing is written, the store is not called);
    LedgerError when the transaction did not commit (none of it is durable, though a retry
    cannot know that); StoreDeadlineExceeded past the timeout (it may still commit). Only a
    transport whose store shares the ledger's file takes it; any other raises TypeError.
    """

    intent: AuditEvent
    write: StoreWrite
    settle: Settle[_R]
    before: Callable[[], None] = nothing
    operation: ClassVar[str] = "one_commit"
    rpc: ClassVar[str] = ""

    @property
    def store_id(self) -> str:
        return self.write.store_id


@dataclass(frozen=True, slots=True)
class ThreeCommits(StoreCall[Committed[_R]], Generic[_R]):
    """Append ``intent``, make ``write``, append the event ``settle`` makes of its answer: three
    commits one after another, each durable before the next begins, made as one job where the
    transport runs (its batch thread), and answered once the last is durable. ``before`` runs
    first, as a OneCommit's does: what it raises refuses the write before anything is written.

    FencedError when the intent is fenced, LedgerError when it is not durable: either way the
    store was not called. Once the store is called the write may land, and the job answers a
    Committed: its ``outcome_lost`` when the outcome's commit failed. StoreDeadlineExceeded
    past the timeout: ``nothing_sent`` when the job never began (nothing of it was written);
    otherwise the store was called and may still land, and the outcome is the caller's to
    record (the job records none). Only a transport given the ledger of its store takes it;
    any other raises TypeError.

    ``before`` runs again once the intent is durable, before the store is called: what it
    raises then (a lease that ran out while the intent waited for the ledger) is given to
    ``settle`` as the write's answer, and the store is not called.
    """

    intent: AuditEvent
    write: StoreWrite
    settle: Settle[_R]
    before: Callable[[], None] = nothing
    operation: ClassVar[str] = "three_commits"
    rpc: ClassVar[str] = ""

    @property
    def store_id(self) -> str:
        return self.write.store_id


# The calls that carry a write's audit with it: the middleware handles them alike.
AUDITED = (OneCommit, ThreeCommits)


class AuditedWrites(enum.Enum):
    """How a write of one store call is made with its audit, as the assembly (which knows
    where the store and the ledger are) tells the core."""

    APART = "apart"  # the core commits the intent, calls the store, commits the outcome
    THREE_COMMITS = "three_commits"  # the same three, as one ThreeCommits of the store's transport
    AS_ONE = "as_one"  # all three in one commit: a OneCommit


class StoreClient(Protocol):
    """What the sidecar asks of an artifact store: one call of the contract.

    ``timeout`` is the call's deadline in seconds; None is the client's own. The write path
    passes one no later than the attempt's lease ends. A refusal raises the contract's
    Refusal; a store that cannot be reached, or does not answer in time, StoreUnavailable or
    StoreDeadlineExceeded.
    """

    async def call(self, op: StoreCall[_T], timeout: float | None = None) -> _T: ...


async def ping(store: StoreClient) -> None:
    """Raise StoreUnavailable unless the store answers. Any answer, a refusal included,
    proves it is there; but one that refuses this sidecar's credentials would refuse every
    write, so it is not ready."""
    try:
        await store.call(GetArtifact(PROBE_ID))
    except Refusal as refusal:
        if refusal.code == RefusalCode.FORBIDDEN:
            raise StoreUnavailable(f"the store refuses this sidecar: {refusal}") from None
