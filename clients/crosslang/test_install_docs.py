"""Every install instruction in the READMEs and docs works, from ``make dist``'s artifacts.

The instructions are found, not listed: every ``sh`` block line and every inline code span
of README.md, docs/**/*.md and clients/*/README.md that runs ``pip install``, ``npm
install``, ``go get``, ``go mod edit -replace``, ``mvn ... install`` or ``skopeo copy``.
Each must be of a form in :data:`FORMS`, and each form's test runs every instruction of it
exactly as written, with ``/path/to/actonce/dist`` made a copy of ``dist/`` in a folder outside
the repository (so an artifact that needs the checkout fails) and any other
``/path/to/actonce`` made the checkout. A line that installs an actonce package by its bare
name fails: nothing of actonce is published to an index.

``make test`` builds the artifacts first (``make dist-packages``); the image's archive is
checked by ``make dist-image`` (scripts/image_archive.sh), which needs root.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import venv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from actonce_client.testing import LocalSidecar

CLIENTS = Path(__file__).resolve().parent.parent
REPO = CLIENTS.parent
DIST = REPO / "dist"
PRINTED = r"art_[a-z2-7]{26} (OUTCOME_)?(ALREADY_)?APPLIED\n"
# Fresh virtualenvs and projects installing from an index: minutes on a busy machine.
pytestmark = pytest.mark.timeout(900)


def _version() -> str:
    found = re.search(r'^version = "([^"]+)"$', (REPO / "pyproject.toml").read_text(), re.M)
    assert found
    return found.group(1)


VERSION = _version()
V = re.escape(VERSION)
AT_DIST = "/path/to/actonce/dist/"
WHEEL = r"-py3-none-any\.whl(\[[a-z,-]+\])?'?"
# PEP 508's direct reference: the package and its extras, at the wheel's URL.
CLIENT_AT_WHEEL = (
    rf"'actonce-client\[[a-z,-]+\] @ file://{AT_DIST}actonce_client-{V}-py3-none-any\.whl'"
)
GO_MODULE = r"github\.com/actonce/actonce/clients/go"
INSTALL_FILE = r"org\.apache\.maven\.plugins:maven-install-plugin:3\.[0-9.]+:install-file"
# What each form installs; each has a test below that runs its instructions.
FORMS: dict[str, str] = {
    "sidecar-wheel": rf"pip install '?{AT_DIST}actonce-{V}{WHEEL}",
    "client-wheel": rf"pip install ('?{AT_DIST}actonce_client-{V}{WHEEL}|{CLIENT_AT_WHEEL})",
    "client-folder": r"pip install '?/path/to/actonce/clients/python(\[[a-z,-]+\])?'?",
    "typescript-tarball": rf"npm install {AT_DIST}actonce-client-{V}\.tgz",
    "typescript-folder": r"npm install /path/to/actonce/clients/typescript",
    "java-jar": rf"mvn (-q -B )?{INSTALL_FILE} -Dfile={AT_DIST}actonce-client-{V}\.jar",
    "java-source": r"mvn -q -B -f /path/to/actonce/clients/java/pom\.xml install -DskipTests",
    "go-folder": rf"go mod edit -replace {GO_MODULE}=/path/to/actonce/clients/go",
    # Run by scripts/image_archive.sh (make dist-image), which needs root and buildah.
    "image-archive": rf"skopeo copy oci-archive:{AT_DIST}actonce-{V}\.oci\.tar docker://\S+",
    # In a clone, for development: what the Makefile's own installs do.
    "clone": r"(\.venv/bin/)?pip install -e '\.(/clients/python)?\[[a-z,-]+\]'",
}
INSTALLING = re.compile(
    r"\b(pip install|npm install|go get|go mod edit -replace|mvn .*install|skopeo copy)\b"
)
OURS = re.compile(r"(?<![\w/.-])actonce(-client|_client)?(?![\w/.-])|@actonce/")


@dataclass(frozen=True)
class Instruction:
    where: str
    line: str


def _documents() -> list[Path]:
    found = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    return (
        found
        + sorted(p for p in CLIENTS.glob("*/README.md") if "node_modules" not in p.parts)
        + [CLIENTS / "README.md"]
    )


def _commands(text: str) -> Iterator[str]:
    for block in re.findall(r"```(?:sh|bash|shell)\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            command = line.split(" #", 1)[0].strip()
            if command:
                yield " ".join(command.split())
    for span in re.findall(r"`([^`\n]+)`", text):
        yield " ".join(span.split())


def instructions() -> list[Instruction]:
    """Every install instruction of the documents, in the order they say them."""
    found = []
    for path in _documents():
        where = str(path.relative_to(REPO))
        for command in _commands(path.read_text()):
            if INSTALLING.search(command) and not command.startswith("make "):
                found.append(Instruction(where, command))
    return found


def form_of(instruction: Instruction) -> str | None:
    """The form an instruction is of; None for another project's package (not ours)."""
    for name, pattern in FORMS.items():
        if re.fullmatch(pattern, instruction.line):
            return name
    if OURS.search(instruction.line.replace("/path/to/actonce", "")):
        raise AssertionError(
            f"{instruction.where} says `{instruction.line}`: an install of actonce that no "
            "test runs; nothing is published to an index, so say the wheel, tarball or jar "
            "in dist/ (README.md, Install), or a path, and give the form a test here"
        )
    return None


def of(form: str) -> list[str]:
    lines = [i.line for i in instructions() if form_of(i) == form]
    assert lines, f"no document says an install of the form {form}"
    return list(dict.fromkeys(lines))  # each once, in the order first said


def test_every_install_instruction_is_of_a_form_that_is_run() -> None:
    found = instructions()
    assert len(found) >= 10, found  # the finder finds
    forms = {form_of(i) for i in found}
    assert set(FORMS) <= forms, set(FORMS) - forms


def test_an_install_from_an_index_is_refused() -> None:
    for line in ["pip install 'actonce-client[langgraph]'", "pip install actonce",
                 "npm install @actonce/client"]:  # fmt: skip
        with pytest.raises(AssertionError, match="nothing is published"):
            form_of(Instruction("a doc", line))
    assert form_of(Instruction("a doc", "pip install langgraph-checkpoint-sqlite")) is None


# -- running them ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of dist/ in a folder outside the repository, as a user would have it."""
    wanted = [
        f"actonce-{VERSION}-py3-none-any.whl",
        f"actonce_client-{VERSION}-py3-none-any.whl",
        f"actonce-client-{VERSION}.tgz",
        f"actonce-client-{VERSION}.jar",
    ]
    missing = [name for name in wanted if not (DIST / name).is_file()]
    assert not missing, f"dist/ lacks {missing}: run `make dist-packages`"
    place = tmp_path_factory.mktemp("release") / "actonce"
    (place / "dist").mkdir(parents=True)
    for name in wanted:
        shutil.copy2(DIST / name, place / "dist" / name)
    return place


def _words(line: str, release: Path) -> list[str]:
    line = line.replace("/path/to/actonce/dist", str(release / "dist"))
    return shlex.split(line.replace("/path/to/actonce", str(REPO)))


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _pip(python: Path, line: str, release: Path, cwd: Path) -> None:
    pip, install, *rest = _words(line, release)
    assert (pip, install) == ("pip", "install"), line
    quiet = ["--quiet", "--disable-pip-version-check"]
    _run([str(python), "-m", "pip", "install", *quiet, *rest], cwd)


def _example(readme: str, fence: str, start: str, target: str) -> str:
    text = (CLIENTS / readme / "README.md").read_text()
    found = re.search(rf"```{fence}\n({re.escape(start)}.*?)```", text, re.S)
    assert found, f"{readme}/README.md has no example starting {start!r}"
    return found.group(1).replace("127.0.0.1:50051", target)


@pytest.fixture(scope="module")
def target() -> Iterator[str]:
    with LocalSidecar() as sidecar:
        yield sidecar.target


def _venv(where: Path) -> Path:
    venv.create(where, with_pip=True)
    return where / "bin" / "python"


def test_the_sidecar_wheel(release: Path, tmp_path: Path) -> None:
    python = _venv(tmp_path / "venv")
    actonce = str(tmp_path / "venv" / "bin" / "actonce")
    lines = sorted(of("sidecar-wheel"), key=lambda line: "[" in line)  # the wheel alone first
    for line in lines:
        _pip(python, line, release, tmp_path)
        assert _run([actonce, "--version"], tmp_path) == f"actonce {VERSION}\n"
        extras = re.search(r"\[([a-z,-]+)\]", line)
        if extras is None:
            # The wheel alone serves; a feature of an extra says how to add it.
            done = subprocess.run([actonce, "serve", "--mcp-listen", "127.0.0.1:0"], cwd=tmp_path,
                                  capture_output=True, text=True, timeout=60)  # fmt: skip
            assert done.returncode == 2, done.stderr
            assert "needs actonce's 'mcp' extra" in done.stderr, done.stderr
            assert f"actonce-{VERSION}-py3-none-any.whl[mcp]" in done.stderr
            _serves(actonce, tmp_path)
        else:
            _serves(actonce, tmp_path, "--mcp-listen", "127.0.0.1:0")


def _serves(actonce: str, cwd: Path, *flags: str) -> None:
    """``actonce serve`` reaches its serving line, then stops on SIGTERM."""
    log = cwd / "serve.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [actonce, "serve", "--listen", "127.0.0.1:0", "--data-dir", str(cwd / "data"),
             "--log-format", "json", *flags],
            cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
            env={k: v for k, v in os.environ.items() if not k.startswith(("ACTONCE_", "OTEL_"))},
        )  # fmt: skip
    try:
        for _ in range(600):
            if '"serving"' in log.read_text() or process.poll() is not None:
                break
            time.sleep(0.1)
        assert '"serving"' in log.read_text(), log.read_text()
    finally:
        process.terminate()
        process.wait(30)


def test_the_python_client_wheel(release: Path, tmp_path: Path, target: str) -> None:
    """The wheel alone runs the README's example; then each line with an extra, the wheel's
    and the checkout folder's, installs what the extra is for."""
    python = _venv(tmp_path / "venv")
    lines = sorted(of("client-wheel"), key=lambda line: "[" in line)  # the wheel alone first
    _pip(python, lines[0], release, tmp_path)
    example = tmp_path / "example.py"
    example.write_text(_example("python", "python", "from actonce_client import", target))
    assert re.fullmatch(PRINTED, _run([str(python), str(example)], tmp_path))
    with_extras = [line for line in lines + of("client-folder") if "[" in line]
    for line in with_extras:
        _pip(python, line, release, tmp_path)
        extra = re.search(r"\[([a-z-]+)\]", line)
        assert extra, line
        # What the extra is for imports: its libraries came with it.
        module = {"otel": "opentelemetry.instrumentation.grpc"}.get(
            extra.group(1), f"actonce_client.{extra.group(1).replace('-', '_')}"
        )
        _run([str(python), "-c", f"import {module}"], tmp_path)


def _typescript_project(where: Path, target: str) -> Path:
    project = where / "agent"
    project.mkdir(parents=True)
    _run(["npm", "init", "-y"], project)
    _run(["npm", "pkg", "set", "type=module"], project)
    (project / "example.ts").write_text(
        _example("typescript", "ts", 'import { Client } from "@actonce/client";', target)
    )
    return project


def test_typescript_tarball(release: Path, tmp_path: Path, target: str) -> None:
    tsc = CLIENTS / "typescript" / "node_modules" / "typescript" / "bin" / "tsc"
    options = ["--strict", "--module", "nodenext", "--moduleResolution", "nodenext",
               "--target", "es2022", "--lib", "es2022,dom", "--skipLibCheck"]  # fmt: skip
    for n, line in enumerate(of("typescript-tarball")):
        project = _typescript_project(tmp_path / str(n), target)
        _run([*_words(line, release), "--no-audit", "--no-fund"], project)
        _run(["node", str(tsc), *options, "example.ts"], project)
        assert re.fullmatch(PRINTED, _run(["node", "example.js"], project))


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


def test_java_jar(release: Path, tmp_path: Path, target: str) -> None:
    """The jar from dist/ into the local Maven repository, then a project that depends on it
    as the README says, built and run."""
    for line in of("java-jar"):
        _run(_words(line, release), tmp_path)
        installed = (
            Path.home() / ".m2" / "repository" / "dev" / "actonce" / "actonce-client" / VERSION
            / f"actonce-client-{VERSION}.jar"
        )  # fmt: skip
        # What the project below builds on is the jar of dist/, not one built from source.
        assert installed.read_bytes() == (release / "dist" / installed.name).read_bytes()
    readme = (CLIENTS / "java" / "README.md").read_text()
    dependency = re.search(r"```xml\n(<dependency>.*?</dependency>)\n```", readme, re.S)
    assert dependency, "java/README.md shows no <dependency>"
    project = tmp_path / "agent"
    source = project / "src" / "main" / "java" / "Example.java"
    source.parent.mkdir(parents=True)
    (project / "pom.xml").write_text(POM.format(dependency=dependency.group(1)))
    source.write_text(_example("java", "java", "import dev.actonce.client", target))
    _run(["mvn", "-q", "-B", "compile",
          "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:build-classpath",
          "-Dmdep.outputFile=classpath.txt"], project)  # fmt: skip
    classpath = f"target/classes{os.pathsep}{(project / 'classpath.txt').read_text().strip()}"
    assert re.fullmatch(PRINTED, _run(["java", "-cp", classpath, "Example"], project))


def test_the_forms_run_elsewhere_are_said_as_run() -> None:
    """The folders of a checkout (Python, TypeScript, Go), the Java source build and the
    clone's own installs are run by clients/crosslang/test_install.py and the Makefile:
    each line here is one of theirs."""
    install_test = (CLIENTS / "crosslang" / "test_install.py").read_text()
    folders = ("client-folder", "typescript-folder", "go-folder", "java-source")
    # A folder's line with an extra runs in test_the_python_client_wheel.
    for line in [line for form in folders for line in of(form) if "[" not in line]:
        assert line in install_test, line
    makefile = (REPO / "Makefile").read_text() + (REPO / "mk" / "clients.mk").read_text()
    extras = "".join((place / "pyproject.toml").read_text() for place in (REPO, CLIENTS / "python"))
    for line in of("clone"):
        assert "-e" in line and "install" in makefile
        for extra in re.findall(r"\[([a-z,-]+)\]", line)[0].split(","):
            assert re.search(rf"^{re.escape(extra)} = \[", extras, re.M), (line, extra)
    image_script = (REPO / "scripts" / "image_archive.sh").read_text()
    for line in of("image-archive"):
        assert "skopeo copy" in image_script and "oci-archive:" in image_script, line
    assert sys.version_info >= (3, 11)
