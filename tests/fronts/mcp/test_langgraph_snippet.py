"""The README's LangGraph configuration (langchain-mcp-adapters), run as written against a
live ``actonce serve --mcp-listen``.

langchain-mcp-adapters requires the 1.x MCP SDK, which cannot sit beside the 2.x SDK that
actonce serves with, so the snippet runs where an agent would have it: in an environment of
its own (made once under .cache/, with the versions pinned below), as a process of its own.
"""

from __future__ import annotations

import json
import subprocess
import venv
from pathlib import Path

import pytest

from tests.fronts.mcp.clients import begin_over_http
from tests.fronts.mcp.test_agents_sdk import readme_snippet
from tests.harness import free_port, sidecar_config, spawn_sidecar

ROOT = Path(__file__).resolve().parents[3]
AGENT_ENV = ROOT / ".cache" / "langgraph-agent-env"
PINS = ("langchain-mcp-adapters==0.3.2", "langgraph==1.2.24", "langchain==1.5.2")

# Runs in the agent's environment: the snippet, then one call of its `create` tool.
AGENT = """
import asyncio, json, sys
attempt_id = sys.argv[1]
exec(compile(open(sys.argv[2]).read(), "README.md", "exec"))

async def main():
    tools = await client.get_tools()
    create = next(tool for tool in tools if tool.name == "create")
    (content,) = await create.ainvoke({"kind": "langgraph", "data": {"n": 1}})
    print(json.dumps({"tools": sorted(t.name for t in tools), "answer": json.loads(content["text"])}))

asyncio.run(main())
"""


def agent_python() -> Path:
    """The agent environment's interpreter, made (or remade when the pins change) once."""
    python = AGENT_ENV / "bin" / "python"
    stamp = AGENT_ENV / "pins.txt"
    if not (python.exists() and stamp.exists() and stamp.read_text() == "\n".join(PINS)):
        venv.create(AGENT_ENV, clear=True, with_pip=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", *PINS], check=True, timeout=900
        )
        stamp.write_text("\n".join(PINS))
    return python


@pytest.mark.timeout(900)
def test_the_readme_langgraph_configuration_calls_tools_once(tmp_path: Path) -> None:
    python = agent_python()
    port = free_port()
    snippet = tmp_path / "snippet.py"
    snippet.write_text(readme_snippet("langgraph").replace("127.0.0.1:8765", f"127.0.0.1:{port}"))
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    sidecar = spawn_sidecar(
        sidecar_config(tmp_path / "data"),
        tmp_path / "sidecar.log",
        "--mcp-listen",
        f"127.0.0.1:{port}",
    )

    def attempt() -> dict[str, object]:
        attempt_id = begin_over_http(f"http://127.0.0.1:{port}", "run-langgraph")
        done = subprocess.run(
            [str(python), str(agent), attempt_id, str(snippet)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        answer: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
        return answer

    try:
        first, retried = attempt(), attempt()  # the run, then the run retried
    finally:
        sidecar.stop()
    assert first["tools"] == ["create", "create_thread", "edit", "notice", "read", "send"]
    assert first["answer"]["outcome"] == "OUTCOME_APPLIED"  # type: ignore[index]
    assert retried["answer"]["outcome"] == "OUTCOME_ALREADY_APPLIED"  # type: ignore[index]
    assert retried["answer"]["id"] == first["answer"]["id"]  # type: ignore[index]
