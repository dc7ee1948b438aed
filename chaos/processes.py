"""Real ``actonce serve`` and ``actonce store`` child processes, and the kills between them.

A :class:`Service` is one of those processes on a fixed port, so that a restart comes back
where the others look for it. :class:`Killer` is the harness's hand: the agent tells it before
each call, and when a call count in the seed's kill schedule comes up it sends SIGKILL to the
sidecar or the store, waits out the seed's downtime and starts the process again, as a
kubelet would; or it freezes the process with SIGSTOP and wakes it with SIGCONT. Kills and
freezes are handled one at a time, in schedule order.

Each process runs in a process group of its own, and every signal goes to the whole group:
under a prefix such as ``faketime``, which forks the sidecar as its child, a signal to the
wrapper alone would leave the sidecar serving, or running while "frozen".
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from chaos.plan_kills import FREEZE, Kill
from tests.helpers.env import scrubbed_env
from tests.helpers.health import ANY_ANSWER, NeverAnswered, wait_for_health

# Fixed ports come from below the kernel's ephemeral range, so that no outgoing connection
# holds one while its server is down between a kill and a restart; and each seed has a block
# of its own, so that a seed running beside it cannot take a port whose server is down.
_PORT_BASE = 20000
_PORT_BLOCKS = 2000
# The sidecar's gRPC port, the store's, the sidecar's MCP front's and the upstream's; and
# with more sidecars, a gRPC port and an MCP port for each further one.
_BLOCK = 4


class HarnessError(Exception):
    """The harness itself could not do its part (a process would not start): no verdict on
    the sidecar."""


@dataclass(frozen=True)
class Ports:
    """A seed's block of loopback ports."""

    sidecar: int
    store: int
    mcp: int
    upstream: int
    # The gRPC and MCP ports of the sidecars after the first, in pairs.
    more: tuple[int, ...] = ()

    @property
    def sidecars(self) -> list[int]:
        """Every sidecar's gRPC port, the first's first."""
        return [self.sidecar, *self.more[0::2]]

    @property
    def mcps(self) -> list[int]:
        """Every sidecar's MCP port, in the same order."""
        return [self.mcp, *self.more[1::2]]


def seed_ports(seed: int, salt: int, sidecars: int = 1) -> Ports:
    """Free loopback ports for ``seed``, from its own block.

    ``salt`` is drawn once per harness invocation, so that two invocations running the same
    seeds at once (a quick run beside a long one) get different blocks. With more sidecars
    the blocks are wider and fewer, within the same range.
    """
    size = _BLOCK + 2 * (max(sidecars, 1) - 1)
    blocks = _PORT_BLOCKS * _BLOCK // size
    for step in range(blocks):
        block = (seed + salt + step * 7919) % blocks
        ports = [_PORT_BASE + block * size + n for n in range(size)]
        if all(_free(port) for port in ports):
            sidecar, store, mcp, upstream = ports[:_BLOCK]
            return Ports(sidecar, store, mcp, upstream, more=tuple(ports[_BLOCK:]))
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
            _signal_group(process, signal.SIGKILL)
        process.wait(10)
        return True

    def freeze(self, seconds: float) -> bool:
        """SIGSTOP the process group, SIGCONT it ``seconds`` later; False when it was not
        running. Held under the lock, so that no restart or stop comes in between."""
        with self._lock:
            process = self.process
            if process is None or process.poll() is not None:
                return False
            _signal_group(process, signal.SIGSTOP)
            try:
                time.sleep(seconds)
            finally:
                _signal_group(process, signal.SIGCONT)
        return True

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM (a graceful drain), then SIGKILL if the drain takes too long."""
        with self._lock:
            process = self.process
        if process is None or process.poll() is not None:
            return
        _signal_group(process, signal.SIGCONT)  # a frozen process cannot drain
        _signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + grace
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            _signal_group(process, signal.SIGKILL)
            process.wait(10)
        # A wrapper may exit at once on SIGTERM while the sidecar it forked drains: the drain
        # is waited for as the process's own would be, then the group goes.
        while group_members(process.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        _signal_group(process, signal.SIGKILL)
        while group_members(process.pid) and time.monotonic() < deadline + 10:
            time.sleep(0.05)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


def group_members(pgid: int) -> dict[int, str]:
    """The live processes of a process group and their states (R, S, T, ...), from /proc;
    a zombie, which its parent has yet to reap, is not one."""
    members: dict[int, str] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # gone meanwhile
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
        fields = text[text.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            members[int(stat.parent.name)] = fields[0]
    return members


def _signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    # Started with start_new_session: the group's id is the process's.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signum)


# Where the faketime wrapper keeps the semaphore and the memory it shares with its child,
# each named by the wrapper's pid; it removes them when it exits, not when it is killed.
SHARED_MEMORY = Path("/dev/shm")
_FAKETIME_LEFTOVER = re.compile(r"(?:sem\.faketime_sem|faketime_shm)_(\d+)")


def clear_stale_faketime(shared: Path = SHARED_MEMORY) -> list[str]:
    """Remove what faketime wrappers the harness killed left behind, and name it.

    A wrapper killed with its sidecar's group leaves ``faketime_sem_<pid>`` and
    ``faketime_shm_<pid>``; once the pids wrap (32,768 of them here), a new wrapper that
    gets a dead one's pid cannot make its semaphore ("sem_open: File exists") and the
    sidecar never starts. What a live process holds is left alone."""
    cleared: list[str] = []
    for entry in shared.glob("*faketime_*"):
        found = _FAKETIME_LEFTOVER.fullmatch(entry.name)
        if found is None or _alive(int(found[1])):
            continue
        with contextlib.suppress(FileNotFoundError):
            entry.unlink()
            cleared.append(entry.name)
    return cleared


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sidecar_command(
    port: int,
    data_dir: Path,
    *,
    store_target: str | None = None,
    audit_dsn: str | None = None,
    store_dsn: str | None = None,
    extra: Sequence[str] = (),
    prefix: Sequence[str] = (),
) -> list[str]:
    """``actonce serve`` as the harness runs it, under ``prefix`` (faketime) if given."""
    command = [
        *prefix,
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
    """A kill (or freeze) the harness made: at which call, of which process, and whether it
    was up."""

    at_call: int
    target: str
    was_running: bool
    action: str = "kill"
    seconds: float = 0.0
    started: str = ""  # when, by the harness's clock (HH:MM:SS.mmm)


class Killer:
    """Kills and restarts services at the seed's call counts, one kill at a time."""

    def __init__(self, kills: Sequence[Kill], services: dict[str, Service]) -> None:
        self._pending = sorted((k for k in kills if not k.at_step), key=lambda k: k.at_call)
        self._step_kills = [k for k in kills if k.at_step]
        self._services = services
        self._lock = threading.Lock()
        self._calls = 0
        self._queue: queue.SimpleQueue[Kill | None] = queue.SimpleQueue()
        self.done: list[KillRecord] = []
        self.error: HarnessError | None = None
        self._thread = threading.Thread(target=self._work, name="killer", daemon=True)
        self._thread.start()
        self._freezing: list[threading.Thread] = []

    @property
    def calls(self) -> int:
        return self._calls

    def before_call(self) -> None:
        """Count one call of the agent; a kill due at this count starts now."""
        with self._lock:
            self._calls += 1
            while self._pending and self._pending[0].at_call <= self._calls:
                self._queue.put(self._pending.pop(0))

    def before_step(self, run_id: str, sidecar: str = "sidecar") -> None:
        """The run is about to begin its non-idempotent step on ``sidecar``; a kill waiting
        for it starts. A freeze waiting for it starts at once, beside whatever kill is under
        way: queued behind a kill's restart, it would come after the step."""
        with self._lock:
            for kill in [k for k in self._step_kills if k.at_step == run_id]:
                self._step_kills.remove(kill)
                if kill.target == "sidecar" and sidecar in self._services:
                    kill = replace(kill, target=sidecar)  # the sidecar the step is on
                if kill.action == FREEZE:
                    freezing = threading.Thread(target=self._freeze, args=(kill,), daemon=True)
                    self._freezing.append(freezing)
                    freezing.start()
                else:
                    self._queue.put(kill)

    def _freeze(self, kill: Kill) -> None:
        time.sleep(kill.delay_ms / 1000)
        started = clock()
        # The service's lock orders it with a kill's: a process down is not frozen.
        was_frozen = self._services[kill.target].freeze(kill.down_ms / 1000)
        self.done.append(
            KillRecord(kill.at_call, kill.target, was_frozen, FREEZE, kill.down_ms / 1000, started)
        )

    def _work(self) -> None:
        while True:
            kill = self._queue.get()
            if kill is None:
                return
            if kill.action == FREEZE:
                self._freeze(kill)
                continue
            time.sleep(kill.delay_ms / 1000)
            service = self._services[kill.target]
            started = clock()
            was_running = service.kill()
            self.done.append(KillRecord(kill.at_call, kill.target, was_running, started=started))
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
        for freezing in self._freezing:
            freezing.join(60)
        for service in self._services.values():
            if not service.alive() and self.error is None:
                with contextlib.suppress(HarnessError):
                    _restart(service)


def clock() -> str:
    """The harness's time of day, to the millisecond, for a reader of a seed's records."""
    now = time.time()
    return f"{time.strftime('%H:%M:%S', time.gmtime(now))}.{int(now * 1000) % 1000:03d}"


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
