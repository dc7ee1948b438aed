"""The OpenAI Agents SDK's MCP client (MCPServerStreamableHttp), used without a model,
configured by the docs' own snippet (docs/mcp.md), against a live ``actonce serve --mcp-listen``."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from tests.fronts.mcp.clients import begin_over_http
from tests.fronts.mcp.conftest import StartCharges
from tests.fronts.mcp.gateway_support import serve_gateway
from tests.harness import free_port, sidecar_config, spawn_sidecar

README = Path(__file__).resolve().parents[3] / "docs" / "mcp.md"


def readme_snippet(marker: str) -> str:
    found = re.search(
        rf"<!-- mcp: {marker} -->\n```python\n(.*?)```", README.read_text(), flags=re.DOTALL
    )
    assert found, f"docs/mcp.md has no {marker} snippet"
    return found.group(1)


def test_the_readme_configuration_lists_and_calls_tools_once(tmp_path: Path) -> None:
    port = free_port()
    sidecar = spawn_sidecar(
        sidecar_config(tmp_path / "data"),
        tmp_path / "sidecar.log",
        "--mcp-listen",
        f"127.0.0.1:{port}",
    )
    base = f"http://127.0.0.1:{port}"
    code = readme_snippet("openai-agents").replace("127.0.0.1:8765", f"127.0.0.1:{port}")

    async def run(attempt_id: str) -> tuple[list[str], Any]:
        namespace: dict[str, Any] = {"attempt_id": attempt_id}
        exec(compile(code, "README.md", "exec"), namespace)
        server = namespace["actonce"]
        assert namespace["agent"].mcp_servers == [server]
        async with server:
            tools = [tool.name for tool in await server.list_tools()]
            answer = await server.call_tool("create", {"kind": "agents", "data": {"n": 1}})
        return tools, answer

    try:
        tools, first = asyncio.run(run(begin_over_http(base, "run-agents")))
        assert sorted(tools) == ["create", "create_thread", "edit", "notice", "read", "send"]
        assert first.structured_content["outcome"] == "OUTCOME_APPLIED"
        _, again = asyncio.run(run(begin_over_http(base, "run-agents")))  # the run, retried
        assert again.structured_content["outcome"] == "OUTCOME_ALREADY_APPLIED"
        assert again.structured_content["id"] == first.structured_content["id"]
    finally:
        sidecar.stop()


def test_the_agents_sdks_own_retry_of_a_slow_charge_makes_one_charge(
    tmp_path: Path, start_charges: StartCharges
) -> None:
    """The README's configuration plus ``max_retry_attempts=1``: the SDK's session times
    out on a 6 s charge (its read timeout is 5 s) and calls again; one charge."""
    upstream = start_charges(charge_seconds=6)
    sidecar, base = serve_gateway(sidecar_config(tmp_path / "data"), tmp_path, upstream.url, "sdk")
    port = base.rsplit(":", 1)[1]
    code = readme_snippet("openai-agents").replace("127.0.0.1:8765", f"127.0.0.1:{port}")
    code = code.replace(
        "cache_tools_list=True,", "cache_tools_list=True,\n    max_retry_attempts=1,"
    )

    async def run(attempt_id: str) -> Any:
        namespace: dict[str, Any] = {"attempt_id": attempt_id}
        exec(compile(code, "README.md", "exec"), namespace)
        server = namespace["actonce"]
        assert server.max_retry_attempts == 1
        async with server:
            return await server.call_tool("payments__charge", {"customer": "sdk", "cents": 6})

    try:
        answer = asyncio.run(run(begin_over_http(base, "run-sdk", rule="billing")))
        assert not answer.is_error, answer
        assert answer.structured_content["charge_id"] == "ch_sdk_6_1"
    finally:
        sidecar.stop()
        upstream.kill()
    assert upstream.lines("charge sdk") == ["charge sdk 6"]
