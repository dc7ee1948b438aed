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
    kill_at_model: int = 0  # the model call as which the process kills itself (0: none)


class Writes:
    """Counts the delivery's writes, and kills the process after the k-th."""

    def __init__(self, kill_at: int) -> None:
        self.kill_at = kill_at
        self.count = 0

    def landed(self) -> None:
        self.count += 1
        if self.count == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)


# What a scripted model may call one text: a real model words it its own way on each call.
WORDINGS = {
    "Disk full": ("Disk full", "Disk is full", "disk full"),
    "looking into it": ("looking into it", "Looking into it.", "looking into it!"),
    "Card declined": ("Card declined", "Card was declined"),
}


def canonical(text: str) -> str:
    """The script's text for any of its wordings (or the text as it is)."""
    for plain, wordings in WORDINGS.items():
        for wording in wordings:
            text = text.replace(wording, plain)
    return text


class TransientError(ConnectionError):
    """A downstream hiccup that a retry clears."""
