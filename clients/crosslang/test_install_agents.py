"""Each TypeScript guide's complete agent (docs/ai-sdk.md, docs/openai-agents-js.md,
docs/langgraph-js.md, docs/mastra.md, docs/mcp-typescript.md) runs from ``make dist``'s
tarball in a project outside the repository, with its framework from npm at the version the
kill grid runs, under Node 20 and 22 (Node 22 is the ``node`` package of the client's
devDependencies).
The AI SDK 7, ``openai`` 7 (under the OpenAI Agents SDK) and Mastra declare Node 22 in their
``engines``; npm warns on 20 and installs them, and the agents run there too, as the guide says.
The client itself is installed first, alone, with ``--engine-strict`` under Node 20: a
dependency of the client that declares a newer Node than the client's floor fails the test.
The tarball must be the client as it stands (its package.json fields and its build equal to
clients/typescript's): a stale one is refused, not tested.

The agent's code is taken from the page as it stands and type-checked (``tsc --strict``)
against what the project installed; a scripted model stands in the model's place and a card
processor in the card API's (clients/typescript/test/agents/guide-driver.ts); one run is
delivered twice, and the card is charged once. The MCP guide's agent writes through the
sidecar's MCP front (``actonce serve --mcp-listen``) instead: its driver (mcp-guide-driver.js,
beside this file) delivers a run of two tickets twice, and the support thread holds one notice
for each, each naming a ticket of its own.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from actonce_client.testing import LocalSidecar, free_port

CLIENTS = Path(__file__).resolve().parent.parent
REPO = CLIENTS.parent
TS = CLIENTS / "typescript"
DOCS = REPO / "docs"
NODE_22 = TS / "node_modules" / "node" / "bin" / "node"
# Fresh npm projects: minutes on a busy machine.
pytestmark = pytest.mark.timeout(900)

# Each framework's guide (its page under docs/) and the example on it, the packages its
# project installs beside the tarball, and the Node majors it runs under.
AGENTS: dict[str, tuple[str, str, list[str], tuple[int, ...]]] = {
    "ai-sdk": ("ai-sdk.md", "ts-ai-sdk-agent", ["ai", "zod"], (20, 22)),
    "openai-agents": (
        "openai-agents-js.md",
        "ts-openai-agents-agent",
        ["@openai/agents", "zod"],
        (20, 22),
    ),
    "langgraph": (
        "langgraph-js.md",
        "ts-langgraph-agent",
        ["@langchain/langgraph", "@langchain/core", "zod"],
        (20, 22),
    ),
    # Mastra's models are AI SDK models: its agent takes one, wrapped by the AI SDK's middleware.
    "mastra": ("mastra.md", "ts-mastra-agent", ["@mastra/core", "ai", "zod"], (20, 22)),
    # An AI SDK agent whose tool calls the MCP front's own tools.
    "mcp": (
        "mcp-typescript.md",
        "ts-mcp-agent",
        ["@modelcontextprotocol/sdk", "ai", "zod"],
        (20, 22),
    ),
}
# What runs the MCP guide's agent (beside this file): it reads the thread the agent writes to.
MCP_DRIVER = "mcp-guide-driver.js"
CASES = [(name, major) for name, (_, _, _, majors) in AGENTS.items() for major in majors]


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


# What a tarball's package.json must hold as clients/typescript/package.json does.
PACKED_FIELDS = ("name", "version", "engines", "exports", "dependencies", "peerDependencies",
                 "peerDependenciesMeta")  # fmt: skip


def _stale(tarball: Path, build: Path) -> list[str]:
    """What of ``tarball`` differs from the client as it stands: a field of its package.json,
    or a file of build/src missing from it or unlike ``build``'s (clients/typescript/build,
    just compiled with the same options ``npm pack`` compiles with)."""
    source = json.loads((TS / "package.json").read_text())
    differ: list[str] = []
    with tarfile.open(tarball) as packed:
        members = {m.name.removeprefix("package/"): m for m in packed.getmembers() if m.isfile()}
        manifest = packed.extractfile(members["package.json"])
        assert manifest is not None
        packed_json = json.loads(manifest.read())
        differ += [f"package.json {f}" for f in PACKED_FIELDS
                   if packed_json.get(f) != source.get(f)]  # fmt: skip
        for built in sorted((build / "src").rglob("*")):
            if built.suffix not in {".js", ".ts"} or not built.is_file():
                continue
            name = built.relative_to(build.parent).as_posix()
            member = members.get(name)
            content = None if member is None else packed.extractfile(member)
            if content is None or content.read() != built.read_bytes():
                differ.append(name)
    return differ


def _install_client(project: Path, tarball: Path) -> None:
    """Install the client's tarball alone under Node 20 with ``--engine-strict``: npm refuses
    any package of its tree that declares a newer Node than that."""
    _node(20)  # npm runs on the `node` of the PATH
    _run(["npm", "install", "--engine-strict", "--no-audit", "--no-fund", "--prefer-offline",
          f"./{tarball.name}"], project)  # fmt: skip


def _example(page: str, name: str) -> str:
    text = (DOCS / page).read_text()
    found = re.search(rf"<!-- example: {name} -->\n```ts\n(.*?)```", text, re.S)
    assert found, f"docs/{page} has no example {name}"
    return found.group(1)


@pytest.fixture(scope="module")
def sidecar() -> Iterator[dict[str, str]]:
    """An ``actonce serve`` with its MCP front: what an agent's environment names of it."""
    mcp = f"127.0.0.1:{free_port()}"
    with LocalSidecar(args=["--mcp-listen", mcp]) as running:
        yield {"ACTONCE_TARGET": running.target, "ACTONCE_MCP_URL": f"http://{mcp}/mcp"}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, typescript_build: Path) -> Path:
    """A project outside the repository with the tarball and every guide's framework
    installed (one install for all: each is an optional peer of the client), each guide's
    agent type-checked against them."""
    assert TARBALL.is_file(), f"{TARBALL} is missing: run `make dist-packages`"
    stale = _stale(TARBALL, typescript_build)
    assert not stale, f"{TARBALL} is not the client as it stands: {stale}; run `make dist-packages`"
    pinned = json.loads((TS / "package.json").read_text())["devDependencies"]
    packages = sorted({p for _, _, wanted, _ in AGENTS.values() for p in wanted} | {"@types/node"})
    project = tmp_path_factory.mktemp("guides") / "agents"
    project.mkdir()
    _run(["npm", "init", "-y"], project)
    _run(["npm", "pkg", "set", "type=module"], project)
    shutil.copy2(TARBALL, project / TARBALL.name)
    _install_client(project, TARBALL)
    # The frameworks declare Node 22 (see above): installed beside the client without
    # --engine-strict, which would refuse them on Node 20.
    wanted = [f"./{TARBALL.name}", *(f"{p}@{pinned[p]}" for p in packages)]
    _run(["npm", "install", "--no-audit", "--no-fund", "--prefer-offline", *wanted], project)
    for framework, (page, example, _, _) in AGENTS.items():
        (project / f"{framework}.ts").write_text(_example(page, example))
    for name in ["guide-driver.js", "scripted.js", "scripted-chat.js"]:
        shutil.copy2(typescript_build / "test" / "agents" / name, project / name)
    shutil.copy2(Path(__file__).parent / MCP_DRIVER, project / MCP_DRIVER)
    tsc = TS / "node_modules" / "typescript" / "bin" / "tsc"
    options = ["--strict", "--module", "nodenext", "--moduleResolution", "nodenext",
               "--target", "es2022", "--lib", "es2022,dom", "--skipLibCheck",
               "--types", "node"]  # fmt: skip
    _run([_node(22), str(tsc), *options, *(f"{f}.ts" for f in AGENTS)], project)
    return project


@pytest.mark.parametrize(("framework", "major"), CASES)
def test_the_guides_complete_agent(
    framework: str, major: int, project: Path, sidecar: dict[str, str]
) -> None:
    env = {**os.environ, **sidecar}
    driver = [MCP_DRIVER] if framework == "mcp" else ["guide-driver.js", framework]
    printed = _run([_node(major), *driver, f"{framework}.js"], project, env)
    seen = json.loads(printed.strip().splitlines()[-1])
    assert seen["node"].startswith(f"v{major}.")
    assert seen["answers"] == ["done", "done"], seen
    assert seen["calls"] == seen["first"], f"the second delivery asked the model again: {seen}"
    if framework == "mcp":
        # Each ticket made once, and told once: a write made again would be a notice more.
        assert sorted(seen["tickets"]) == ["Disk full", "Printer jammed"], seen
        assert len(set(seen["notices"])) == len(seen["notices"]) == 2, seen
    else:
        assert seen["charges"] == [["ada", 500]], seen


def _package(folder: Path, manifest: dict[str, object]) -> Path:
    """``manifest`` packed by npm into a tarball in ``folder``."""
    folder.mkdir(parents=True)
    (folder / "package.json").write_text(json.dumps(manifest))
    name = _run(["npm", "pack", "--silent"], folder).strip().splitlines()[-1]
    return folder / name


def test_the_client_is_installed_engine_strict(tmp_path: Path) -> None:
    """The client's install refuses, under Node 20, a package declaring a newer Node."""
    newer = _package(tmp_path / "newer", {"name": "needs-node-22", "version": "1.0.0",
                                           "engines": {"node": ">=22"}})  # fmt: skip
    project = tmp_path / "project"
    project.mkdir()
    _run(["npm", "init", "-y"], project)
    shutil.copy2(newer, project / newer.name)
    with pytest.raises(AssertionError, match="EBADENGINE"):
        _install_client(project, newer)


def test_a_stale_tarball_is_refused(tmp_path: Path, typescript_build: Path) -> None:
    """A tarball whose dependencies or build differ from the client's is found stale."""
    source = json.loads((TS / "package.json").read_text())
    packed = tmp_path / "package"
    shutil.copytree(typescript_build / "src", packed / "build" / "src")
    (packed / "package.json").write_text(json.dumps(source))
    current = tmp_path / "current.tgz"
    with tarfile.open(current, "w:gz") as out:
        out.add(packed, arcname="package")
    assert _stale(current, typescript_build) == []

    (packed / "package.json").write_text(
        json.dumps({**source, "dependencies": {**source["dependencies"], "left-pad": "1.3.0"}})
    )
    (packed / "build" / "src" / "index.js").write_text("// an older build\n")
    stale = tmp_path / "stale.tgz"
    with tarfile.open(stale, "w:gz") as out:
        out.add(packed, arcname="package")
    assert _stale(stale, typescript_build) == ["package.json dependencies", "build/src/index.js"]
