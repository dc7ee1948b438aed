"""The store's records as ArtifactStoreService messages, for its gRPC servicer.

The sidecar's gRPC store client decodes them back with `from_message`
(sidecar.upstream.grpc); its in-process client passes the records through without
this round trip.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import TYPE_CHECKING, TypeVar

from actonce_api.store.v1 import artifact_store_pb2 as pb
from google.protobuf.message import Message

from sidecar.refstore.backend import StoredArtifact, StoredMessage, StoredProposal

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
