"""A sidecar drained under load from agents on all four clients: no call is cancelled.

Three agents per language (Python, Go, TypeScript, Java) run runs back to back
against one `actonce serve`, each until its first failed call, while the
sidecar gets SIGTERM. Every agent's failure must be the drain's refusal as its
own client classifies it (SHUTTING_DOWN, RETRYABLE), never a bare CANCELLED or a
transport error; every acknowledged write must be in the ledger and the store;
and the process exits 0 within the grace period, also while the store is slower
than the grace.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from chaos.store_snapshot import read_sqlite_store
from sidecar.ledger.audit_command import open_reader
from sidecar.ledger.base import Phase
from tests.harness import RunningStore, start_store
from tests.server.processes import serve_draining
from tests.server.stores import SlowCreates

PER_LANGUAGE = 3
GRACE = 5.0


@pytest.fixture(scope="module")
def agents(go_agents: Path, typescript_build: Path, java_classpath: str) -> dict[str, list[str]]:
    """Each client's drain agent, built from the current sources (conftest.py)."""
    return {
        "python": [sys.executable, str(Path(__file__).with_name("drain_agent.py"))],
        "go": [str(go_agents / "drainagent")],
        "typescript": ["node", str(typescript_build / "test" / "drain-agent.js")],
        "java": ["java", "-cp", java_classpath, "dev.actonce.client.DrainAgent"],
    }


@dataclass
class Agent:
    """One agent process, its stdout read line by line as it comes."""

    name: str
    process: subprocess.Popen[str]
    lines: list[dict[str, str]] = field(default_factory=list)
    other: list[str] = field(default_factory=list)
    reader: threading.Thread = field(init=False)

    def __post_init__(self) -> None:
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                self.lines.append(json.loads(line))
            except ValueError:
                self.other.append(line)  # shown if the agent fails

    @property
    def acknowledged(self) -> list[str]:
        return [line["id"] for line in self.lines if "id" in line]


@pytest.fixture
def store(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[RunningStore, SlowCreates]]:
    slow = SlowCreates(delay=float(request.param))
    running = start_store(tmp_path / "store", interceptors=[slow])
    yield running, slow
    running.stop()


def _wait(predicate: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(predicate) and predicate():
            return True
        time.sleep(0.05)
    return False


def _writing(audit_db: Path) -> set[str]:
    """The agents with a write begun: its intent is in the ledger before the store is
    called (each agent's runs are named after it)."""
    if not audit_db.exists():
        return set()
    reader = open_reader({"audit_dsn": None, "audit_db": audit_db})
    try:
        return {
            e.event.run_id.rpartition("-")[0]
            for e in reader.events()
            if e.event.phase == Phase.INTENT
        }
    finally:
        reader.close()


# The slow store answers after the grace period, but within every client's own deadline.
# The first case also builds the four agents (Maven's the slowest).
@pytest.mark.timeout(600)
@pytest.mark.parametrize("store", [0.05, 8.0], ids=["store-answers", "store-outlasts-grace"],
                         indirect=True)  # fmt: skip
def test_a_drain_under_load_from_every_client_answers_every_call_and_cancels_none(
    agents: dict[str, list[str]], store: tuple[RunningStore, SlowCreates], tmp_path: Path
) -> None:
    running, slow = store
    # The store's own deadline is past its delay: a slow write is still in flight at SIGTERM.
    served, api, _probes = serve_draining(tmp_path, running.target, GRACE, "--store-timeout", "60")
    started: list[Agent] = []
    try:
        for language, command in agents.items():
            for i in range(PER_LANGUAGE):
                name = f"{language}{i}"
                process = subprocess.Popen([*command, api, name], stdout=subprocess.PIPE,
                                           stderr=(tmp_path / f"{name}.err").open("w"),
                                           text=True)  # fmt: skip
                started.append(Agent(name, process))
        # Under load: every agent has had a write acknowledged, or has one in the slow store
        # (where each agent's first write waits). Counting the store's arrivals would not do:
        # the first agents' second writes arrive there while a JVM is still starting.
        audit_db = tmp_path / "data" / "audit.db"
        if slow.delay < GRACE:
            loaded = _wait(lambda: all(a.acknowledged for a in started), timeout=45)
        else:
            loaded = _wait(lambda: _writing(audit_db) >= {a.name for a in started}, timeout=60)
        assert loaded, [(a.name, a.lines[:1], (tmp_path / f"{a.name}.err").read_text()[-500:])
                        for a in started]  # fmt: skip
        signalled = time.monotonic()
        served.process.send_signal(signal.SIGTERM)
        assert served.process.wait(GRACE + 10) == 0, served.log()[-2000:]
        exited = time.monotonic() - signalled
        for agent in started:
            assert agent.process.wait(60) == 0, (agent.name, agent.other[-5:])
            agent.reader.join(10)
    finally:
        for agent in started:
            if agent.process.poll() is None:
                agent.process.kill()
        served.stop()

    # Within the grace, with a second for the interpreter to exit.
    assert exited < GRACE + 1.0, exited
    if slow.delay < GRACE:
        # It stopped serving only once its callers had gone quiet (with a slower store the
        # calls' time can run out first: those still calling then were refused all the same).
        assert "drain_callers_still_calling" not in served.log()
    # Each agent's one failure is the drain's refusal, as its own client classifies it; or,
    # for an agent that was silent (starved of CPU) past the quiet period and called after
    # the listener had closed, no listener: UNAVAILABLE without ErrorInfo, RETRYABLE. Never
    # CANCELLED, nor anything a client would not retry.
    failures = {a.name: a.lines[-1] for a in started}
    refused = set()
    for name, failure in failures.items():
        code = failure.get("code", "").replace("_", "").upper()
        got = (code, failure.get("reason"), failure.get("failure_class"))
        assert got in {("UNAVAILABLE", "SHUTTING_DOWN", "RETRYABLE"),
                       ("UNAVAILABLE", "UNAVAILABLE", "RETRYABLE")}, (name, failure)  # fmt: skip
        if got[1] == "SHUTTING_DOWN":
            refused.add(name)
    assert len(refused) >= len(started) * 2 // 3, failures
    # Every acknowledged write is in the ledger and in the store.
    acknowledged = {written for a in started for written in a.acknowledged}
    reader = open_reader({"audit_dsn": None, "audit_db": tmp_path / "data" / "audit.db"})
    try:
        audited = {
            e.event.derived_id
            for e in reader.events()
            if e.event.phase == Phase.OUTCOME and e.event.outcome == "OUTCOME_APPLIED"
        }
    finally:
        reader.close()
    stored = set(read_sqlite_store(tmp_path / "store" / "store.db").artifacts)
    assert acknowledged <= audited
    assert acknowledged <= stored
