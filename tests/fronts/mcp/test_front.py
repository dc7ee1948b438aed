"""The MCP front driven by the MCP SDK's own Python client, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from tests.conftest import MakeConfig
from tests.fronts.mcp.clients import begin_over_http, call, list_tools
from tests.harness import RunningSidecar, start_sidecar


@pytest.fixture
def served(make_config: MakeConfig, tmp_path: Path) -> Iterator[RunningSidecar]:
    running = start_sidecar(
        make_config(
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


def test_a_run_killed_and_retried_in_another_order_writes_each_once(served: RunningSidecar) -> None:
    url = base(served) + "/mcp"
    first = served.begin(run_id="run-mcp")
    thread, created = call(
        url,
        first,
        ("create_thread", {"title": "incident"}),
        ("create", {"kind": "ticket", "data": {"title": "disk", "sev": 2}}),
    )
    assert thread.structured_content["outcome"] == "OUTCOME_APPLIED"
    thread_id = thread.structured_content["id"]
    # The attempt dies here (its notice never made); a new attempt makes the same calls
    # in another order, through the path form this time.
    second = begin_over_http(base(served), "run-mcp")
    notice, again_created, again_thread = call(
        f"{base(served)}/mcp/attempts/{second}",
        None,
        ("notice", {"thread_id": thread_id, "text": "looking into it"}),
        ("create", {"kind": "ticket", "data": {"sev": 2, "title": "disk"}}),
        ("create_thread", {"title": "incident"}),
    )
    assert notice.structured_content["outcome"] == "OUTCOME_APPLIED"
    assert again_created.structured_content["outcome"] == "OUTCOME_ALREADY_APPLIED"
    assert again_created.structured_content["id"] == created.structured_content["id"]
    assert again_thread.structured_content["outcome"] == "OUTCOME_ALREADY_APPLIED"
    assert again_thread.structured_content["id"] == thread_id
    assert len(served.artifacts("ticket")) == 1
    assert [m.text for m in served.messages(thread_id)] == ["looking into it"]
    read = call(url, second, ("read", {"artifact_id": created.structured_content["id"]}))[0]
    assert read.structured_content["artifact"]["data"] == {"title": "disk", "sev": 2}
    fronts = {
        e.event.detail.get("front")
        for e in served.audit("run-mcp")
        if e.event.rpc in {"Create", "Notice"}
    }
    assert fronts == {"mcp"}
    registry = served.sidecar.metrics.registry
    front_calls = {"front": "mcp", "rpc": "Create", "outcome": "already_applied"}
    assert registry.get_sample_value("actonce_front_calls_total", front_calls) == 1
    writes = {"rpc": "Create", "outcome": "already_applied"}
    assert registry.get_sample_value("actonce_writes_total", writes) == 1


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
    ended = httpx2.post(f"{base(served)}/attempts/{attempt}/end")
    assert ended.json()["applied"] == 1
    again = httpx2.post(f"{base(served)}/attempts/att_nope/end")
    assert again.status_code == 404 and again.json()["reason"] == "UNKNOWN_ATTEMPT"
    bad = httpx2.post(f"{base(served)}/attempts", content=b'{"run_id": ""}')
    assert bad.status_code == 400 and bad.json()["failure_class"] == "REFUSED"
