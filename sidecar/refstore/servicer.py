"""The gRPC face of the reference store: `actonce.store.v1.ArtifactStoreService` over a backend.

Thin on purpose: each RPC decodes its request, makes one backend call in a worker thread (the
backend blocks on disk; the event loop must not), and encodes the answer. `_call` is the one
place that checks the bearer token and turns a `StoreRefusal` into the call's status, and a
`StoreUnavailableError` (the backend's database is out of reach) into UNAVAILABLE, which the
sidecar reads as STORE_UNAVAILABLE, RETRYABLE.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Callable
from typing import Any, NoReturn, ParamSpec, TypeVar

import grpc
import structlog
from actonce_api.store.v1 import artifact_store_pb2 as pb
from actonce_api.store.v1 import artifact_store_pb2_grpc as pb_grpc
from google.rpc import status_pb2
from grpc_status import rpc_status

from sidecar.refstore.backend import (
    NewMessage,
    StoreBackend,
    StoreUnavailableError,
)
from sidecar.refstore.wire import (
    decode_principal,
    encode_artifact,
    encode_message,
    encode_proposal,
    grpc_status_for,
)
from sidecar.store_contract import RefusalCode, StoreRefusal

__all__ = ["ArtifactStoreServicer"]

log = structlog.get_logger()

_P = ParamSpec("_P")
_T = TypeVar("_T")

_Context = grpc.aio.ServicerContext[Any, Any]

_INTERNAL = rpc_status.to_status(
    status_pb2.Status(
        code=grpc.StatusCode.INTERNAL.value[0], message="the store failed; see its log"
    )
)
# No ErrorInfo: this is no refusal of the contract, and a caller must not take it for one.
_UNAVAILABLE = rpc_status.to_status(
    status_pb2.Status(
        code=grpc.StatusCode.UNAVAILABLE.value[0],
        message="the store's database is unavailable; retry later",
    )
)


class ArtifactStoreServicer(pb_grpc.ArtifactStoreServiceServicer):
    """Serves one `StoreBackend`; with `token` set, every call must carry it as a bearer token.

    Only this service checks the token: health and reflection stay open, since probes and
    grpcurl carry no credentials and reveal nothing stored.
    """

    def __init__(self, backend: StoreBackend, *, token: str | None = None) -> None:
        if token is not None and not token.strip():
            # An empty token (an unset variable, say) would look like protection and be none.
            raise ValueError("the store's token must not be empty; pass None for no token")
        self._backend = backend
        self._expected = f"Bearer {token}".encode() if token is not None else None

    async def _call(
        self,
        context: _Context,
        operation: Callable[_P, _T],
        *args: _P.args,
        **kwargs: _P.kwargs,
    ) -> _T:
        rpc = operation.__name__
        try:
            self._authorize(context)
            return await asyncio.to_thread(operation, *args, **kwargs)
        except StoreRefusal as refusal:
            # Ids and payloads stay out of the log: the code and states say what happened.
            log.debug(
                "store.refused", rpc=rpc, code=str(refusal.code), states=sorted(refusal.states)
            )
            await _abort(context, grpc_status_for(refusal))
        except StoreUnavailableError as error:
            # Expected while the database restarts; the reason (no ids, no payloads) tells the
            # operator which: refused connection, lost connection, commit in doubt.
            log.warning("store.unavailable", rpc=rpc, error=str(error))
            await _abort(context, _UNAVAILABLE)
        except Exception:
            # Not a refusal: a fault of the store itself. Its text (a database path, a query)
            # is for the operator's log, not for the caller.
            log.exception("store.failed", rpc=rpc)
            await _abort(context, _INTERNAL)

    def _authorize(self, context: _Context) -> None:
        if self._expected is None:
            return
        presented = [
            value.encode() if isinstance(value, str) else bytes(value)
            for key, value in (context.invocation_metadata() or ())
            if key == "authorization"
        ]
        # compare_digest takes as long whatever the mismatch, so the token leaks no prefix.
        if len(presented) != 1 or not hmac.compare_digest(presented[0], self._expected):
            raise StoreRefusal(RefusalCode.FORBIDDEN, "a valid bearer token is required")

    async def CreateArtifact(
        self, request: pb.CreateArtifactRequest, context: _Context
    ) -> pb.CreateArtifactResponse:
        artifact = await self._call(
            context,
            self._backend.create_artifact,
            request.artifact_id,
            request.kind,
            request.data_json,
            principal=decode_principal(request),
        )
        return pb.CreateArtifactResponse(artifact=encode_artifact(artifact))

    async def GetArtifact(
        self, request: pb.GetArtifactRequest, context: _Context
    ) -> pb.GetArtifactResponse:
        artifact = await self._call(
            context,
            self._backend.get_artifact,
            request.artifact_id,
            principal=decode_principal(request),
        )
        return pb.GetArtifactResponse(artifact=encode_artifact(artifact))

    async def PatchArtifact(
        self, request: pb.PatchArtifactRequest, context: _Context
    ) -> pb.PatchArtifactResponse:
        artifact = await self._call(
            context,
            self._backend.patch_artifact,
            request.artifact_id,
            request.expected_version,
            request.patch_json,
            principal=decode_principal(request),
        )
        return pb.PatchArtifactResponse(artifact=encode_artifact(artifact))

    async def ArchiveArtifact(
        self, request: pb.ArchiveArtifactRequest, context: _Context
    ) -> pb.ArchiveArtifactResponse:
        artifact = await self._call(
            context,
            self._backend.archive_artifact,
            request.artifact_id,
            principal=decode_principal(request),
        )
        return pb.ArchiveArtifactResponse(artifact=encode_artifact(artifact))

    async def ListArtifacts(
        self, request: pb.ListArtifactsRequest, context: _Context
    ) -> pb.ListArtifactsResponse:
        page = await self._call(
            context,
            self._backend.list_artifacts,
            request.kind,
            request.page_size,
            request.page_token,
            principal=decode_principal(request),
        )
        return pb.ListArtifactsResponse(
            artifacts=[encode_artifact(artifact) for artifact in page.artifacts],
            next_page_token=page.next_page_token,
        )

    async def CreateProposal(
        self, request: pb.CreateProposalRequest, context: _Context
    ) -> pb.CreateProposalResponse:
        proposal = await self._call(
            context,
            self._backend.create_proposal,
            request.proposal_id,
            kind=request.kind,
            data_json=request.data_json,
            artifact_id=request.artifact_id,
            patch_json=request.patch_json,
            base_version=request.base_version,
            principal=decode_principal(request),
        )
        return pb.CreateProposalResponse(proposal_id=proposal.id)

    async def GetProposal(
        self, request: pb.GetProposalRequest, context: _Context
    ) -> pb.GetProposalResponse:
        proposal = await self._call(
            context,
            self._backend.get_proposal,
            request.proposal_id,
            principal=decode_principal(request),
        )
        return encode_proposal(proposal)

    async def CreateThread(
        self, request: pb.CreateThreadRequest, context: _Context
    ) -> pb.CreateThreadResponse:
        thread = await self._call(
            context,
            self._backend.create_thread,
            request.thread_id,
            request.title,
            principal=decode_principal(request),
        )
        return pb.CreateThreadResponse(thread_id=thread.id)

    async def PostMessage(
        self, request: pb.PostMessageRequest, context: _Context
    ) -> pb.PostMessageResponse:
        message = await self._call(
            context,
            self._backend.post_message,
            NewMessage(
                request.message_id,
                request.thread_id,
                request.kind,
                request.text,
                request_turn=request.request_turn,
            ),
            principal=decode_principal(request),
        )
        return pb.PostMessageResponse(message=encode_message(message))

    async def ListMessages(
        self, request: pb.ListMessagesRequest, context: _Context
    ) -> pb.ListMessagesResponse:
        messages = await self._call(
            context,
            self._backend.list_messages,
            request.thread_id,
            principal=decode_principal(request),
        )
        return pb.ListMessagesResponse(messages=[encode_message(message) for message in messages])

    async def RequestTurn(
        self, request: pb.RequestTurnRequest, context: _Context
    ) -> pb.RequestTurnResponse:
        created = await self._call(
            context,
            self._backend.request_turn,
            request.message_id,
            principal=decode_principal(request),
        )
        return pb.RequestTurnResponse(created=created)

    async def ListTurnRequests(
        self, request: pb.ListTurnRequestsRequest, context: _Context
    ) -> pb.ListTurnRequestsResponse:
        message_ids = await self._call(
            context,
            self._backend.list_turn_requests,
            request.thread_id,
            principal=decode_principal(request),
        )
        return pb.ListTurnRequestsResponse(message_ids=list(message_ids))

    async def GetOwner(self, request: pb.GetOwnerRequest, context: _Context) -> pb.GetOwnerResponse:
        owner = await self._call(
            context,
            self._backend.get_owner,
            artifact_id=request.artifact_id,
            thread_id=request.thread_id,
        )
        return pb.GetOwnerResponse(owner=owner.owner, kind=owner.kind)


async def _abort(context: _Context, status: grpc.Status) -> NoReturn:
    await context.abort_with_status(status)
    # abort_with_status always raises; this line only tells the type checker so.
    raise AssertionError("abort_with_status returned")
