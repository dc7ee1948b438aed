"""Each client's package is made with what it needs alone: ``make dist-python`` runs with
neither Node nor Maven (nor Go, nor Java) on the PATH, and does not make the development
install; ``dist-typescript``, ``dist-java`` and ``dist-go`` each call their own tool only.

What make would run is read from ``make -n`` under a PATH stripped of those tools, with the
virtualenv and dist folders elsewhere, so nothing here builds (the release test builds).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OTHER_TOOLS = ("node", "nodejs", "npm", "npx", "corepack", "mvn", "java", "javac", "go")


@pytest.fixture(scope="module")
def stripped_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A PATH of one folder that links every command of this one but the other tools."""
    folder = tmp_path_factory.mktemp("bin")
    for directory in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(directory):
            continue
        for entry in os.scandir(directory):
            link = folder / entry.name
            if entry.name not in OTHER_TOOLS and not link.exists():
                link.symlink_to(entry.path)
    return str(folder)


def planned(target: str, path: str, tmp_path: Path) -> list[str]:
    done = subprocess.run(
        ["make", "-n", "--no-print-directory", target, f"VENV={tmp_path / 'venv'}",
         f"DIST={tmp_path / 'dist'}"],
        cwd=ROOT, env={**os.environ, "PATH": path}, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_dist_python_makes_both_wheels_with_python_alone(
    stripped_path: str, tmp_path: Path
) -> None:
    for tool in OTHER_TOOLS:
        assert shutil.which(tool, path=stripped_path) is None, tool
    lines = planned("dist-python", stripped_path, tmp_path)
    wheels = [line for line in lines if " -m pip wheel " in line]
    assert [line.rsplit(" ", 1)[-1] for line in wheels] == [".", "./clients/python"]
    text = "\n".join(lines)
    for tool in ("npm", "mvn", "node", "go ", ".[dev]", ".installed\n"):
        assert tool not in text.replace("wheel-build/.installed", ""), tool


@pytest.mark.parametrize(
    ("target", "tool"),
    [("dist-typescript", "npm pack"), ("dist-java", "mvn "), ("dist-go", "go build")],
)
def test_each_other_client_is_made_by_its_own_tool(tmp_path: Path, target: str, tool: str) -> None:
    text = "\n".join(planned(target, os.environ["PATH"], tmp_path))
    assert tool in text
    others = {"npm pack", "mvn ", "go build", " -m pip wheel "} - {tool}
    assert not [other for other in others if other in text], target
