"""The shared test programs of clients/testkit, started for a test and stopped after it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
TESTKIT = REPO / "clients" / "testkit"


class Program:
    """A testkit program: its target, and a line-by-line conversation on its stdin/stdout."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        assert process.stdout is not None
        self.target = process.stdout.readline().strip()
        if not self.target:
            raise RuntimeError(f"{process.args!r} did not start")

    def command(self, line: str) -> str:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        return self.process.stdout.readline().strip()


@contextmanager
def run_testkit(script: str, *args: str) -> Iterator[Program]:
    process = subprocess.Popen(
        [sys.executable, str(TESTKIT / script), *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        yield Program(process)
    finally:
        assert process.stdin is not None
        process.stdin.close()  # the program stops when its stdin closes
        process.wait(timeout=10)
