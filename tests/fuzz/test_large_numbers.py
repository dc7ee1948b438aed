"""Edits of artifacts that hold numbers beyond 2^53 (found by the property tests).

JSON has one number type. RFC 8785 writes an integral double of 2^53 or more as plain digits
(6.0608476658418680e16 as "60608476658418680"), which is how the sidecar sends a document to
the store; read back, that is an integer beyond the safe range, which canonicalization
refuses. The edit then failed with a bare UNKNOWN status, for every edit of that path, on an
artifact the sidecar itself had created. A store's document can also hold numbers no I-JSON
writer would send (another writer's): an edit of such a path must not fail either.
"""

from __future__ import annotations

import json

import pytest
from actonce_api.store.v1 import artifact_store_pb2 as spb
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import types_pb2

from sidecar.errors import InvalidArgument
from sidecar.rules import canonical, edits
from tests.harness import RunningSidecar


def test_an_edit_of_a_large_integral_number_the_sidecar_stored_is_skipped_when_equal(
    sidecar: RunningSidecar,
) -> None:
    attempt = sidecar.begin("run-big")
    created = sidecar.stub.Create(
        pb.CreateRequest(attempt_id=attempt, kind="k", data_json='{"big": 6.060847665841868e16}')
    )
    again = sidecar.stub.Edit(
        pb.EditRequest(attempt_id=attempt, artifact_id=created.id, path="/big",
                       value_json="6.060847665841868e16")
    )  # fmt: skip
    assert (again.outcome, again.version) == (types_pb2.OUTCOME_SKIPPED, 1)
    changed = sidecar.stub.Edit(
        pb.EditRequest(attempt_id=attempt, artifact_id=created.id, path="/big", value_json="1")
    )
    assert (changed.outcome, changed.version) == (types_pb2.OUTCOME_APPLIED, 2)


def test_a_document_read_back_with_a_large_double_can_be_sent_again(
    sidecar: RunningSidecar,
) -> None:
    # The store hands 6.060847665841868e16 back as the digits RFC 8785 writes for it. An agent
    # whose retry sends the document it read makes the same write, not a refused one.
    first = sidecar.begin("run-read-back")
    created = sidecar.stub.Create(
        pb.CreateRequest(attempt_id=first, kind="k", data_json='{"big": 6.060847665841868e16}')
    )
    read = sidecar.stub.Read(pb.ReadRequest(attempt_id=first, artifact_id=created.id))
    assert read.artifact.data_json == '{"big":60608476658418680}'
    retry = sidecar.begin("run-read-back")
    again = sidecar.stub.Create(
        pb.CreateRequest(attempt_id=retry, kind="k", data_json=read.artifact.data_json)
    )
    assert (again.id, again.outcome) == (created.id, types_pb2.OUTCOME_ALREADY_APPLIED)
    edited = sidecar.stub.Edit(
        pb.EditRequest(attempt_id=retry, artifact_id=created.id, path="/big",
                       value_json="60608476658418680")
    )  # fmt: skip
    assert (edited.outcome, edited.version) == (types_pb2.OUTCOME_SKIPPED, 1)


def test_large_integers_no_double_is_written_as_are_refused() -> None:
    # The last one (found by atheris): a large double first, a lone surrogate after it.
    for text in ("9007199254740993", '{"n": 60608476658418681}', "1" + "0" * 400,
                 '[60608476658418680, "\\ud854"]'):  # fmt: skip
        with pytest.raises(InvalidArgument) as caught:
            canonical.parse_json(text, "data_json")
        assert caught.value.violations[0].field == "data_json"
    assert canonical.parse_json("[60608476658418680, -60608476658418680]", "x") == [
        6.060847665841868e16,
        -6.060847665841868e16,
    ]


def test_an_edit_of_a_number_no_i_json_writer_sends_sets_the_value(sidecar: RunningSidecar) -> None:
    # Another writer of the store put an integer the sidecar would refuse as input.
    sidecar.store.CreateArtifact(
        spb.CreateArtifactRequest(artifact_id="art_other", kind="k",
                                  data_json='{"n": 9007199254740993, "huge": 1' + "0" * 400 + "}")
    )  # fmt: skip
    attempt = sidecar.begin("run-other")
    for path in ("/n", "/huge"):
        answer = sidecar.stub.Edit(
            pb.EditRequest(attempt_id=attempt, artifact_id="art_other", path=path, value_json="7")
        )
        assert answer.outcome == types_pb2.OUTCOME_APPLIED
    stored = sidecar.store.GetArtifact(spb.GetArtifactRequest(artifact_id="art_other")).artifact
    assert json.loads(stored.data_json) == {"n": 7, "huge": 7}


def test_holds_compares_numbers_as_json_does() -> None:
    assert edits.holds({"x": 60608476658418680}, "/x", 6.060847665841868e16)
    # RFC 8785 writes the shortest digits that read back as the double, not its exact value.
    assert edits.holds({"x": [60608476658418380]}, "/x", [6.060847665841838e16])
    assert not edits.holds({"x": 9007199254740993}, "/x", 9007199254740992.0)
    assert not edits.holds({"x": float("nan")}, "/x", 1)
    assert not edits.holds({"x": 10**400}, "/x", 1)
    assert not edits.holds({"x": True}, "/x", 1)
