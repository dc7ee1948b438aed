"""The store's records and refusals as ArtifactStoreService messages, for its gRPC servicer.

The sidecar's gRPC store client decodes them back with `from_message`
(sidecar.upstream.grpc); its in-process client passes the records through without
this round trip.

On the wire (see `protos/actonce/store/v1/artifact_store.proto`) a refusal is a gRPC status
whose details hold a `google.rpc.ErrorInfo`: reason = the code, domain = "store.actonce", and,
for INVALID_STATE, metadata["states"] = the states sorted and comma-joined; its status code is
the contract's (`sidecar.store_contract.status_code_for`).
"""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import TYPE_CHECKING, TypeVar

import grpc
from actonce_api.store.v1 import artifact_store_pb2 as pb
from google.protobuf import any_pb2
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from sidecar.refstore.backend import StoredProposal
from sidecar.store_contract import (
    STORE_DOMAIN,
    Principal,
    Refusal,
    StoredArtifact,
    StoredMessage,
    status_code_for,
)

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_M = TypeVar("_M", bound=Message)
_R = TypeVar("_R", bound="DataclassInstance")


def to_message(record: DataclassInstance, message_type: type[_M]) -> _M:
    """A record as the message whose fields have the same names: the contract names an
    artifact's and a message's fields as the records do, on the store's API and the agent's."""
    return message_type(**asdict(record))


def from_message(message: Message, record_type: type[_R]) -> _R:
    """A message as the record whose fields have the same names."""
    return record_type(
        **{field.name: getattr(message, field.name) for field in fields(record_type)}
    )


def encode_artifact(artifact: StoredArtifact) -> pb.StoredArtifact:
    return to_message(artifact, pb.StoredArtifact)


def encode_message(message: StoredMessage) -> pb.StoredMessage:
    return to_message(message, pb.StoredMessage)


def encode_proposal(proposal: StoredProposal) -> pb.GetProposalResponse:
    return pb.GetProposalResponse(
        proposal_id=proposal.id,
        kind=proposal.kind,
        data_json=proposal.data_json,
        artifact_id=proposal.artifact_id,
        patch_json=proposal.patch_json,
        base_version=proposal.base_version,
    )


def decode_principal(request: Message) -> Principal | None:
    """The principal a request names, or None when it names none (a caller from before
    ownership: not checked)."""
    if not request.HasField("principal"):
        return None
    principal: pb.Principal = getattr(request, "principal")  # noqa: B009 (every request type)
    return Principal(principal.rule, principal.granted_owner)


def encode_principal(principal: Principal | None) -> pb.Principal | None:
    """A principal as the requests carry it; None leaves the field unset."""
    if principal is None:
        return None
    return pb.Principal(rule=principal.rule, granted_owner=principal.granted_owner)


def status_proto_for(refusal: Refusal) -> status_pb2.Status:
    """The `google.rpc.Status` of a refusal, with its ErrorInfo detail."""
    metadata: dict[str, str] = {}
    if refusal.states:
        metadata["states"] = ",".join(sorted(refusal.states))
    info = error_details_pb2.ErrorInfo(
        reason=str(refusal.code), domain=STORE_DOMAIN, metadata=metadata
    )
    detail = any_pb2.Any()
    detail.Pack(info)
    code: int = grpc.StatusCode[status_code_for(refusal)].value[0]
    return status_pb2.Status(code=code, message=refusal.message, details=[detail])


def grpc_status_for(refusal: Refusal) -> grpc.Status:
    """The `grpc.Status` to abort a call with (`context.abort_with_status`)."""
    return rpc_status.to_status(status_proto_for(refusal))
