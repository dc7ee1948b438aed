"""Both fronts are built from one table of the API (sidecar.fronts.operations): they list
the same calls, and refuse each bad call alike, with the same reason and the same field
(the MCP argument carrying a JSON value is the gRPC field's ``*_json`` text), and neither
writes anything.

MCP calls are sent as raw JSON-RPC bodies, so that what a client library would tidy away
(a key given twice) reaches the front as a hostile or careless client sends it. Besides the
hand-written cases, one bad call is made for every argument of every tool the table
serves, by the argument's kind: a call added to the table is checked on both fronts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import httpx2
import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import types_pb2
from google.protobuf import descriptor_pool
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from sidecar.fronts.operations import SERVICE, TABLE, TOOLS, Field, Kind, Operation
from sidecar.ledger.base import Phase
from tests.fronts.mcp.clients import ATTEMPT_HEADER, begin_over_http, list_tools
from tests.harness import RunningSidecar, refusal, sidecar_config, start_sidecar

# An MCP argument that carries JSON is the gRPC field's text of it.
GRPC_FIELD = {"data": "data_json", "value": "value_json"}
DEEP = "[" * 70 + "]" * 70


@dataclass(frozen=True)
class Bad:
    """One bad call: the tool and its raw JSON arguments (as an MCP client sends them),
    the gRPC request that says the same, and what both must answer."""

    tool: str
    arguments: str
    rpc: str
    request: dict[str, Any]
    reason: str
    field: str = ""


BAD = [
    Bad("create", '{"kind": "", "data": {}}', "Create", {"kind": "", "data_json": "{}"},
        "INVALID_ARGUMENT", "kind"),
    Bad("create", '{"kind": "k", "data": {"a": 1, "a": 2}}', "Create",
        {"kind": "k", "data_json": '{"a": 1, "a": 2}'}, "INVALID_ARGUMENT", "data"),
    Bad("create", f'{{"kind": "k", "data": {DEEP}}}', "Create",
        {"kind": "k", "data_json": DEEP}, "INVALID_ARGUMENT", "data"),
    Bad("edit", '{"artifact_id": "a1", "path": "status", "value": 1}', "Edit",
        {"artifact_id": "a1", "path": "status", "value_json": "1"}, "INVALID_ARGUMENT", "path"),
    Bad("edit", '{"artifact_id": "a1", "path": "/s", "value": {"x": 1, "x": 1}}', "Edit",
        {"artifact_id": "a1", "path": "/s", "value_json": '{"x": 1, "x": 1}'},
        "INVALID_ARGUMENT", "value"),
    Bad("notice", '{"thread_id": "", "text": "hi"}', "Notice", {"thread_id": "", "text": "hi"},
        "INVALID_ARGUMENT", "thread_id"),
    Bad("notice", '{"thread_id": "t1", "text": "a\\u0000b"}', "Notice",
        {"thread_id": "t1", "text": "a\x00b"}, "INVALID_ARGUMENT", "text"),
    Bad("create_thread", json.dumps({"title": "t" * 600}), "CreateThread", {"title": "t" * 600},
        "INVALID_ARGUMENT", "title"),
    Bad("send", '{"thread_id": "t1", "text": "go"}', "Send", {"thread_id": "t1", "text": "go"},
        "FORBIDDEN"),
]  # fmt: skip


# A valid value of each tool argument, as JSON text, and bad ones by the argument's kind,
# each refused as INVALID_ARGUMENT naming it before anything is tried. A bad value is the
# raw JSON text of the MCP argument and the gRPC field's value alike (for JSON, its text).
VALID = {"kind": '"k"', "data": '{"a": 1}', "artifact_id": '"a1"', "path": '"/s"',
         "value": "1", "thread_id": '"t1"', "text": '"hi"', "title": '"t"'}  # fmt: skip
BAD_BY_KIND: dict[Kind, list[str]] = {
    Kind.NAME: ['""'],
    Kind.TEXT: ['"a\\u0000b"'],
    Kind.OPTIONAL_TEXT: ['"a\\u0000b"'],
    Kind.JSON: ['{"x": 1, "x": 1}', DEEP, '{"x": NaN}', "-Infinity"],
    Kind.DOCUMENT: ['{"a": 1, "a": 2}', DEEP, "[1]", '{"a": NaN, "b": Infinity}'],
}


def _grpc_value(field: Field, text: str) -> Any:
    return text if field.kind in (Kind.JSON, Kind.DOCUMENT) else json.loads(text)


def _case(op: Operation, bad: Field, text: str) -> Bad:
    """``op``'s call with every argument valid but ``bad``, which is ``text``."""
    assert op.tool is not None
    given: dict[Field, str] = {}
    for f in op.fields:
        if f is bad:
            given[f] = text
        elif not (f.bound or f.oneof or f.kind in (Kind.FLAG, Kind.OPTIONAL_TEXT)):  # left out
            given[f] = VALID[f.parameter]
    arguments = "{" + ", ".join(f'"{f.parameter}": {v}' for f, v in given.items()) + "}"
    request = {f.name: _grpc_value(f, v) for f, v in given.items()}
    return Bad(op.tool.name, arguments, op.rpc, request, "INVALID_ARGUMENT", bad.parameter)


GENERATED = [
    _case(op, f, text)
    for op in TOOLS.values()
    for f in op.fields
    if not f.bound
    for text in BAD_BY_KIND.get(f.kind, [])
]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSidecar]:
    data = tmp_path_factory.mktemp("both-fronts") / "data"
    running = start_sidecar(sidecar_config(data, mcp_listen="127.0.0.1:0"))
    try:
        yield running
    finally:
        running.stop()


def _over_mcp(base: str, attempt_id: str, bad: Bad) -> dict[str, Any]:
    body = (
        '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", '
        f'"params": {{"name": "{bad.tool}", "arguments": {bad.arguments}}}}}'
    )
    answer = httpx2.post(
        f"{base}/mcp",
        content=body,
        headers={
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": "2025-06-18",
            ATTEMPT_HEADER: attempt_id,
        },
    )
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    assert result["isError"] is True, result
    return dict(result["structuredContent"])


def _over_grpc(served: RunningSidecar, attempt_id: str, bad: Bad) -> tuple[str, list[str]]:
    request = getattr(pb, f"{bad.rpc}Request")(attempt_id=attempt_id, **bad.request)
    with pytest.raises(grpc.RpcError) as refused:
        getattr(served.stub, bad.rpc)(request)
    said = refusal(refused.value)
    return said.reason, said.fields


def _id(bad: Bad) -> str:
    return f"{bad.tool}-{bad.reason}-{bad.field}-{bad.arguments[:40]}"


@pytest.mark.parametrize("bad", BAD + GENERATED, ids=[_id(b) for b in BAD + GENERATED])
def test_both_fronts_refuse_a_bad_call_with_the_same_reason_and_field(
    served: RunningSidecar, bad: Bad
) -> None:
    base = f"http://127.0.0.1:{served.sidecar.mcp_port}"
    mcp_attempt = begin_over_http(base, "run-bad-mcp")
    grpc_attempt = served.begin("run-bad-grpc")
    said = _over_mcp(base, mcp_attempt, bad)
    reason, fields = _over_grpc(served, grpc_attempt, bad)
    assert said["reason"] == reason == bad.reason
    mcp_fields = [v["field"] for v in said.get("field_violations", [])]
    assert [GRPC_FIELD.get(f, f) for f in mcp_fields] == fields
    if bad.field:
        assert mcp_fields == [bad.field]
    # Nothing was tried by either: no intent in the ledger.
    for run in ("run-bad-mcp", "run-bad-grpc"):
        assert [e.event.phase for e in served.audit(run) if e.event.phase == Phase.INTENT] == []


def test_attempts_over_http_take_a_scope_and_refuse_fields_they_do_not_know(
    served: RunningSidecar,
) -> None:
    base = f"http://127.0.0.1:{served.sidecar.mcp_port}"
    scoped = httpx2.post(
        f"{base}/attempts",
        json={"run_id": "run-s", "rule": "r", "checkpoint": "c", "scope": "call_1"},
    )
    assert scoped.status_code == 200
    events = served.audit("run-s")
    assert [e.event.scope for e in events] == ["call_1"]
    unknown = httpx2.post(
        f"{base}/attempts", json={"run_id": "run-s", "rule": "r", "checkpoint": "c", "scop": "x"}
    )
    assert unknown.status_code == 400 and unknown.json()["reason"] == "INVALID_ARGUMENT"


def _reflected_methods(channel: grpc.Channel) -> list[str]:
    """The RunActionsService methods the server lists through its own reflection."""
    pool = descriptor_pool.DescriptorPool(ProtoReflectionDescriptorDatabase(channel))
    return [m.name for m in pool.FindServiceByName(SERVICE.full_name).methods]


def _answered(channel: grpc.Channel, rpc: str) -> grpc.StatusCode:
    """The status an empty request of ``rpc`` gets: any but UNIMPLEMENTED means it is served."""
    raw: Any = channel  # raw bytes in and out, which grpc's stubs do not type
    try:
        raw.unary_unary(f"/{SERVICE.full_name}/{rpc}")(b"", timeout=10)
    except grpc.RpcError as error:
        return error.code()
    return grpc.StatusCode.OK


def test_the_table_the_grpc_methods_and_the_mcp_tools_list_the_same_calls(
    served: RunningSidecar,
) -> None:
    table = [op.rpc for op in TABLE]
    assert _reflected_methods(served.channel) == table == [m.name for m in SERVICE.methods]
    codes = {rpc: _answered(served.channel, rpc) for rpc in table}
    assert grpc.StatusCode.UNIMPLEMENTED not in codes.values(), codes
    assert _answered(served.channel, "NoSuchCall") == grpc.StatusCode.UNIMPLEMENTED
    base = f"http://127.0.0.1:{served.sidecar.mcp_port}"
    listed = {tool.name: tool for tool in list_tools(f"{base}/mcp")}
    assert list(listed) == list(TOOLS) == [op.tool.name for op in TABLE if op.tool is not None]
    for name, op in TOOLS.items():
        # A tool's arguments are its request's fields but those the harness binds.
        arguments = [f.parameter for f in op.fields if not f.bound]
        assert list(listed[name].input_schema["properties"]) == arguments


def test_attempts_over_http_take_beginattempts_fields_as_grpc_does(served: RunningSidecar) -> None:
    base = f"http://127.0.0.1:{served.sidecar.mcp_port}"
    delivery = begin_over_http(base, "run-d")
    body: dict[str, Any] = {
        "run_id": "run-d",
        "rule": "triage",
        "checkpoint": "cp-0",
        "scope": "c1",
    }
    scoped = httpx2.post(f"{base}/attempts", json={**body, "delivery_attempt_id": delivery})
    assert scoped.status_code == 200, scoped.text
    unscoped = {**body, "scope": "", "delivery_attempt_id": delivery}
    over_http = httpx2.post(f"{base}/attempts", json=unscoped)
    with pytest.raises(grpc.RpcError) as over_grpc:
        served.stub.BeginAttempt(pb.BeginAttemptRequest(**unscoped))
    said = refusal(over_grpc.value)
    assert over_http.status_code == 400
    assert over_http.json()["reason"] == said.reason == "INVALID_ARGUMENT"
    assert over_http.json()["message"] == said.message
    assert said.fields == ["delivery_attempt_id"]
    wrong = httpx2.post(f"{base}/attempts", json={**body, "rule": 7})
    assert wrong.status_code == 400 and wrong.json()["message"] == "rule: must be a string, not int"


@pytest.mark.parametrize("name", ["run_id", "rule", "checkpoint", "scope", "delivery_attempt_id"])
def test_a_null_field_of_an_attempt_is_refused_and_fences_nothing(
    served: RunningSidecar, name: str
) -> None:
    # A harness that writes an unset field as null gets a refusal, not an unscoped
    # attempt: that would be a newer delivery of the run, and fence the live one.
    base = f"http://127.0.0.1:{served.sidecar.mcp_port}"
    run_id = f"run-null-{name}"
    live = begin_over_http(base, run_id)
    body = {"run_id": run_id, "rule": "triage", "checkpoint": "cp-0", name: None}
    answer = httpx2.post(f"{base}/attempts", json=body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["reason"] == "INVALID_ARGUMENT"
    assert answer.json()["message"] == f"{name}: must be a string, not null"
    made = served.stub.Create(pb.CreateRequest(attempt_id=live, kind="note", data_json="{}"))
    assert made.outcome == types_pb2.OUTCOME_APPLIED


def test_a_field_of_an_attempt_given_twice_is_refused_as_a_tools_argument_is(
    served: RunningSidecar,
) -> None:
    base = f"http://127.0.0.1:{served.sidecar.mcp_port}"
    body = '{"run_id": "run-twice", "run_id": "run-other", "rule": "triage", "checkpoint": "c"}'
    answer = httpx2.post(
        f"{base}/attempts", content=body, headers={"content-type": "application/json"}
    )
    assert answer.status_code == 400, answer.text
    assert answer.json()["message"] == "run_id: is given twice"
    assert served.audit("run-twice") == [] and served.audit("run-other") == []
