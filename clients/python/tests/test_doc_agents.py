"""Each integration doc's complete agent (docs/langgraph.md, docs/openai-agents.md,
docs/pydantic-ai.md), installed as its doc says and run from a folder outside the
repository, as a user would run it.

A fresh virtualenv in a temporary folder gets the Python client's wheel with each doc's
own ``pip install`` commands (the doc's ``/path/to/actonce/dist`` is a copy of ``make
dist``'s ``dist/`` outside the repository; ``make test`` builds the wheel first), pinned by
the project's constraints.txt so that the suite runs the versions it was checked with. One
environment holds all three frameworks, whose pins agree. Each doc's agent is then run
there, its code as it stands in the doc, with a scripted model in its model's place and a
card processor in its card API's, against a live sidecar: the run delivered twice opens its
ticket and makes its charge once.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sqlite3
import subprocess
import venv
from pathlib import Path

import pytest
from card_processor import Ledger, card_processor
from kill_loop import store_file

from actonce_client.testing import LocalSidecar

HERE = Path(__file__).resolve().parent
CLIENT = HERE.parent
REPO = CLIENT.parents[1]
DOCS = {"langgraph": "langgraph.md", "openai-agents": "openai-agents.md",
        "pydantic-ai": "pydantic-ai.md"}  # fmt: skip
WHEEL_FOLDER = "/path/to/actonce/dist"


def _version() -> str:
    found = re.search(r'^version = "([^"]+)"$', (CLIENT / "pyproject.toml").read_text(), re.M)
    assert found
    return found.group(1)


VERSION = _version()

pytestmark = pytest.mark.timeout(900)


def doc(name: str) -> str:
    return (REPO / "docs" / DOCS[name]).read_text()


def example(name: str) -> str:
    found = re.search(rf"<!-- example: {name}-agent -->\n```python\n(.*?)```", doc(name), re.S)
    assert found, f"docs/{DOCS[name]} has no complete agent"
    return found.group(1)


def installs(name: str) -> list[list[str]]:
    """The doc's ``pip install`` commands of its wheel, and of what else its agent needs
    (not the alternative install from the checkout's folder)."""
    blocks = "\n".join(re.findall(r"```sh\n(.*?)```", doc(name), re.S))
    commands = [shlex.split(line.split("#")[0]) for line in blocks.splitlines()
                if line.startswith("pip install ")]  # fmt: skip
    chosen = [c for c in commands if not any("/path/to/actonce/clients/" in w for w in c)]
    assert any(WHEEL_FOLDER in word for c in chosen for word in c), f"{name}: no wheel install"
    return chosen


def user_code_lines(code: str) -> int:
    """Lines of code beyond the tools (between "# Tools" and "# The agent")."""
    before, rest = code.split("# Tools\n")
    _, after = rest.split("# The agent\n")
    lines = (before + after).splitlines()
    return sum(1 for line in lines if line.strip() and not line.strip().startswith("#"))


@pytest.mark.parametrize("name", sorted(DOCS))
def test_the_complete_agent_is_at_most_40_lines_beyond_its_tools(name: str) -> None:
    assert user_code_lines(example(name)) <= 40


def _run(args: list[str], **kw: object) -> str:
    done = subprocess.run(args, capture_output=True, text=True, timeout=900, **kw)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    stdout: str = done.stdout
    return stdout


@pytest.fixture(scope="module")
def docs_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv outside the repository, with every doc's install made in it."""
    wheel = REPO / "dist" / f"actonce_client-{VERSION}-py3-none-any.whl"
    assert wheel.is_file(), "dist/ lacks the Python client's wheel: run `make dist-packages`"
    folder = tmp_path_factory.mktemp("docs-agents")
    wheels = folder / "dist"
    wheels.mkdir()
    shutil.copy2(wheel, wheels / wheel.name)
    venv.create(folder / "venv", with_pip=True)
    python = folder / "venv" / "bin" / "python"
    for name in sorted(DOCS):
        for pip, install, *args in installs(name):
            assert (pip, install) == ("pip", "install")
            made = [a.replace(WHEEL_FOLDER, str(wheels)) for a in args]
            _run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                  "-c", str(REPO / "constraints.txt"), *made], cwd=folder)  # fmt: skip
    return python


RUNNER = HERE / "doc_agent_runner.py"


@pytest.mark.parametrize("name", sorted(DOCS))
def test_the_complete_agent_does_its_work_once_when_a_job_is_delivered_twice(
    name: str, docs_python: Path, sidecar: LocalSidecar, tmp_path: Path
) -> None:
    place = tmp_path / "agent"
    place.mkdir()
    (place / "billing_agent.py").write_text(example(name))
    for support in ("doc_agent_runner.py", "scripted_model.py", "scripted_agents_model.py"):
        shutil.copy(HERE / support, place / support)
    with card_processor() as (url, ledger):
        env = {**os.environ, "ACTONCE_TARGET": sidecar.target, "CARD_API": url}
        env.pop("PYTHONPATH", None)
        out = _run([str(docs_python), "doc_agent_runner.py", name], cwd=place, env=env)
        assert json.loads(out.splitlines()[-1]) == ["done", "done"]
        assert_once(name, sidecar, ledger)


def assert_once(name: str, sidecar: LocalSidecar, ledger: Ledger) -> None:
    with sqlite3.connect(store_file(sidecar.data_dir)) as db:
        (tickets,) = db.execute(
            "SELECT count(*) FROM artifacts WHERE kind = 'ticket'"
            " AND json_extract(data_json, '$.title') = ?",
            (f"Card declined twice ({name})",),
        ).fetchone()
    assert tickets == 1
    assert [c["cents"] for c in ledger.charges_of(f"doc-{name}-ada")] == [1200]
