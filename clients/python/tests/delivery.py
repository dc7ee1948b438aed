"""What a delivery of a run is to the tests' workers (tests/langgraph_worker.py,
tests/agents_worker.py), and how a worker kills itself after its k-th write."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass


@dataclass(frozen=True)
class Job:
    """One delivery: which agent, which run, where everything is."""

    scenario: str
    run_id: str
    resume: bool  # the delivery that resumes the run after a person approved
    target: str
    processor: str
    thread_id: str  # the store's thread the notices go to
    checkpoints: str  # the SQLite file of the graph's checkpoints
    result: str  # where the delivery writes what it did
    kill_at: int = 0  # the write after which the process kills itself (0: none)


class Writes:
    """Counts the delivery's writes, and kills the process after the k-th."""

    def __init__(self, kill_at: int) -> None:
        self.kill_at = kill_at
        self.count = 0

    def landed(self) -> None:
        self.count += 1
        if self.count == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)


class TransientError(ConnectionError):
    """A downstream hiccup that a retry clears."""
