"""What the sidecar asks of an artifact store: the StoreClient interface.

Two clients implement it: :mod:`sidecar.upstream.grpc`, over gRPC to any
ArtifactStoreService, and :mod:`sidecar.upstream.inprocess`, straight to the
embedded reference store's backend. Both answer with the reference store's own
records and refuse with :class:`Refusal`, so the core cannot tell them apart.
:class:`WrappedStore` is the base of the clients that wrap another (metrics, traces).
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Protocol, TypeVar

from sidecar.refstore.backend import StoredArtifact, StoredMessage

_T = TypeVar("_T")


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

    async def ping(self) -> None:
        await self._inner.ping()

    async def close(self) -> None:
        await self._inner.close()
