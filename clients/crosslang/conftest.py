"""The agents that the cross-language tests drive, built once per session from the current
sources: the Go programs in one `go build`, the TypeScript ones by one `tsc`, and the Java
client's classes with their classpath by one Maven run (the slowest of the three)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

CLIENTS = Path(__file__).resolve().parent.parent
GO_AGENTS = ("drainagent", "planagent", "traceagent")


@pytest.fixture(scope="session")
def go_agents(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder holding each program of clients/go/internal named in GO_AGENTS."""
    built = tmp_path_factory.mktemp("go-agents")
    subprocess.run(["go", "build", "-o", f"{built}/", *(f"./internal/{a}" for a in GO_AGENTS)],
                   cwd=CLIENTS / "go", check=True)  # fmt: skip
    return built


@pytest.fixture(scope="session")
def typescript_build() -> Path:
    """clients/typescript/build, with the test programs beside the client."""
    subprocess.run(["npx", "tsc", "-p", "."], cwd=CLIENTS / "typescript", check=True)
    return CLIENTS / "typescript" / "build"


@pytest.fixture(scope="session")
def java_classpath(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The Java client's classes, its test programs and every dependency of both."""
    classpath_file = tmp_path_factory.mktemp("java") / "classpath.txt"
    subprocess.run(["mvn", "-q", "-B", "test-compile",
                    "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:build-classpath",
                    f"-Dmdep.outputFile={classpath_file}", "-Dmdep.includeScope=test"],
                   cwd=CLIENTS / "java", check=True)  # fmt: skip
    java = CLIENTS / "java" / "target"
    return ":".join([str(java / "classes"), str(java / "test-classes"),
                     classpath_file.read_text().strip()])  # fmt: skip
