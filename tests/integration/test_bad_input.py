"""Bad input: INVALID_ARGUMENT with ErrorInfo and a field violation; nothing changes."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from actonce_api.v1 import run_actions_pb2 as pb

from sidecar.rules.canonical import MAX_JSON_BYTES, MAX_JSON_DEPTH, MAX_TEXT_BYTES
from tests.harness import RunningSidecar, refusal

ATTEMPT = "{attempt}"
DEEP = "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1)
HUGE = '{"x":"' + "a" * MAX_JSON_BYTES + '"}'

CASES: list[tuple[str, str, dict[str, Any], str]] = [
    ("invalid json", "Create", {"kind": "k", "data_json": "{"}, "data_json"),
    ("NaN", "Create", {"kind": "k", "data_json": '{"x": NaN}'}, "data_json"),
    ("Infinity", "Create", {"kind": "k", "data_json": "Infinity"}, "data_json"),
    ("trailing garbage", "Create", {"kind": "k", "data_json": '{"x":1} tail'}, "data_json"),
    ("duplicate keys", "Create", {"kind": "k", "data_json": '{"x":1,"x":2}'}, "data_json"),
    ("too deep", "Create", {"kind": "k", "data_json": DEEP}, "data_json"),
    ("too large", "Create", {"kind": "k", "data_json": HUGE}, "data_json"),
    ("unsafe integer", "Create", {"kind": "k", "data_json": "9007199254740993"}, "data_json"),
    ("empty data", "Create", {"kind": "k", "data_json": ""}, "data_json"),
    ("array data", "Create", {"kind": "k", "data_json": "[1]"}, "data_json"),
    ("number data", "Create", {"kind": "k", "data_json": "1"}, "data_json"),
    ("string data", "Create", {"kind": "k", "data_json": '"x"'}, "data_json"),
    ("null data", "Create", {"kind": "k", "data_json": "null"}, "data_json"),
    (
        "proposed array data",
        "Create",
        {"kind": "k", "data_json": "[1]", "propose": True},
        "data_json",
    ),
    ("empty kind", "Create", {"kind": "", "data_json": "{}"}, "kind"),
    ("empty title", "CreateThread", {"title": ""}, "title"),
    ("empty thread id", "Notice", {"thread_id": "", "text": "x"}, "thread_id"),
    ("empty text", "Notice", {"thread_id": "thr_x", "text": ""}, "text"),
    ("text too long", "Notice", {"thread_id": "thr_x", "text": "x" * (MAX_TEXT_BYTES + 1)}, "text"),
    ("empty send text", "Send", {"thread_id": "thr_x", "text": ""}, "text"),
    (
        "malformed pointer",
        "Edit",
        {"artifact_id": "a", "path": "no-slash", "value_json": "1"},
        "path",
    ),
    ("bad escape", "Edit", {"artifact_id": "a", "path": "/a~2", "value_json": "1"}, "path"),
    ("root pointer", "Edit", {"artifact_id": "a", "path": "", "value_json": "1"}, "path"),
    ("append pointer", "Edit", {"artifact_id": "a", "path": "/list/-", "value_json": "1"}, "path"),
    ("bad value", "Edit", {"artifact_id": "a", "path": "/a", "value_json": "nope"}, "value_json"),
    (
        "empty artifact id",
        "Edit",
        {"artifact_id": "", "path": "/a", "value_json": "1"},
        "artifact_id",
    ),
    ("no read target", "Read", {}, "target"),
    (
        "missing attempt id",
        "Create",
        {"attempt_id": "", "kind": "k", "data_json": "{}"},
        "attempt_id",
    ),
    ("empty tool", "BeginStep", {"tool": "", "args_json": "{}"}, "tool"),
    ("bad step args", "BeginStep", {"tool": "t", "args_json": "[1,"}, "args_json"),
]


@pytest.mark.parametrize(("name", "rpc", "fields", "field"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_gets_invalid_argument_naming_the_field_and_changes_nothing(
    sidecar: RunningSidecar, name: str, rpc: str, fields: dict[str, Any], field: str
) -> None:
    attempt = sidecar.begin("run-bad")
    request = getattr(pb, f"{rpc}Request")(**{"attempt_id": attempt, **fields})
    before = len(sidecar.audit())
    with pytest.raises(grpc.RpcError) as caught:
        getattr(sidecar.stub, rpc)(request)
    got = refusal(caught.value)
    assert got.code == grpc.StatusCode.INVALID_ARGUMENT
    assert (got.reason, got.domain, got.failure_class) == ("INVALID_ARGUMENT", "actonce", "REFUSED")
    assert got.fields == [field]
    # Nothing reached the ledger or the store, and the sidecar still serves.
    assert len(sidecar.audit()) == before
    assert sidecar.artifacts("k") == []
    assert sidecar.health() == 1  # SERVING


def test_data_that_is_no_object_is_refused_by_the_sidecar_saying_what_to_send(
    sidecar: RunningSidecar,
) -> None:
    """The store contract keeps documents; the sidecar says so before anything is audited."""
    attempt = sidecar.begin("run-array")
    before = sidecar.audit()
    with pytest.raises(grpc.RpcError) as caught:
        sidecar.stub.Create(pb.CreateRequest(attempt_id=attempt, kind="k", data_json="[1]"))
    got = refusal(caught.value)
    assert (got.code, got.reason, got.failure_class, got.fields, got.message) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_ARGUMENT",
        "REFUSED",
        ["data_json"],
        "data_json: must be a JSON object, got an array: an artifact's data is a document "
        'whose members edits set. Wrap the value in an object, e.g. {"items": ...}',
    )
    assert sidecar.audit() == before
    assert sidecar.artifacts("k") == []
