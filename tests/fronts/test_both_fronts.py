"""One table of bad inputs through both fronts: gRPC and MCP refuse each alike, with the
same reason and the same field (the MCP argument carrying a JSON value is the gRPC field's
``*_json`` text), and neither writes anything.

MCP calls are sent as raw JSON-RPC bodies, so that what a client library would tidy away
(a key given twice) reaches the front as a hostile or careless client sends it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx2
import pytest
from actonce_api.v1 import run_actions_pb2 as pb

from sidecar.ledger.base import Phase
from tests.fronts.mcp.clients import ATTEMPT_HEADER, begin_over_http
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


@pytest.fixture
def served(tmp_path: Path) -> Iterator[RunningSidecar]:
    running = start_sidecar(sidecar_config(tmp_path / "data", mcp_listen="127.0.0.1:0"))
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


@pytest.mark.parametrize("bad", BAD, ids=[f"{b.tool}-{b.reason}-{b.field}" for b in BAD])
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
