"""The checks of the refusal table: each code with its status and its ErrorInfo."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from actonce_api.store.v1 import artifact_store_pb2 as pb

from sidecar.conformance.kit import Broken, Store, expect
from sidecar.store_contract import (
    RefusalCode,
)


def not_found(store: Store) -> str:
    missing = store.id("missing")
    for rpc, request in (
        ("GetArtifact", pb.GetArtifactRequest(artifact_id=missing)),
        (
            "PatchArtifact",
            pb.PatchArtifactRequest(
                artifact_id=missing,
                expected_version=1,
                patch_json='[{"op": "add", "path": "/n", "value": 1}]',
            ),
        ),
        ("ArchiveArtifact", pb.ArchiveArtifactRequest(artifact_id=missing)),
        ("GetProposal", pb.GetProposalRequest(proposal_id=missing)),
        (
            "PostMessage",
            pb.PostMessageRequest(
                message_id=store.id("message"), thread_id=missing, kind="notice", text="x"
            ),
        ),
        ("ListMessages", pb.ListMessagesRequest(thread_id=missing)),
        ("RequestTurn", pb.RequestTurnRequest(message_id=missing)),
    ):
        try:
            expect(store.refused(rpc, request), RefusalCode.NOT_FOUND)
        except Broken as broken:
            raise Broken(f"{rpc} of an unknown id: {broken}") from None
    return "what does not exist is NOT_FOUND (domain store.actonce), for every read and write"


def validation_failed(store: Store) -> str:
    kind = f"{store.prefix}-kind"

    def create(artifact_id: str, kind: str, data_json: str) -> Any:
        return pb.CreateArtifactRequest(artifact_id=artifact_id, kind=kind, data_json=data_json)

    def bad_patch() -> Any:
        created = store.new_artifact({"n": 1})
        return pb.PatchArtifactRequest(
            artifact_id=created.id, expected_version=1, patch_json='{"op": "add"}'
        )

    def bad_kind() -> Any:
        thread_id = store.new_thread()
        return pb.PostMessageRequest(
            message_id=store.id("m"), thread_id=thread_id, kind="shout", text="x"
        )

    cases: list[tuple[str, str, Callable[[], Any]]] = [
        ("data that is not JSON", "CreateArtifact", lambda: create(store.id("a"), kind, "{")),
        ("data that is no object", "CreateArtifact", lambda: create(store.id("a"), kind, "[1]")),
        ("an empty kind", "CreateArtifact", lambda: create(store.id("a"), "", "{}")),
        ("an empty id", "CreateArtifact", lambda: create("", kind, "{}")),
        ("a patch that is no JSON Patch", "PatchArtifact", bad_patch),
        ("a message of an unknown kind", "PostMessage", bad_kind),
        (
            "an empty thread title",
            "CreateThread",
            lambda: pb.CreateThreadRequest(thread_id=store.id("t"), title=""),
        ),
    ]
    for what, rpc, request in cases:
        try:
            expect(store.refused(rpc, request()), RefusalCode.VALIDATION_FAILED)
        except Broken as broken:
            raise Broken(f"{what}: {broken}") from None
    return (
        "bad input is VALIDATION_FAILED (INVALID_ARGUMENT): data no object, empty names, no patch"
    )


def forbidden(store: Store) -> str:
    if not store.metadata:
        return "SKIP: no token given (--token-file), so a call without one proves nothing"
    expect(
        store.refused("GetArtifact", pb.GetArtifactRequest(artifact_id=store.id("x")), metadata=()),
        RefusalCode.FORBIDDEN,
    )
    wrong = (("authorization", "Bearer not-the-token"),)
    expect(
        store.refused(
            "GetArtifact", pb.GetArtifactRequest(artifact_id=store.id("x")), metadata=wrong
        ),
        RefusalCode.FORBIDDEN,
    )
    return "a call without the token, or with another, is FORBIDDEN (PERMISSION_DENIED)"
