"""The MCP front driven by the MCP SDK's own Python client.

The run killed and retried goes through real ``actonce serve`` processes, on SQLite
and PostgreSQL; the other tests use a sidecar in this process, on SQLite.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from actonce_api.v1 import run_actions_pb2 as pb

from tests.conftest import MakeConfig
from tests.fronts.mcp.clients import begin_over_http, call, list_tools
from tests.harness import (
    RunningSidecar,
    free_port,
    sidecar_config,
    spawn_sidecar,
    start_sidecar,
)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[RunningSidecar]:
    running = start_sidecar(
        sidecar_config(
            tmp_path / "data", mcp_listen="127.0.0.1:0", send_allowlist=frozenset({"pager"})
        )
    )
    try:
        yield running
    finally:
        running.stop()


def base(served: RunningSidecar) -> str:
    return f"http://127.0.0.1:{served.sidecar.mcp_port}"


def test_tools_are_listed_with_schemas_and_annotations(served: RunningSidecar) -> None:
    tools = {tool.name: tool for tool in list_tools(base(served) + "/mcp")}
    assert set(tools) == {"create", "edit", "notice", "create_thread", "send", "read"}
    assert tools["read"].annotations.read_only_hint is True
    assert tools["create"].annotations.idempotent_hint is True
    assert tools["create"].annotations.read_only_hint is False
    assert tools["create"].input_schema["required"] == ["kind", "data"]
    assert "outcome" in tools["notice"].output_schema["properties"]


def test_a_run_killed_and_retried_in_another_order_writes_each_once(
    make_config: MakeConfig, tmp_path: Path
) -> None:
    config = make_config(tmp_path / "data")
    port = free_port()
    flags = ("--mcp-listen", f"127.0.0.1:{port}")
    url = f"http://127.0.0.1:{port}/mcp"
    sidecar = spawn_sidecar(config, tmp_path / "first.log", *flags)
    try:
        first = begin_over_http(url.removesuffix("/mcp"), "run-mcp")
        thread, created = call(
            url, first,
            ("create_thread", {"title": "incident"}),
            ("create", {"kind": "ticket", "data": {"title": "disk", "sev": 2}}),
        )  # fmt: skip
        assert thread.structured_content["outcome"] == "OUTCOME_APPLIED"
        thread_id = thread.structured_content["id"]
        sidecar.process.kill()  # the run dies before its notice
        sidecar.process.wait(10)
    finally:
        sidecar.stop()
    sidecar = spawn_sidecar(config, tmp_path / "second.log", *flags)
    try:
        # The retried run makes the same calls in another order, through the path form.
        second = begin_over_http(url.removesuffix("/mcp"), "run-mcp")
        notice, again_created, again_thread = call(
            f"{url}/attempts/{second}", None,
            ("notice", {"thread_id": thread_id, "text": "looking into it"}),
            ("create", {"kind": "ticket", "data": {"sev": 2, "title": "disk"}}),
            ("create_thread", {"title": "incident"}),
        )  # fmt: skip
        read = call(url, second, ("read", {"artifact_id": created.structured_content["id"]}))[0]
    finally:
        sidecar.stop()
    assert notice.structured_content["outcome"] == "OUTCOME_APPLIED"
    assert again_created.structured_content["outcome"] == "OUTCOME_ALREADY_APPLIED"
    assert again_created.structured_content["id"] == created.structured_content["id"]
    assert again_thread.structured_content["outcome"] == "OUTCOME_ALREADY_APPLIED"
    assert again_thread.structured_content["id"] == thread_id
    assert read.structured_content["artifact"]["data"] == {"title": "disk", "sev": 2}
    inspect = start_sidecar(config)  # the store and the ledger the two processes left
    try:
        assert len(inspect.artifacts("ticket")) == 1
        assert [m.text for m in inspect.messages(thread_id)] == ["looking into it"]
        writes = [e.event for e in inspect.audit("run-mcp") if e.event.rpc in {"Create", "Notice"}]
        assert writes and {event.detail.get("front") for event in writes} == {"mcp"}
    finally:
        inspect.stop()


def test_calls_count_by_front_in_the_metrics(served: RunningSidecar) -> None:
    attempt = served.begin(run_id="run-metrics")
    call(base(served) + "/mcp", attempt, ("create", {"kind": "k", "data": {"n": 1}}))
    served.stub.Create(pb.CreateRequest(attempt_id=attempt, kind="k", data_json='{"n": 2}'))
    registry = served.sidecar.metrics.registry
    for front in ("mcp", "grpc"):
        labels = {"front": front, "rpc": "Create", "outcome": "applied"}
        assert registry.get_sample_value("actonce_front_calls_total", labels) == 1
    writes = {"rpc": "Create", "outcome": "applied"}
    assert registry.get_sample_value("actonce_writes_total", writes) == 2
    fronts = [
        e.event.detail.get("front") for e in served.audit("run-metrics") if e.event.rpc == "Create"
    ]
    assert sorted(set(fronts)) == ["grpc", "mcp"]


def test_errors_are_tool_results_with_reason_and_class(served: RunningSidecar) -> None:
    url = base(served) + "/mcp"
    nothing = call(url, None, ("notice", {"thread_id": "t", "text": "x"}))[0]
    assert nothing.is_error and nothing.structured_content["reason"] == "NO_ATTEMPT"
    unknown = call(url, "att_nope", ("notice", {"thread_id": "t", "text": "x"}))[0]
    assert unknown.is_error
    assert unknown.structured_content["reason"] == "UNKNOWN_ATTEMPT"
    assert unknown.structured_content["failure_class"] == "RETRYABLE"
    attempt = served.begin(run_id="run-bad", rule="triage")
    bad = call(url, attempt, ("edit", {"artifact_id": "a", "path": "no-slash", "value": 1}))[0]
    assert bad.is_error and bad.structured_content["failure_class"] == "REFUSED"
    assert "Correct the arguments" in bad.structured_content["message"]
    refused_send = call(url, attempt, ("send", {"thread_id": "t", "text": "hi"}))[0]
    assert refused_send.structured_content["reason"] == "FORBIDDEN"
    assert refused_send.structured_content["failure_class"] == "PERMANENT"


def test_attempts_begin_and_end_over_http(served: RunningSidecar) -> None:
    attempt = begin_over_http(base(served), "run-http")
    call(base(served) + "/mcp", attempt, ("create_thread", {"title": "t"}))
    json_type = {"content-type": "application/json"}
    ended = httpx2.post(f"{base(served)}/attempts/{attempt}/end", headers=json_type)
    assert ended.json()["applied"] == 1
    again = httpx2.post(f"{base(served)}/attempts/att_nope/end", headers=json_type)
    assert again.status_code == 404 and again.json()["reason"] == "UNKNOWN_ATTEMPT"
    bad = httpx2.post(f"{base(served)}/attempts", content=b'{"run_id": ""}', headers=json_type)
    assert bad.status_code == 400 and bad.json()["failure_class"] == "REFUSED"


def _begin(served: RunningSidecar, **fields: object) -> httpx2.Response:
    return httpx2.post(
        f"{base(served)}/attempts", json=fields, headers={"content-type": "application/json"}
    )


def test_an_attempt_begun_over_http_names_its_delivery_and_a_newer_delivery_fences_it(
    served: RunningSidecar,
) -> None:
    start = {"run_id": "run-delivered", "rule": "triage", "checkpoint": ""}
    older = _begin(served, **start).json()["attempt_id"]
    tool_call = _begin(served, **start, scope="call-1", delivery_attempt_id=older)
    assert tool_call.status_code == 200, tool_call.text
    scoped = tool_call.json()["attempt_id"]
    url = base(served) + "/mcp"
    assert call(url, scoped, ("create_thread", {"title": "t"}))[0].is_error is False
    _begin(served, **start)  # the queue delivers the job again
    fenced = call(url, scoped, ("create_thread", {"title": "u"}))[0]
    assert fenced.structured_content["reason"] == "ATTEMPT_FENCED"
    # A delivery is named by a scoped attempt only, as a string, as BeginAttempt says.
    unscoped = _begin(served, **start, delivery_attempt_id=older)
    assert unscoped.status_code == 400
    assert "delivery_attempt_id" in unscoped.json()["message"]
    not_text = _begin(served, **start, scope="call-2", delivery_attempt_id=7)
    assert not_text.status_code == 400 and "must be a string" in not_text.json()["message"]
