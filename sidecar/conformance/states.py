"""The checks of an artifact's states and versions: created, archived, every refusing state
named; a patch bumps the version, a stale or failing one changes nothing.
"""

from __future__ import annotations

import json

from actonce_api.store.v1 import artifact_store_pb2 as pb

from sidecar.conformance.kit import Store, data_of, expect, same, same_artifact
from sidecar.store_contract import (
    ARCHIVED,
    ID_USED,
    RefusalCode,
)


def created_state(store: Store) -> str:
    data = {"title": "conformance", "tags": ["a"], "n": 1}
    created = store.new_artifact(data)
    same(
        "the created artifact (version, archived)", (created.version, created.archived), (1, False)
    )
    same("the created artifact's data", data_of(created), data)
    read = store.artifact(created.id)
    same(
        "the artifact read back",
        (read.id, read.kind, read.version, read.archived, data_of(read)),
        (created.id, created.kind, 1, False, data),
    )
    return "an artifact starts at version 1, unarchived, with its data as given"


def patch_bumps_version(store: Store) -> str:
    created = store.new_artifact({"n": 1})
    for version in (1, 2):
        patch = json.dumps([{"op": "add", "path": f"/v{version}", "value": version}])
        request = pb.PatchArtifactRequest(
            artifact_id=created.id, expected_version=version, patch_json=patch
        )
        patched = store.call("PatchArtifact", request).artifact
        same(f"the version after patch {version}", patched.version, version + 1)
    same("the patched data", data_of(store.artifact(created.id)), {"n": 1, "v1": 1, "v2": 2})
    return "a patch at the current version applies and bumps the version by one"


def stale_version(store: Store) -> str:
    created = store.new_artifact({"n": 1})
    bump = pb.PatchArtifactRequest(
        artifact_id=created.id,
        expected_version=1,
        patch_json='[{"op": "add", "path": "/n", "value": 2}]',
    )
    store.call("PatchArtifact", bump)
    for version in (1, 3):
        stale = pb.PatchArtifactRequest(
            artifact_id=created.id,
            expected_version=version,
            patch_json='[{"op": "add", "path": "/n", "value": 9}]',
        )
        expect(store.refused("PatchArtifact", stale), RefusalCode.VERSION_CONFLICT)
    same_artifact(store, created.id, "the artifact after the refused patches", {"n": 2}, 2)
    return "a patch at a stale or a future version is VERSION_CONFLICT and changes nothing"


def patch_that_does_not_apply(store: Store) -> str:
    created = store.new_artifact({"n": 1})
    for patch in (
        [{"op": "add", "path": "/missing/child", "value": 1}],
        [{"op": "test", "path": "/n", "value": 2}],
        # The first operation would apply: nothing of the patch may be kept.
        [{"op": "add", "path": "/extra", "value": 1}, {"op": "remove", "path": "/absent"}],
    ):
        request = pb.PatchArtifactRequest(
            artifact_id=created.id, expected_version=1, patch_json=json.dumps(patch)
        )
        expect(store.refused("PatchArtifact", request), RefusalCode.PATCH_FAILED)
    same_artifact(store, created.id, "the artifact after the refused patches", {"n": 1}, 1)
    return "a patch that does not apply is PATCH_FAILED, and none of its operations is kept"


def archived_artifact(store: Store) -> str:
    created = store.new_artifact({"n": 1})
    archived = store.call(
        "ArchiveArtifact", pb.ArchiveArtifactRequest(artifact_id=created.id)
    ).artifact
    same("the archived artifact's archived flag", archived.archived, True)
    same("the artifact read back archived", store.artifact(created.id).archived, True)
    patch = pb.PatchArtifactRequest(
        artifact_id=created.id,
        expected_version=archived.version,
        patch_json='[{"op": "add", "path": "/n", "value": 2}]',
    )
    expect(store.refused("PatchArtifact", patch), RefusalCode.INVALID_STATE, {ARCHIVED})
    again = pb.ArchiveArtifactRequest(artifact_id=created.id)
    expect(store.refused("ArchiveArtifact", again), RefusalCode.INVALID_STATE, {ARCHIVED})
    proposal = pb.CreateProposalRequest(
        proposal_id=store.id("proposal"),
        artifact_id=created.id,
        patch_json=patch.patch_json,
        base_version=archived.version,
    )
    expect(store.refused("CreateProposal", proposal), RefusalCode.INVALID_STATE, {ARCHIVED})
    same_artifact(store, created.id, "the archived artifact's data", {"n": 1}, archived.version)
    return "archived, it refuses patches, proposed edits, archiving: INVALID_STATE {ARCHIVED}"


def every_state_is_named(store: Store) -> str:
    created = store.new_artifact({"n": 1})
    proposal_id = store.id("proposal")
    patch = '[{"op": "add", "path": "/n", "value": 2}]'
    edit = pb.CreateProposalRequest(
        proposal_id=proposal_id, artifact_id=created.id, patch_json=patch, base_version=1
    )
    store.call("CreateProposal", edit)
    store.call("ArchiveArtifact", pb.ArchiveArtifactRequest(artifact_id=created.id))
    # ID_USED alone would read as "already made"; the archive refuses it too, and must say so.
    expect(store.refused("CreateProposal", edit), RefusalCode.INVALID_STATE, {ID_USED, ARCHIVED})
    return "a refusal names every state that refused it (ID_USED and ARCHIVED), never ID_USED alone"
