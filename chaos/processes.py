"""Real ``actonce serve`` and ``actonce store`` child processes, and the kills between them.

A :class:`Service` is one of those processes on a fixed port, so that a restart comes back
where the others look for it. :class:`Killer` is the harness's hand: the agent tells it before
each call, and when a call count in the seed's kill schedule comes up it sends SIGKILL to the
sidecar or the store, waits out the seed's downtime and starts the process again, as a
kubelet would. Kills are handled one at a time, in schedule order.
"""

from __future__ import annotations

import contextlib
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from chaos.plan import Kill
from tests.helpers.env import scrubbed_env
from tests.helpers.health import ANY_ANSWER, NeverAnswered, wait_for_health

# Fixed ports come from below the kernel's ephemeral range, so that no outgoing connection
# holds one while its server is down between a kill and a restart; and each seed has a block
# of its own, so that a seed running beside it cannot take a port whose server is down.
_PORT_BASE = 20000
_PORT_BLOCKS = 5000
_BLOCK = 2


class HarnessError(Exception):
    """The harness itself could not do its part (a process would not start): no verdict on
    the sidecar."""


def seed_ports(seed: int, salt: int) -> tuple[int, int]:
    """Two free loopback ports for ``seed``, from its own block.

    ``salt`` is drawn once per harness invocation, so that two invocations running the same
    seeds at once (a quick run beside a long one) get different blocks.
    """
    for step in range(_PORT_BLOCKS):
        block = (seed + salt + step * 7919) % _PORT_BLOCKS
        ports = (_PORT_BASE + block * _BLOCK, _PORT_BASE + block * _BLOCK + 1)
        if all(_free(port) for port in ports):
            return ports
    raise HarnessError("no free ports")


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@dataclass
class Service:
    """One child process of the harness: the sidecar or the standalone store."""

    name: str
    command: Sequence[str]
    port: int
    log_path: Path
    # Whether a (re)start waits for SERVING, or only for the port to answer: a sidecar whose
    # store is down answers NOT_SERVING, and must be up all the same.
    needs_serving: bool = True
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        """Start the process and wait until it answers; HarnessError if it never does."""
        with self._lock:
            with self.log_path.open("ab") as log:
                self.process = subprocess.Popen(
                    list(self.command), stdout=log, stderr=log, env=scrubbed_env(),
                    start_new_session=True,
                )  # fmt: skip
            self.starts += 1
            process = self.process
        wanted = "SERVING" if self.needs_serving else ANY_ANSWER
        try:
            wait_for_health(self.target, wanted, process=process, timeout=timeout)
        except NeverAnswered as never:
            raise HarnessError(f"{self.name}: {never}; see {self.log_path}") from None

    def kill(self) -> bool:
        """SIGKILL the process; False when it was not running."""
        with self._lock:
            process = self.process
            if process is None or process.poll() is not None:
                return False
            process.send_signal(signal.SIGKILL)
        process.wait(10)
        return True

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM (a graceful drain), then SIGKILL if the drain takes too long."""
        with self._lock:
            process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


def sidecar_command(
    port: int,
    data_dir: Path,
    *,
    store_target: str | None = None,
    audit_dsn: str | None = None,
    store_dsn: str | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """``actonce serve`` as the harness runs it."""
    command = [
        sys.executable,
        "-m",
        "sidecar.cli",
        "serve",
        "--listen",
        f"127.0.0.1:{port}",
        "--data-dir",
        str(data_dir),
        "--log-format",
        "json",
        "--send-allowlist",
        "pager",
        *extra,
    ]
    if store_target:
        command += ["--store-target", store_target]
    if audit_dsn:
        command += ["--audit-dsn", audit_dsn]
    if store_dsn:
        command += ["--store-dsn", store_dsn]
    return command


def store_command(port: int, data_dir: Path, *, dsn: str | None = None) -> list[str]:
    """``actonce store`` as the harness runs it."""
    command = [
        sys.executable,
        "-m",
        "sidecar.cli",
        "store",
        "--listen",
        f"127.0.0.1:{port}",
        "--data-dir",
        str(data_dir),
        "--log-format",
        "json",
    ]
    if dsn:
        command += ["--store-dsn", dsn]
    return command


@dataclass(frozen=True)
class KillRecord:
    """A kill the harness made: at which call, of which process, and whether it was up."""

    at_call: int
    target: str
    was_running: bool


class Killer:
    """Kills and restarts services at the seed's call counts, one kill at a time."""

    def __init__(self, kills: Sequence[Kill], services: dict[str, Service]) -> None:
        self._pending = [k for k in kills if not k.at_step]
        self._step_kills = [k for k in kills if k.at_step]
        self._services = services
        self._lock = threading.Lock()
        self._calls = 0
        self._queue: queue.SimpleQueue[Kill | None] = queue.SimpleQueue()
        self.done: list[KillRecord] = []
        self.error: HarnessError | None = None
        self._thread = threading.Thread(target=self._work, name="killer", daemon=True)
        self._thread.start()

    @property
    def calls(self) -> int:
        return self._calls

    def before_call(self) -> None:
        """Count one call of the agent; a kill due at this count starts now."""
        with self._lock:
            self._calls += 1
            while self._pending and self._pending[0].at_call <= self._calls:
                self._queue.put(self._pending.pop(0))

    def before_step(self, run_id: str) -> None:
        """The run is about to begin its non-idempotent step; a kill waiting for it starts."""
        with self._lock:
            for kill in [k for k in self._step_kills if k.at_step == run_id]:
                self._step_kills.remove(kill)
                self._queue.put(kill)

    def _work(self) -> None:
        while True:
            kill = self._queue.get()
            if kill is None:
                return
            time.sleep(kill.delay_ms / 1000)
            service = self._services[kill.target]
            was_running = service.kill()
            self.done.append(KillRecord(kill.at_call, kill.target, was_running))
            time.sleep(kill.down_ms / 1000)
            try:
                _restart(service)
            except HarnessError as exc:
                self.error = exc
                return

    def close(self) -> None:
        """Drop kills not yet due, let one in progress finish (its restart included)."""
        with self._lock:
            self._pending.clear()
            self._step_kills.clear()
        self._queue.put(None)
        self._thread.join(120)
        for service in self._services.values():
            if not service.alive() and self.error is None:
                with contextlib.suppress(HarnessError):
                    _restart(service)


def _restart(service: Service) -> None:
    # A port can linger for a moment after a kill; a few tries ride that out.
    for tries_left in range(2, -1, -1):
        try:
            service.start()
            return
        except HarnessError:
            if tries_left == 0:
                raise
            time.sleep(0.5)
