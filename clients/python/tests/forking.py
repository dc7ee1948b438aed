"""The test's side of tests/forking_worker.py: a delivery per forked process."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


class Forks:
    """A running forking worker of one module."""

    def __init__(self, process: subprocess.Popen[str], env: dict[str, str] | None) -> None:
        self.process = process
        self.env = env  # the worker's environment, None for this process's

    def deliver(self, job: dict[str, Any]) -> dict[str, Any] | None:
        """Run ``job`` in a forked process; what it wrote to its result file, or None
        when the process killed itself with SIGKILL."""
        assert self.process.stdin is not None and self.process.stdout is not None
        result = Path(job["result"])
        result.unlink(missing_ok=True)
        self.process.stdin.write(json.dumps(job) + "\n")
        self.process.stdin.flush()
        ended = json.loads(self.process.stdout.readline())
        if ended["signal"] == 9:
            return None
        assert ended == {"code": 0, "signal": 0}, f"the delivery ended with {ended}"
        found: dict[str, Any] = json.loads(result.read_text())
        return found


@contextmanager
def forking_worker(
    module: str, python: str = sys.executable, env: dict[str, str] | None = None
) -> Iterator[Forks]:
    """A forking worker of ``module``, run by ``python`` (an agent's own environment's
    interpreter, say) with ``env``."""
    process = subprocess.Popen(
        [python, str(HERE / "forking_worker.py"), module],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        yield Forks(process, env)
    finally:
        assert process.stdin is not None
        process.stdin.close()  # the worker stops when its stdin closes
        process.wait(timeout=30)
