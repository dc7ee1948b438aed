"""The bench's machine and processes: the cores each side is pinned to, a server under test
(a :class:`Target`) and what its processes use, free ports, the API's descriptor set for ghz,
and the bench's own PostgreSQL server. Everything else in bench/ stands on this module."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers.health import NeverAnswered, wait_serving

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"
GHZ_DIR = ROOT / "bench" / "ghz"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

# Servers on the first core, the load on the second: ghz must not take the servers' CPU.
SERVER_CORE = 0
LOAD_CORE = 1


def pin(core: int) -> list[str]:
    """The taskset prefix that pins a command to ``core`` (none on a one-core machine)."""
    if len(os.sched_getaffinity(0)) < 2 or shutil.which("taskset") is None:
        return []
    return ["taskset", "-c", str(core)]


def ghz_binary() -> Path:
    ghz = Path(os.environ.get("GHZ", ROOT / ".tools" / "bin" / "ghz"))
    if not ghz.exists():
        raise SystemExit(f"ghz not found at {ghz}: `make bench` installs it")
    return ghz


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Target:
    """A server under test: its process and address."""

    name: str
    process: subprocess.Popen[bytes]
    address: str
    kind: str  # "store", "sidecar", "floor" (the sidecar's calls, writes only) or "http"
    protoset: Path | None = None  # for a server whose reflection cannot find methods
    # Processes of the same system beside the first (a peer's server and its SDK's).
    others: list[subprocess.Popen[bytes]] = field(default_factory=list)
    # When it was spawned (time.monotonic()): its cold start runs from here.
    spawned: float = 0.0
    # A database server whose CPU the target's writes use too (its PostgreSQL).
    database_pid: int | None = None
    # An HTTP target's load (a peer's ingress, which ghz cannot call): its command for
    # the options ghz would take.
    load_command: Callable[..., list[str]] | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    def pids(self) -> list[int]:
        """Every process of the target, their children included."""
        return [p for proc in (self.process, *self.others) for p in process_tree(proc.pid)]

    def cpu_seconds(self) -> float:
        """User and system CPU of the target's processes (every thread), and of its
        database server's when it has one."""
        pids = self.pids()
        if self.database_pid is not None:
            pids += process_tree(self.database_pid)
        return sum(cpu_seconds(pid) for pid in pids)

    def rss_mib(self) -> float:
        """Resident memory of the target's own processes (not its database server's)."""
        return sum(status_kib(pid, "VmRSS") for pid in self.pids()) / 1024

    def peak_rss_mib(self) -> float:
        """The most resident memory each of the target's processes has held, summed."""
        return sum(status_kib(pid, "VmHWM") for pid in self.pids()) / 1024

    def stop(self) -> None:
        for process in (*self.others, self.process):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(20)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(10)


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants, those alive now."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            for task in Path(f"/proc/{current}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def cpu_seconds(pid: int) -> float:
    """User and system CPU of one process, every thread included; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # utime and stime are the 14th and 15th fields; the split above starts at the 3rd.
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def status_kib(pid: int, key: str) -> int:
    """One ``VmRSS``-like line of /proc/PID/status, in KiB; 0 once the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def protoset(work: Path) -> Path:
    """The API's descriptors, imports included, and grpc.health.v1's, for ghz to call a
    server without reflection."""
    from google.protobuf import descriptor_pb2
    from grpc_health.v1 import health_pb2

    out = work / "actonce.protoset"
    if not out.exists():
        protos = sorted(str(p.relative_to(ROOT / "protos")) for p in
                        (ROOT / "protos" / "actonce" / "v1").glob("*.proto"))  # fmt: skip
        subprocess.run(
            [sys.executable, "-m", "grpc_tools.protoc", f"-I{ROOT / 'protos'}",
             "--include_imports", f"--descriptor_set_out={out}", *protos],
            check=True, cwd=ROOT,
        )  # fmt: skip
        files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
        health_pb2.DESCRIPTOR.CopyToProto(files.file.add())
        out.write_bytes(files.SerializeToString())
    return out


def wait_until_serving(target: Target, timeout: float = 60) -> None:
    try:
        wait_serving(target.address, target.process, timeout=timeout)
    except NeverAnswered as never:
        raise RuntimeError(f"{target.name}: {never}") from None


PG_DIR = os.environ.get("ACTONCE_PG_DIR", "/tmp/actonce-bench-pg")


def postgres_pid() -> int | None:
    """The bench's PostgreSQL server's postmaster, whose backends a PostgreSQL target's
    writes keep busy: their CPU is the target's too."""
    try:
        return int((Path(PG_DIR) / "data" / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def postgres_dsns(names: Sequence[str]) -> dict[str, tuple[str, str]]:
    """A fresh ledger and store database per PostgreSQL target, on the bench's own server.

    The server is started pinned to the servers' core, so its backends do not take the
    load generator's; it is apart from the tests' server, so the run touches neither.
    """
    if not any("postgres" in name for name in names):
        return {}
    from tests.helpers.postgres import PrivateServer, fresh_database

    server = PrivateServer(
        PG_DIR,
        int(os.environ.get("ACTONCE_PG_PORT", "55461")),
        prefix=tuple(pin(SERVER_CORE)),
    ).start()
    return {
        name: (
            fresh_database("bench_ledger", server=server),
            fresh_database("bench_store", server=server),
        )
        for name in names
        if "postgres" in name
    }
