"""The store client over gRPC, for any ArtifactStoreService (``--store-target``).

Protobuf stops here: each call of the contract (:mod:`sidecar.upstream.base`) becomes its
request, and answers are decoded into the contract's records (:mod:`sidecar.store_contract`),
which the rest of the sidecar takes. Every transport error is mapped in :func:`_map_errors`
(httpx's ``map_httpcore_exceptions`` is the model): a refusal the store gives becomes a
:class:`~sidecar.store_contract.Refusal` carrying the store's code and states; a store that
cannot be reached or does not answer in time becomes StoreUnavailable or
StoreDeadlineExceeded, both RETRYABLE.

What an external store says is untrusted: its code, states and message pass
through :class:`~sidecar.store_contract.RefusalVocabulary` here, before they
reach the ledger, the logs or a metrics label.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar, cast

import grpc
import structlog
from actonce_api.store.v1 import artifact_store_pb2 as spb
from actonce_api.store.v1 import artifact_store_pb2_grpc as spb_grpc
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2

from sidecar import defaults
from sidecar.errors import StoreDeadlineExceeded, StoreUnavailable
from sidecar.ops import security
from sidecar.refstore.wire import encode_principal, from_message
from sidecar.store_contract import STORE_DOMAIN as STORE_DOMAIN
from sidecar.store_contract import (
    Owner,
    Refusal,
    RefusalCode,
    RefusalVocabulary,
    StoredArtifact,
    StoredMessage,
)
from sidecar.upstream.base import (
    CreateArtifact,
    CreateThread,
    GetArtifact,
    GetOwner,
    ListMessages,
    PatchArtifact,
    PostMessage,
    ProposeCreate,
    ProposePatch,
    StoreCall,
)

log = structlog.get_logger()

_Request = TypeVar("_Request", bound=Message)
_Response = TypeVar("_Response")
_T = TypeVar("_T")

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


def _unimplemented(error: StoreUnavailable) -> bool:
    cause = error.__cause__
    return isinstance(cause, grpc.aio.AioRpcError) and cause.code() == grpc.StatusCode.UNIMPLEMENTED


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
        self._said_no_owners = False
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

    async def call(self, op: StoreCall[_T], timeout: float | None = None) -> _T:
        made = _CALLS.get(type(op))
        if made is None:  # a OneCommit: a store over the wire shares no file with the ledger
            raise TypeError(f"{type(op).__name__} is not a call of the store over gRPC")
        return cast(_T, await made(self, op, timeout))

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

    async def _create_artifact(self, op: CreateArtifact, timeout: float | None) -> StoredArtifact:
        request = spb.CreateArtifactRequest(
            artifact_id=op.artifact_id,
            kind=op.kind,
            data_json=op.data_json,
            principal=encode_principal(op.principal),
        )
        response = await self._call(self._stub.CreateArtifact, request, timeout)
        return from_message(response.artifact, StoredArtifact)

    async def _get_artifact(self, op: GetArtifact, timeout: float | None) -> StoredArtifact:
        request = spb.GetArtifactRequest(
            artifact_id=op.artifact_id, principal=encode_principal(op.principal)
        )
        response = await self._call(self._stub.GetArtifact, request, timeout)
        return from_message(response.artifact, StoredArtifact)

    async def _patch_artifact(self, op: PatchArtifact, timeout: float | None) -> StoredArtifact:
        request = spb.PatchArtifactRequest(
            artifact_id=op.artifact_id,
            expected_version=op.expected_version,
            patch_json=op.patch_json,
            principal=encode_principal(op.principal),
        )
        response = await self._call(self._stub.PatchArtifact, request, timeout)
        return from_message(response.artifact, StoredArtifact)

    async def _propose_create(self, op: ProposeCreate, timeout: float | None) -> None:
        request = spb.CreateProposalRequest(
            proposal_id=op.proposal_id,
            kind=op.kind,
            data_json=op.data_json,
            principal=encode_principal(op.principal),
        )
        await self._call(self._stub.CreateProposal, request, timeout)

    async def _propose_patch(self, op: ProposePatch, timeout: float | None) -> None:
        request = spb.CreateProposalRequest(
            proposal_id=op.proposal_id,
            artifact_id=op.artifact_id,
            patch_json=op.patch_json,
            base_version=op.base_version,
            principal=encode_principal(op.principal),
        )
        await self._call(self._stub.CreateProposal, request, timeout)

    async def _create_thread(self, op: CreateThread, timeout: float | None) -> None:
        request = spb.CreateThreadRequest(
            thread_id=op.thread_id, title=op.title, principal=encode_principal(op.principal)
        )
        await self._call(self._stub.CreateThread, request, timeout)

    async def _post_message(self, op: PostMessage, timeout: float | None) -> StoredMessage:
        request = spb.PostMessageRequest(
            message_id=op.message_id,
            thread_id=op.thread_id,
            kind=op.kind,
            text=op.text,
            request_turn=op.request_turn,
            principal=encode_principal(op.principal),
        )
        response = await self._call(self._stub.PostMessage, request, timeout)
        return from_message(response.message, StoredMessage)

    async def _list_messages(
        self, op: ListMessages, timeout: float | None
    ) -> Sequence[StoredMessage]:
        request = spb.ListMessagesRequest(
            thread_id=op.thread_id, principal=encode_principal(op.principal)
        )
        response = await self._call(self._stub.ListMessages, request, timeout)
        return [from_message(message, StoredMessage) for message in response.messages]

    async def _get_owner(self, op: GetOwner, timeout: float | None) -> Owner:
        if op.thread:
            request = spb.GetOwnerRequest(thread_id=op.target_id)
        else:
            request = spb.GetOwnerRequest(artifact_id=op.target_id)
        try:
            response = await self._call(self._stub.GetOwner, request, timeout)
        except StoreUnavailable as error:
            if not _unimplemented(error):
                raise
            # A store written before owners were recorded has no GetOwner: it records none,
            # so its data is unowned, reachable as it always was. Said once: every call of
            # the sidecar's is then without the boundary that owners give.
            if not self._said_no_owners:
                self._said_no_owners = True
                log.warning(
                    "store_records_no_owners",
                    hint="the store does not implement GetOwner; every rule reaches all of "
                    "its data (actonce store check's owners/ checks say what it lacks)",
                )
            return Owner("")
        return Owner(response.owner, response.kind)

    async def close(self) -> None:
        await self._channel.close()


# Each call of the contract as this client's request of it.
_CALLS: dict[type[StoreCall[Any]], Callable[[GrpcStoreClient, Any, float | None], Awaitable[Any]]]
_CALLS = {
    CreateArtifact: GrpcStoreClient._create_artifact,
    GetArtifact: GrpcStoreClient._get_artifact,
    PatchArtifact: GrpcStoreClient._patch_artifact,
    ProposeCreate: GrpcStoreClient._propose_create,
    ProposePatch: GrpcStoreClient._propose_patch,
    CreateThread: GrpcStoreClient._create_thread,
    PostMessage: GrpcStoreClient._post_message,
    ListMessages: GrpcStoreClient._list_messages,
    GetOwner: GrpcStoreClient._get_owner,
}


def connect_store(
    target: str,
    *,
    tls: security.StoreTls | None = None,
    token_file: Path | None = None,
    timeout_seconds: float = defaults.STORE_TIMEOUT_SECONDS,
    interceptors: Sequence[grpc.aio.ClientInterceptor] = (),
) -> GrpcStoreClient:
    """A store client for ``target``: over TLS when ``tls`` is given, with the token if any,
    its calls passing through ``interceptors`` (the traces' own, when the sidecar traces)."""
    metadata: list[tuple[str, str]] = []
    if token_file is not None:
        metadata.append(("authorization", f"Bearer {security.read_token(token_file)}"))
    if tls is not None:
        channel = grpc.aio.secure_channel(
            target,
            security.channel_credentials(tls),
            options=list(security.CHANNEL_OPTIONS),
            interceptors=list(interceptors) or None,
        )
    else:
        if token_file is not None and not security.is_local(target):
            log.warning(
                "store_token_without_tls",
                store=target,
                hint="the token crosses the network in clear; set --store-tls-ca",
            )
        channel = grpc.aio.insecure_channel(
            target, options=list(security.CHANNEL_OPTIONS), interceptors=list(interceptors) or None
        )
    return GrpcStoreClient(channel, timeout_seconds=timeout_seconds, metadata=metadata)
