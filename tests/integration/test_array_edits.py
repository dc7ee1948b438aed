"""An edit sets a value (ADR-0019): at an array index it replaces the element that is there.

An insertion would shift the elements after it, so a retry that made the same edits in another
order would look for its value at a shifted place, not find it, and insert again.
"""

from __future__ import annotations

import json
from typing import Any

import grpc
import jsonpatch
import pytest
from actonce_api.store.v1 import artifact_store_pb2 as spb
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import types_pb2

from tests.harness import RunningSidecar, refusal

APPLIED = types_pb2.OUTCOME_APPLIED
ALREADY = types_pb2.OUTCOME_ALREADY_APPLIED
SKIPPED = types_pb2.OUTCOME_SKIPPED

EDITS = (("/items/1", '"y"'), ("/items/0", '"x"'))


def _artifact(sidecar: RunningSidecar) -> str:
    created = sidecar.stub.Create(
        pb.CreateRequest(
            attempt_id=sidecar.begin("setup"), kind="list", data_json='{"items":["a","b","c"]}'
        )
    )
    return str(created.id)


def _stored(sidecar: RunningSidecar, artifact: str) -> Any:
    return sidecar.store.GetArtifact(spb.GetArtifactRequest(artifact_id=artifact)).artifact


def _edit(sidecar: RunningSidecar, attempt: str, artifact: str, path: str, value: str, **kw: Any) -> Any:  # fmt: skip
    return sidecar.stub.Edit(
        pb.EditRequest(attempt_id=attempt, artifact_id=artifact, path=path, value_json=value, **kw)
    )


def test_edits_at_indices_replace_and_a_retry_in_the_other_order_changes_nothing(
    sidecar: RunningSidecar,
) -> None:
    artifact = _artifact(sidecar)
    first = sidecar.begin("run-i", checkpoint="c")
    answers = [_edit(sidecar, first, artifact, path, value) for path, value in EDITS]
    assert [a.outcome for a in answers] == [APPLIED, APPLIED]
    stored = _stored(sidecar, artifact)
    assert json.loads(stored.data_json) == {"items": ["x", "y", "c"]}
    assert stored.version == 3  # each edit written once

    retry = sidecar.begin("run-i", checkpoint="c")
    again = [_edit(sidecar, retry, artifact, path, value) for path, value in reversed(EDITS)]
    assert [(a.outcome, a.version) for a in again] == [(SKIPPED, 3), (SKIPPED, 3)]
    stored = _stored(sidecar, artifact)
    assert (json.loads(stored.data_json), stored.version) == ({"items": ["x", "y", "c"]}, 3)


def test_proposed_edits_at_indices_replace_and_a_reordered_retry_proposes_nothing_new(
    sidecar: RunningSidecar,
) -> None:
    artifact = _artifact(sidecar)
    first = sidecar.begin("run-p", checkpoint="c")
    answers = [_edit(sidecar, first, artifact, p, v, propose=True) for p, v in EDITS]
    retry = sidecar.begin("run-p", checkpoint="c")
    again = [_edit(sidecar, retry, artifact, p, v, propose=True) for p, v in reversed(EDITS)]
    assert [a.outcome for a in answers] == [APPLIED, APPLIED]
    assert [a.outcome for a in again] == [ALREADY, ALREADY]
    assert [a.proposal_id for a in again] == [a.proposal_id for a in reversed(answers)]
    # Accepted in either order, the proposals give the same document.
    patches = [
        json.loads(
            sidecar.store.GetProposal(spb.GetProposalRequest(proposal_id=a.proposal_id)).patch_json
        )
        for a in answers
    ]
    assert [op["op"] for patch in patches for op in patch] == ["replace", "replace"]
    for order in (patches, patches[::-1]):
        document: Any = {"items": ["a", "b", "c"]}
        for patch in order:
            document = jsonpatch.apply_patch(document, patch)
        assert document == {"items": ["x", "y", "c"]}
    assert _stored(sidecar, artifact).version == 1  # a proposal changes nothing until accepted


@pytest.mark.parametrize("propose", [False, True])
@pytest.mark.parametrize("path", ["/items/3", "/items/7", "/items/01", "/items/first"])
def test_an_index_at_or_past_the_end_is_refused_as_bad_input_before_the_store(
    sidecar: RunningSidecar, path: str, propose: bool
) -> None:
    artifact = _artifact(sidecar)
    with pytest.raises(grpc.RpcError) as caught:
        _edit(sidecar, sidecar.begin("run-x"), artifact, path, '"z"', propose=propose)
    got = refusal(caught.value)
    assert (got.code, got.reason, got.failure_class, got.fields) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_ARGUMENT",
        "REFUSED",
        ["path"],
    )
    stored = _stored(sidecar, artifact)
    assert (json.loads(stored.data_json), stored.version) == ({"items": ["a", "b", "c"]}, 1)
    events = sidecar.audit("run-x")
    assert not [e for e in events if e.event.outcome]  # nothing audited as applied
    refused = [e for e in events if e.event.phase == "outcome"]
    assert [(e.event.reason, e.event.failure_class) for e in refused] == [
        ("INVALID_ARGUMENT", "REFUSED")
    ]
    listed = sidecar.store.ListArtifacts(spb.ListArtifactsRequest(kind="list")).artifacts
    assert len(listed) == 1


def test_object_members_are_still_added_or_replaced_and_a_missing_parent_is_refused_by_the_sidecar(
    sidecar: RunningSidecar,
) -> None:
    artifact = _artifact(sidecar)
    attempt = sidecar.begin("run-o")
    assert _edit(sidecar, attempt, artifact, "/owner", '"ann"').outcome == APPLIED
    assert _edit(sidecar, attempt, artifact, "/owner", '"bob"').outcome == APPLIED
    before = _stored(sidecar, artifact)
    with pytest.raises(grpc.RpcError) as caught:
        _edit(sidecar, attempt, artifact, "/missing/deeper", "1")
    got = refusal(caught.value)
    # The path and the missing member are named, with how to change the call; the
    # artifact's data is not quoted.
    # PATCH_FAILED, as the store would answer the patch, but said before it is sent.
    assert (got.code, got.reason, got.failure_class, got.fields, got.message) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "PATCH_FAILED",
        "REFUSED",
        ["path"],
        "path: '/missing/deeper' cannot be set: the artifact has no member 'missing'; an edit "
        "sets one value in a parent that exists. Set both in one edit: path '/missing', value "
        '{"deeper": <the value>}',
    )
    stored = _stored(sidecar, artifact)
    assert json.loads(stored.data_json) == {"items": ["a", "b", "c"], "owner": "bob"}
    assert stored.version == before.version  # no patch reached the store
    edits = [e.event for e in sidecar.audit("run-o") if e.event.phase == "outcome"]
    assert [(e.outcome, e.reason) for e in edits][-1] == ("", "PATCH_FAILED")
    assert [e.outcome for e in edits].count("OUTCOME_APPLIED") == 2
