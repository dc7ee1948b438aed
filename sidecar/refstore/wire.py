"""The store's records as ArtifactStoreService messages, for its gRPC servicer.

The sidecar's gRPC store client decodes them back (sidecar.upstream.grpc); its
in-process client passes the records through without this round trip.
"""

from __future__ import annotations

from actonce_api.store.v1 import artifact_store_pb2 as pb

from sidecar.refstore.backend import StoredArtifact, StoredMessage, StoredProposal


def encode_artifact(artifact: StoredArtifact) -> pb.StoredArtifact:
    return pb.StoredArtifact(
        id=artifact.id,
        kind=artifact.kind,
        version=artifact.version,
        data_json=artifact.data_json,
        archived=artifact.archived,
    )


def encode_message(message: StoredMessage) -> pb.StoredMessage:
    return pb.StoredMessage(
        id=message.id,
        thread_id=message.thread_id,
        kind=message.kind,
        text=message.text,
        seq=message.seq,
    )


def encode_proposal(proposal: StoredProposal) -> pb.GetProposalResponse:
    return pb.GetProposalResponse(
        proposal_id=proposal.id,
        kind=proposal.kind,
        data_json=proposal.data_json,
        artifact_id=proposal.artifact_id,
        patch_json=proposal.patch_json,
        base_version=proposal.base_version,
    )
