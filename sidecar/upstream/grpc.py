"""The store client over gRPC, for any ArtifactStoreService (``--store-target``).

Protobuf stops here: answers are decoded into the reference store's own records
(:mod:`sidecar.refstore.backend`), which the rest of the sidecar takes. Every
transport error is mapped in :func:`_map_errors` (httpx's
``map_httpcore_exceptions`` is the model): a refusal the store gives becomes
a :class:`Refusal` carrying the store's code and states; a store that cannot
be reached or does not answer in time becomes StoreUnavailable or
StoreDeadlineExceeded, both RETRYABLE.

What an external store says is untrusted: its code, states and message pass
through :class:`~sidecar.rules.refusals.RefusalVocabulary` here, before they
reach the ledger, the logs or a metrics label.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TypeVar

import grpc
from actonce_api.store.v1 import artifact_store_pb2 as spb
from actonce_api.store.v1 import artifact_store_pb2_grpc as spb_grpc
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2

from sidecar import defaults
from sidecar.errors import StoreDeadlineExceeded, StoreUnavailable
from sidecar.refstore.backend import StoredArtifact, StoredMessage
from sidecar.refstore.wire import from_message
from sidecar.rules.refusals import RefusalVocabulary
from sidecar.store_codes import STORE_DOMAIN as STORE_DOMAIN
from sidecar.store_codes import RefusalCode
from sidecar.upstream.base import Refusal

_Request = TypeVar("_Request", bound=Message)
_Response = TypeVar("_Response")

# Store refusal codes that arrive without an ErrorInfo (from a proxy, say).
_BARE_CODES = {
    grpc.StatusCode.NOT_FOUND: RefusalCode.NOT_FOUND.value,
    grpc.StatusCode.PERMISSION_DENIED: RefusalCode.FORBIDDEN.value,
    grpc.StatusCode.UNAUTHENTICATED: RefusalCode.FORBIDDEN.value,
    grpc.StatusCode.INVALID_ARGUMENT: RefusalCode.VALIDATION_FAILED.value,
    grpc.StatusCode.ABORTED: RefusalCode.VERSION_CONFLICT.value,
}
_UNREACHABLE = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.UNKNOWN,
}


def _rich_status(error: grpc.aio.AioRpcError) -> status_pb2.Status | None:
    """The google.rpc.Status in ``error``'s trailer, read as ``rpc_status.from_call`` reads
    it from a call (whose types do not take an asyncio call's error)."""
    for key, value in error.trailing_metadata() or ():
        if key == "grpc-status-details-bin" and isinstance(value, bytes):
            status = status_pb2.Status.FromString(value)
            if status.code != error.code().value[0] or status.message != error.details():
                raise ValueError("the status trailer disagrees with the call's status")
            return status
    return None


def refusal_from(error: grpc.aio.AioRpcError, vocabulary: RefusalVocabulary) -> Refusal | None:
    """The store's refusal carried by ``error``, in the words ``vocabulary`` lets through,
    or None for a transport failure."""
    status = _rich_status(error)
    if status is not None:
        for detail in status.details:
            info = error_details_pb2.ErrorInfo()
            if detail.Unpack(info) and info.domain == STORE_DOMAIN:
                return Refusal(
                    vocabulary.code(info.reason),
                    vocabulary.message(status.message),
                    vocabulary.states(info.metadata.get("states", "")),
                )
    code = _BARE_CODES.get(error.code())
    if code is not None:
        return Refusal(code, vocabulary.message(error.details() or ""))
    return None


@asynccontextmanager
async def _map_errors(operation: str, vocabulary: RefusalVocabulary) -> AsyncIterator[None]:
    try:
        yield
    except grpc.aio.AioRpcError as error:
        if error.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
            raise StoreDeadlineExceeded(
                f"store did not answer {operation} in time; the write may have landed, "
                "and a retry with the same derived id is safe"
            ) from error
        refusal = refusal_from(error, vocabulary)
        if refusal is not None and error.code() not in _UNREACHABLE:
            raise refusal from error
        raise StoreUnavailable(
            f"store unavailable for {operation}: {error.code().name} "
            f"{vocabulary.message(error.details() or '')}"
        ) from error


class GrpcStoreClient:
    """A StoreClient over a gRPC channel to any ArtifactStoreService."""

    def __init__(
        self,
        channel: grpc.aio.Channel,
        *,
        timeout_seconds: float = defaults.STORE_TIMEOUT_SECONDS,
        metadata: Sequence[tuple[str, str]] = (),
    ) -> None:
        self._channel = channel
        self._stub = spb_grpc.ArtifactStoreServiceStub(channel)
        self.timeout_seconds = timeout_seconds
        self._metadata = tuple(metadata)
        # One vocabulary per client: its bound is on the distinct codes that this store
        # has sent, so that one hostile store cannot use up another's.
        self._vocabulary = RefusalVocabulary()

    @classmethod
    def insecure(
        cls, target: str, *, timeout_seconds: float = defaults.STORE_TIMEOUT_SECONDS
    ) -> GrpcStoreClient:
        options = [
            ("grpc.max_receive_message_length", 16 << 20),
            ("grpc.max_send_message_length", 16 << 20),
        ]
        channel = grpc.aio.insecure_channel(target, options=options)
        return cls(channel, timeout_seconds=timeout_seconds)

    async def _call(
        self,
        method: grpc.aio.UnaryUnaryMultiCallable[_Request, _Response],
        request: _Request,
        timeout: float | None,
    ) -> _Response:
        """One call to the store, with the call's deadline and metadata, its errors mapped;
        the operation is named by its request (``CreateArtifactRequest``: CreateArtifact)."""
        operation = request.DESCRIPTOR.name.removesuffix("Request")
        async with _map_errors(operation, self._vocabulary):
            return await method(
                request,
                timeout=self.timeout_seconds if timeout is None else timeout,
                metadata=self._metadata,
            )

    async def create_artifact(
        self, artifact_id: str, kind: str, data_json: str, *, timeout: float | None = None
    ) -> StoredArtifact:
        response = await self._call(
            self._stub.CreateArtifact,
            spb.CreateArtifactRequest(artifact_id=artifact_id, kind=kind, data_json=data_json),
            timeout,
        )
        return from_message(response.artifact, StoredArtifact)

    async def get_artifact(
        self, artifact_id: str, *, timeout: float | None = None
    ) -> StoredArtifact:
        response = await self._call(
            self._stub.GetArtifact, spb.GetArtifactRequest(artifact_id=artifact_id), timeout
        )
        return from_message(response.artifact, StoredArtifact)

    async def patch_artifact(
        self,
        artifact_id: str,
        expected_version: int,
        patch_json: str,
        *,
        timeout: float | None = None,
    ) -> StoredArtifact:
        response = await self._call(
            self._stub.PatchArtifact,
            spb.PatchArtifactRequest(
                artifact_id=artifact_id,
                expected_version=expected_version,
                patch_json=patch_json,
            ),
            timeout,
        )
        return from_message(response.artifact, StoredArtifact)

    async def propose_create(
        self, proposal_id: str, kind: str, data_json: str, *, timeout: float | None = None
    ) -> None:
        await self._call(
            self._stub.CreateProposal,
            spb.CreateProposalRequest(proposal_id=proposal_id, kind=kind, data_json=data_json),
            timeout,
        )

    async def propose_patch(
        self,
        proposal_id: str,
        artifact_id: str,
        patch_json: str,
        base_version: int,
        *,
        timeout: float | None = None,
    ) -> None:
        await self._call(
            self._stub.CreateProposal,
            spb.CreateProposalRequest(
                proposal_id=proposal_id,
                artifact_id=artifact_id,
                patch_json=patch_json,
                base_version=base_version,
            ),
            timeout,
        )

    async def create_thread(
        self, thread_id: str, title: str, *, timeout: float | None = None
    ) -> None:
        await self._call(
            self._stub.CreateThread,
            spb.CreateThreadRequest(thread_id=thread_id, title=title),
            timeout,
        )

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
        response = await self._call(
            self._stub.PostMessage,
            spb.PostMessageRequest(
                message_id=message_id,
                thread_id=thread_id,
                kind=kind,
                text=text,
                request_turn=request_turn,
            ),
            timeout,
        )
        return from_message(response.message, StoredMessage)

    async def list_messages(
        self, thread_id: str, *, timeout: float | None = None
    ) -> Sequence[StoredMessage]:
        response = await self._call(
            self._stub.ListMessages, spb.ListMessagesRequest(thread_id=thread_id), timeout
        )
        return [from_message(message, StoredMessage) for message in response.messages]

    async def ping(self) -> None:
        # Any answer from the store, a refusal included, proves it is there; but one
        # that refuses our credentials would refuse every write, so it is not ready.
        try:
            await self.get_artifact("actonce-health-probe")
        except Refusal as refusal:
            if refusal.code == RefusalCode.FORBIDDEN:
                raise StoreUnavailable(f"the store refuses this sidecar: {refusal}") from None
            return

    async def close(self) -> None:
        await self._channel.close()
