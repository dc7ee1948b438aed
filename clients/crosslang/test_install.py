"""Each client, added to a project outside the repository exactly as its README says.

These are the installs from a checkout's folders; test_install_docs.py runs those from
`make dist`'s artifacts (the wheels, the tarball, the jar).

A user does not work inside this repository: they add the client to their own
project. Each test here makes such a project in a temporary folder, adds the
client with the commands its README's "Add it to your project" gives (with the
README's /path/to/actonce made this checkout), and runs the README's example
against a live sidecar. The commands are checked to be the README's own.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest
from actonce_client.testing import LocalSidecar

CLIENTS = Path(__file__).resolve().parent.parent
REPO = CLIENTS.parent
PRINTED = r"art_[a-z2-7]{26} (OUTCOME_)?(ALREADY_)?APPLIED\n"


@pytest.fixture(scope="module")
def target() -> Iterator[str]:
    with LocalSidecar() as sidecar:
        yield sidecar.target


def _readme(language: str) -> str:
    return (CLIENTS / language / "README.md").read_text()


def _says(language: str, command: str) -> list[str]:
    """``command`` as words, after checking the README gives it in its shell blocks."""
    blocks = "\n".join(re.findall(r"```sh\n(.*?)```", _readme(language), re.S))
    assert command in blocks, f"{language}/README.md does not say {command!r}"
    return command.replace("/path/to/actonce", str(REPO)).split()


def _example(language: str, fence: str, start: str, target: str) -> str:
    found = re.search(rf"```{fence}\n({re.escape(start)}.*?)```", _readme(language), re.S)
    assert found, f"{language}/README.md has no example starting {start!r}"
    return found.group(1).replace("127.0.0.1:50051", target)


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_python(tmp_path: Path, target: str) -> None:
    venv.create(tmp_path / "venv", with_pip=True)
    python = tmp_path / "venv" / "bin" / "python"
    pip, *install = _says("python", "pip install /path/to/actonce/clients/python")
    _run([str(python), "-m", pip, "--quiet", "--disable-pip-version-check", *install], tmp_path)
    example = tmp_path / "example.py"
    example.write_text(_example("python", "python", "from actonce_client import", target))
    assert re.fullmatch(PRINTED, _run([str(python), str(example)], tmp_path))


def test_go(tmp_path: Path, target: str) -> None:
    env = {key: value for key, value in os.environ.items() if key != "GOFLAGS"}
    _run(["go", "mod", "init", "example.com/agent"], tmp_path, env)
    (tmp_path / "main.go").write_text(_example("go", "go", "package main", target))
    for command in [
        "go mod edit -replace github.com/actonce/actonce/clients/go=/path/to/actonce/clients/go",
        "go mod tidy",
    ]:
        _run(_says("go", command), tmp_path, env)
    assert re.fullmatch(PRINTED, _run(["go", "run", "."], tmp_path, env))


def _typescript_project(tmp_path: Path, target: str) -> Path:
    project = tmp_path / "agent"
    project.mkdir()
    _run(["npm", "init", "-y"], project)
    _run(["npm", "pkg", "set", "type=module"], project)
    (project / "example.ts").write_text(
        _example("typescript", "ts", 'import { Client } from "@actonce/client";', target)
    )
    return project


def _typescript_runs(project: Path) -> None:
    # Compiled against the installed package's own declarations, with the checkout's tsc.
    tsc = CLIENTS / "typescript" / "node_modules" / "typescript" / "bin" / "tsc"
    options = ["--strict", "--module", "nodenext", "--moduleResolution", "nodenext",
               "--target", "es2022", "--lib", "es2022,dom", "--skipLibCheck"]  # fmt: skip
    _run(["node", str(tsc), *options, "example.ts"], project)
    assert re.fullmatch(PRINTED, _run(["node", "example.js"], project))


def test_typescript_from_the_folder(tmp_path: Path, target: str) -> None:
    project = _typescript_project(tmp_path, target)
    _run([*_says("typescript", "npm install /path/to/actonce/clients/typescript"),
          "--no-audit", "--no-fund"], project)  # fmt: skip
    _typescript_runs(project)


POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>com.example</groupId>
  <artifactId>agent</artifactId>
  <version>1.0</version>
  <properties>
    <maven.compiler.release>17</maven.compiler.release>
    <project.build.sourceEncoding>UTF-8</project.build.sourceEncoding>
  </properties>
  <dependencies>
{dependency}
  </dependencies>
  <build>
    <plugins>
      <plugin>
        <groupId>org.apache.maven.plugins</groupId>
        <artifactId>maven-compiler-plugin</artifactId>
        <version>3.13.0</version>
      </plugin>
    </plugins>
  </build>
</project>
"""


def test_java(tmp_path: Path, target: str) -> None:
    _run(_says("java", "mvn -q -B -f /path/to/actonce/clients/java/pom.xml install -DskipTests"),
         tmp_path)  # fmt: skip
    dependency = re.search(r"```xml\n(<dependency>.*?</dependency>)\n```", _readme("java"), re.S)
    assert dependency, "java/README.md shows no <dependency>"
    (tmp_path / "pom.xml").write_text(POM.format(dependency=dependency.group(1)))
    source = tmp_path / "src" / "main" / "java" / "Example.java"
    source.parent.mkdir(parents=True)
    source.write_text(_example("java", "java", "import dev.actonce.client", target))
    _run(["mvn", "-q", "-B", "compile",
          "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:build-classpath",
          "-Dmdep.outputFile=classpath.txt"], tmp_path)  # fmt: skip
    classpath = f"target/classes{os.pathsep}{(tmp_path / 'classpath.txt').read_text().strip()}"
    assert re.fullmatch(PRINTED, _run(["java", "-cp", classpath, "Example"], tmp_path))


def test_the_tools_are_here() -> None:
    # A missing tool fails these tests rather than skipping them.
    for tool in ["go", "npm", "node", "mvn", "java"]:
        assert shutil.which(tool), f"{tool} is not installed"
    assert sys.version_info >= (3, 11)
