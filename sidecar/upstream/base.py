"""What the sidecar asks of an artifact store: the StoreClient interface.

Two clients implement it: :mod:`sidecar.upstream.grpc`, over gRPC to any
ArtifactStoreService, and :mod:`sidecar.upstream.inprocess`, straight to the
embedded reference store's backend. Both answer with the reference store's own
records and refuse with :class:`Refusal`, so the core cannot tell them apart.
:class:`WrappedStore` is the base of the clients that wrap another (metrics, traces).

A client whose store shares the ledger's file (the embedded store in a data folder of one
file) can also make a write's audit intent, its one store call and its outcome in one
transaction and one durable commit (:class:`CommitsWrites`, found by :func:`joins_commits`):
all three are durable or none is. Every other client makes them in turn, three commits.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from sidecar.ledger.base import AuditEvent
from sidecar.refstore.backend import StoredArtifact, StoredMessage

_T = TypeVar("_T")
_R = TypeVar("_R")

# The calls of the store a write can be made of alone, by their StoreClient method's name.
WriteMethod = Literal["create_artifact", "propose_create", "create_thread", "post_message"]


@dataclass(frozen=True)
class StoreWrite:
    """One write call of the store, as data: the StoreClient method and its arguments (the
    ``timeout`` apart), so that a client can make it inside a commit of its own choosing."""

    method: WriteMethod
    store_id: str  # the id it names, for the metrics and the spans
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    async def on(self, store: StoreClient, *, timeout: float | None) -> object:
        """Make the call on ``store`` as any other call: it commits on its own."""
        call: Callable[..., Awaitable[object]] = getattr(store, self.method)
        return await call(*self.args, timeout=timeout, **self.kwargs)


def nothing() -> None:
    """Checks nothing: what a job runs first when it is given no check."""
    return None


# What the write makes of the store's answer (its record, a Refusal, or the error the call
# failed with), inside the commit: its outcome's event, and what the write answers.
Settle = Callable[[object], tuple[AuditEvent, _R]]


@runtime_checkable
class CommitsWrites(Protocol):
    """A store client that can make a write's intent, its call and its outcome one commit."""

    @property
    def commits_writes(self) -> bool:
        """Whether it can here: its store shares the ledger's file."""
        ...

    async def commit_write(
        self,
        intent: AuditEvent,
        call: StoreWrite,
        settle: Settle[_R],
        *,
        timeout: float | None,
        before: Callable[[], None] = nothing,
    ) -> _R:
        """Append ``intent``, make ``call``, append the event ``settle`` makes of its answer,
        all in one transaction, and answer what ``settle`` made once that is durable.
        ``before`` runs first, where the job runs: what it raises refuses the write before
        anything is written (the lease, checked again after any wait for the file).

        FencedError when the intent is fenced (nothing is written, the store is not called);
        LedgerError when the transaction did not commit (none of it is durable, though a
        retry cannot know that); StoreDeadlineExceeded past ``timeout`` (it may still commit).
        """
        ...


def joins_commits(store: object) -> CommitsWrites | None:
    """``store`` as a client that makes a write one commit, or None when it cannot."""
    if isinstance(store, CommitsWrites) and store.commits_writes:
        return store
    return None


class Refusal(Exception):
    """The store refused a call: ``code`` is its refusal code, ``states`` the
    states an INVALID_STATE names (``ID_USED``, ``ARCHIVED``, ...)."""

    def __init__(self, code: str, message: str, states: frozenset[str] = frozenset()) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.states = states


class StoreClient(Protocol):
    """What the sidecar asks of an artifact store.

    ``timeout`` is the call's deadline in seconds; None is the client's own. The
    write path passes one no later than the attempt's lease ends.
    """

    async def create_artifact(
        self, artifact_id: str, kind: str, data_json: str, *, timeout: float | None = None
    ) -> StoredArtifact: ...

    async def get_artifact(
        self, artifact_id: str, *, timeout: float | None = None
    ) -> StoredArtifact: ...

    async def patch_artifact(
        self,
        artifact_id: str,
        expected_version: int,
        patch_json: str,
        *,
        timeout: float | None = None,
    ) -> StoredArtifact: ...

    async def propose_create(
        self, proposal_id: str, kind: str, data_json: str, *, timeout: float | None = None
    ) -> None: ...

    async def propose_patch(
        self,
        proposal_id: str,
        artifact_id: str,
        patch_json: str,
        base_version: int,
        *,
        timeout: float | None = None,
    ) -> None: ...

    async def create_thread(
        self, thread_id: str, title: str, *, timeout: float | None = None
    ) -> None: ...

    async def post_message(
        self,
        message_id: str,
        thread_id: str,
        kind: str,
        text: str,
        *,
        request_turn: bool,
        timeout: float | None = None,
    ) -> StoredMessage: ...

    async def list_messages(
        self, thread_id: str, *, timeout: float | None = None
    ) -> Sequence[StoredMessage]: ...

    async def ping(self) -> None:
        """Raise StoreUnavailable unless the store answers."""
        ...

    async def close(self) -> None: ...


class WrappedStore:
    """A StoreClient around another that hands every store call to :meth:`_around`, with
    the operation's name and the id it names: what a wrapper adds to each call (the
    metrics' timing, the traces' spans) is then written once, not once per method. Ping
    and close (health and shutdown, not the writes' path) pass as they are."""

    def __init__(self, inner: StoreClient) -> None:
        self._inner = inner
        # Found once: a runtime Protocol's isinstance is slow on a write's path.
        self._joined = joins_commits(inner)

    async def _around(self, operation: str, store_id: str, call: Awaitable[_T]) -> _T:
        return await call

    async def create_artifact(
        self, artifact_id: str, kind: str, data_json: str, *, timeout: float | None = None
    ) -> StoredArtifact:
        call = self._inner.create_artifact(artifact_id, kind, data_json, timeout=timeout)
        return await self._around("create_artifact", artifact_id, call)

    async def get_artifact(
        self, artifact_id: str, *, timeout: float | None = None
    ) -> StoredArtifact:
        call = self._inner.get_artifact(artifact_id, timeout=timeout)
        return await self._around("get_artifact", artifact_id, call)

    async def patch_artifact(
        self,
        artifact_id: str,
        expected_version: int,
        patch_json: str,
        *,
        timeout: float | None = None,
    ) -> StoredArtifact:
        call = self._inner.patch_artifact(
            artifact_id, expected_version, patch_json, timeout=timeout
        )
        return await self._around("patch_artifact", artifact_id, call)

    async def propose_create(
        self, proposal_id: str, kind: str, data_json: str, *, timeout: float | None = None
    ) -> None:
        call = self._inner.propose_create(proposal_id, kind, data_json, timeout=timeout)
        await self._around("propose_create", proposal_id, call)

    async def propose_patch(
        self,
        proposal_id: str,
        artifact_id: str,
        patch_json: str,
        base_version: int,
        *,
        timeout: float | None = None,
    ) -> None:
        call = self._inner.propose_patch(
            proposal_id, artifact_id, patch_json, base_version, timeout=timeout
        )
        await self._around("propose_patch", proposal_id, call)

    async def create_thread(
        self, thread_id: str, title: str, *, timeout: float | None = None
    ) -> None:
        call = self._inner.create_thread(thread_id, title, timeout=timeout)
        await self._around("create_thread", thread_id, call)

    async def post_message(
        self,
        message_id: str,
        thread_id: str,
        kind: str,
        text: str,
        *,
        request_turn: bool,
        timeout: float | None = None,
    ) -> StoredMessage:
        call = self._inner.post_message(
            message_id, thread_id, kind, text, request_turn=request_turn, timeout=timeout
        )
        return await self._around("post_message", message_id, call)

    async def list_messages(
        self, thread_id: str, *, timeout: float | None = None
    ) -> Sequence[StoredMessage]:
        call = self._inner.list_messages(thread_id, timeout=timeout)
        return await self._around("list_messages", thread_id, call)

    @property
    def commits_writes(self) -> bool:
        return self._joined is not None

    async def commit_write(
        self,
        intent: AuditEvent,
        call: StoreWrite,
        settle: Settle[_R],
        *,
        timeout: float | None,
        before: Callable[[], None] = nothing,
    ) -> _R:
        inner = self._joined
        if inner is None:
            raise TypeError("the wrapped store client cannot make a write one commit")
        # The store's refusal is an answer inside the job, not an error of it: raised within
        # _around here, as a store call's own refusal would be, so that a wrapper's timing
        # and spans tell it the same way, and then the job's result is answered after all.
        answers: list[object] = []
        made: list[_R] = []

        def watched(answer: object) -> tuple[AuditEvent, _R]:
            answers.append(answer)
            return settle(answer)

        async def job() -> _R:
            made.append(
                await inner.commit_write(intent, call, watched, timeout=timeout, before=before)
            )
            if answers and isinstance(answers[0], Exception):
                raise answers[0]
            return made[0]

        try:
            return await self._around(call.method, call.store_id, job())
        except Exception as error:
            if made and answers and error is answers[0]:
                return made[0]
            raise

    async def ping(self) -> None:
        await self._inner.ping()

    async def close(self) -> None:
        await self._inner.close()
