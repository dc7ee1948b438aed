"""Each guide's complete agent (docs/typescript-agents.md) runs from ``make dist``'s tarball in
a project outside the repository, with its framework from npm at the version the kill grid
runs, under Node 20 and 22 (Node 22 is the ``node`` package of the client's devDependencies).
The AI SDK 7, ``openai`` 7 (under the OpenAI Agents SDK) and Mastra declare Node 22 in their
``engines``; npm warns on 20 and installs them, and the agents run there too, as the guide says.

The agent's code is taken from the page as it stands and type-checked (``tsc --strict``)
against what the project installed; a scripted model stands in the model's place and a card
processor in the card API's (clients/typescript/test/agents/guide-driver.ts); one run is
delivered twice, and the card is charged once.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from actonce_client.testing import LocalSidecar

CLIENTS = Path(__file__).resolve().parent.parent
REPO = CLIENTS.parent
TS = CLIENTS / "typescript"
GUIDE = REPO / "docs" / "typescript-agents.md"
NODE_22 = TS / "node_modules" / "node" / "bin" / "node"
# Fresh npm projects: minutes on a busy machine.
pytestmark = pytest.mark.timeout(900)

# Each guide's example, the packages its project installs beside the tarball, and the Node
# majors it runs under.
AGENTS: dict[str, tuple[str, list[str], tuple[int, ...]]] = {
    "ai-sdk": ("ts-ai-sdk-agent", ["ai", "zod"], (20, 22)),
    "openai-agents": ("ts-openai-agents-agent", ["@openai/agents", "zod"], (20, 22)),
    "langgraph": (
        "ts-langgraph-agent",
        ["@langchain/langgraph", "@langchain/core", "zod"],
        (20, 22),
    ),
    # Mastra's models are AI SDK models: its agent takes one, wrapped by the AI SDK's middleware.
    "mastra": ("ts-mastra-agent", ["@mastra/core", "ai", "zod"], (20, 22)),
}
CASES = [(name, major) for name, (_, _, majors) in AGENTS.items() for major in majors]


def _version() -> str:
    found = re.search(r'^version = "([^"]+)"$', (REPO / "pyproject.toml").read_text(), re.M)
    assert found
    return found.group(1)


TARBALL = REPO / "dist" / f"actonce-client-{_version()}.tgz"


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _node(major: int) -> str:
    node = str(NODE_22) if major == 22 else shutil.which("node") or "node"
    assert _run([node, "--version"], REPO).startswith(f"v{major}."), f"{node} is not Node {major}"
    return node


def _example(name: str) -> str:
    found = re.search(rf"<!-- example: {name} -->\n```ts\n(.*?)```", GUIDE.read_text(), re.S)
    assert found, f"docs/typescript-agents.md has no example {name}"
    return found.group(1)


@pytest.fixture(scope="module")
def target() -> Iterator[str]:
    with LocalSidecar() as sidecar:
        yield sidecar.target


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, typescript_build: Path) -> Path:
    """A project outside the repository with the tarball and every guide's framework
    installed (one install for all: each is an optional peer of the client), each guide's
    agent type-checked against them."""
    assert TARBALL.is_file(), f"{TARBALL} is missing: run `make dist-packages`"
    pinned = json.loads((TS / "package.json").read_text())["devDependencies"]
    packages = sorted({p for _, wanted, _ in AGENTS.values() for p in wanted} | {"@types/node"})
    project = tmp_path_factory.mktemp("guides") / "agents"
    project.mkdir()
    _run(["npm", "init", "-y"], project)
    _run(["npm", "pkg", "set", "type=module"], project)
    shutil.copy2(TARBALL, project / TARBALL.name)
    wanted = [f"./{TARBALL.name}", *(f"{p}@{pinned[p]}" for p in packages)]
    _run(["npm", "install", "--no-audit", "--no-fund", "--prefer-offline", *wanted], project)
    for framework, (example, _, _) in AGENTS.items():
        (project / f"{framework}.ts").write_text(_example(example))
    for name in ["guide-driver.js", "scripted.js", "scripted-chat.js"]:
        shutil.copy2(typescript_build / "test" / "agents" / name, project / name)
    tsc = TS / "node_modules" / "typescript" / "bin" / "tsc"
    options = ["--strict", "--module", "nodenext", "--moduleResolution", "nodenext",
               "--target", "es2022", "--lib", "es2022,dom", "--skipLibCheck",
               "--types", "node"]  # fmt: skip
    _run([_node(22), str(tsc), *options, *(f"{f}.ts" for f in AGENTS)], project)
    return project


@pytest.mark.parametrize(("framework", "major"), CASES)
def test_the_guides_complete_agent(framework: str, major: int, project: Path, target: str) -> None:
    env = {**os.environ, "ACTONCE_TARGET": target}
    printed = _run([_node(major), "guide-driver.js", framework, f"{framework}.js"], project, env)
    seen = json.loads(printed.strip().splitlines()[-1])
    assert seen["node"].startswith(f"v{major}.")
    assert seen["answers"] == ["done", "done"], seen
    assert seen["calls"] == seen["first"], f"the second delivery asked the model again: {seen}"
    assert seen["charges"] == [["ada", 500]], seen
