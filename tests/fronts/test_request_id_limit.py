"""A request_id's limit is 512 bytes of UTF-8 on both fronts, whatever its characters:
256 "é" is 512 bytes (and 256 characters) and is taken; one ASCII letter more is 513 bytes
and is refused, naming request_id, over gRPC and over MCP alike."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import httpx2
import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import types_pb2

from tests.fronts.mcp.clients import ATTEMPT_HEADER, begin_over_http
from tests.harness import RunningSidecar, refusal, sidecar_config, start_sidecar

AT_THE_LIMIT = "é" * 256
OVER_THE_LIMIT = AT_THE_LIMIT + "a"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSidecar]:
    data = tmp_path_factory.mktemp("request-id") / "data"
    running = start_sidecar(sidecar_config(data, mcp_listen="127.0.0.1:0"))
    try:
        yield running
    finally:
        running.stop()


def _create_over_mcp(served: RunningSidecar, run_id: str, request_id: str) -> dict[str, Any]:
    base = f"http://127.0.0.1:{served.sidecar.mcp_port}"
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "create",
            "arguments": {"kind": "k", "data": {"a": 1}},
            "_meta": {"actonce/request_id": request_id},
        },
    }
    answer = httpx2.post(
        f"{base}/mcp",
        json=body,
        headers={
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": "2025-06-18",
            ATTEMPT_HEADER: begin_over_http(base, run_id),
        },
    )
    assert answer.status_code == 200, answer.text
    return dict(answer.json()["result"]["structuredContent"])


def _create_request(served: RunningSidecar, run_id: str, request_id: str) -> pb.CreateRequest:
    attempt_id = served.begin(run_id)
    return pb.CreateRequest(attempt_id=attempt_id, kind="k", data_json='{"a": 1}',
                            request_id=request_id)  # fmt: skip


def test_a_request_id_of_512_bytes_in_multibyte_text_is_taken_on_both_fronts(
    served: RunningSidecar,
) -> None:
    assert len(AT_THE_LIMIT.encode()) == 512
    said = _create_over_mcp(served, "run-512-mcp", AT_THE_LIMIT)
    assert said["outcome"] == "OUTCOME_APPLIED", said
    answer = served.stub.Create(_create_request(served, "run-512-grpc", AT_THE_LIMIT))
    assert answer.outcome == types_pb2.OUTCOME_APPLIED


def test_a_request_id_of_513_bytes_is_refused_alike_on_both_fronts(
    served: RunningSidecar,
) -> None:
    assert len(OVER_THE_LIMIT.encode()) == 513
    said = _create_over_mcp(served, "run-513-mcp", OVER_THE_LIMIT)
    assert said["reason"] == "INVALID_ARGUMENT", said
    assert [v["field"] for v in said["field_violations"]] == ["request_id"]
    with pytest.raises(grpc.RpcError) as caught:
        served.stub.Create(_create_request(served, "run-513-grpc", OVER_THE_LIMIT))
    refused = refusal(caught.value)
    assert (refused.reason, refused.fields) == ("INVALID_ARGUMENT", ["request_id"])
