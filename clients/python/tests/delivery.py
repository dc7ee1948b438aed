"""What a delivery of a run is to the tests' workers (tests/langgraph_worker.py,
tests/agents_worker.py), and how a worker kills itself after its k-th write."""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass
from pathlib import Path

from card_processor import charge

from actonce_client.tool_calls import ToolCall


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
    kill_in_flight: bool = False  # the "siblings" scenario's kill (tests/delivery.py: Siblings)
    lease_seconds: float = 0.0  # the queue's lease on the delivery, from its start (0: none)
    hold_model: str = ""  # a file: the first model call waits until it exists ("": none)


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


class Siblings:
    """The "siblings" scenario: one turn charges ada, bob and cy at once, each with no
    idempotency key (a non-idempotent step). Killed in flight, the delivery makes ada's
    charge, then bob's, and kills itself as bob's lands, before its step ends, while cy's
    tool has started and not yet sent its call; otherwise each call goes as it comes.

    Every call sent is noted (customer and step id, a line each) in the job's ``sent``
    file before it goes: what the ledger may hold in doubt."""

    FIRST, IN_FLIGHT, NOT_SENT = "ada", "bob", "cy"

    def __init__(self, job: Job) -> None:
        self.job = job
        self.kill = job.kill_in_flight
        self._first_ended = threading.Event()

    @property
    def sent(self) -> Path:
        return Path(self.job.checkpoints).with_suffix(".sent")

    def before_step(self, customer: str) -> None:
        """In the tool, before its step begins."""
        if not self.kill:
            return
        if customer == self.NOT_SENT:
            threading.Event().wait(DELIVERY_WAIT)  # the process dies meanwhile
        if customer == self.IN_FLIGHT:
            assert self._first_ended.wait(DELIVERY_WAIT), "ada's charge never ended"

    def sending(self, customer: str, step_id: str) -> None:
        """In the step's call, before the charge is sent."""
        with self.sent.open("a") as out:
            out.write(f"{customer} {step_id}\n")

    def landed(self, customer: str) -> None:
        """In the step's call, once the charge was made: before the step ends."""
        if self.kill and customer == self.IN_FLIGHT:
            os.kill(os.getpid(), signal.SIGKILL)

    def ended(self, customer: str) -> None:
        """In the tool, once its step ended."""
        if customer == self.FIRST:
            self._first_ended.set()

    def charge_unkeyed(self, call: ToolCall, customer: str, cents: int) -> str:
        """The body of every framework's ``charge_unkeyed`` tool: a non-idempotent step
        whose call charges with no idempotency key, watched at each of its moments."""
        self.before_step(customer)

        def unkeyed(key: str) -> str:
            self.sending(customer, key)
            made = charge(self.job.processor, f"{self.job.run_id}-{customer}", cents, None)
            self.landed(customer)
            return made

        made = call.step("charge_unkeyed", {"customer": customer, "cents": cents}, unkeyed)
        self.ended(customer)
        return made


DELIVERY_WAIT = 20.0  # seconds: longer than a delivery takes, shorter than its limit
