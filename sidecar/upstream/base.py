"""What the sidecar asks of an artifact store: the StoreClient interface.

Two clients implement it: :mod:`sidecar.upstream.grpc`, over gRPC to any
ArtifactStoreService, and :mod:`sidecar.upstream.inprocess`, straight to the
embedded reference store's backend. Both answer with the reference store's own
records and refuse with :class:`Refusal`, so the core cannot tell them apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from sidecar.refstore.backend import StoredArtifact, StoredMessage


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
