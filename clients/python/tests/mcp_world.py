"""The world of the grid's MCP row: a LangGraph agent whose tools are MCP tools, through
``actonce serve --mcp-listen ... --mcp-upstream payments=... --tool-effects ...``.

- The upstream is the gateway tests' payments MCP server (tests/fronts/mcp/charges.py),
  a process of its own that appends each charge it makes to a file, so what it did is
  known however the worker dies.
- The worker (tests/mcp_worker.py) runs in an agent environment of its own:
  langchain-mcp-adapters requires the 1.x MCP SDK, which cannot sit beside the 2.x SDK
  the sidecar serves with. It is made once under .cache/ with the versions pinned below,
  and finds this checkout's client on its PYTHONPATH, so it always runs the code here.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import venv
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from forking import forking_worker
from kill_loop import World

from actonce_client import Client
from actonce_client.testing import LocalSidecar, free_port

CLIENT = Path(__file__).resolve().parents[1]
REPO = CLIENT.parents[1]
AGENT_ENV = REPO / ".cache" / "mcp-agent-env"
# The adapters and LangGraph as an agent would have them; the client's own dependencies at
# the versions constraints.txt pins.
PINS = (
    "langchain-mcp-adapters==0.3.2", "langgraph==1.2.24", "langchain==1.5.2",
    "langchain-core==1.8.3", "langgraph-checkpoint-sqlite==3.1.2", "aiosqlite==0.22.1",
    "grpcio==1.85.3", "grpcio-status==1.85.3", "protobuf==7.36.2",
    "googleapis-common-protos==1.76.0", "rfc8785==0.1.4",
)  # fmt: skip
PAYMENTS = REPO / "tests" / "fronts" / "mcp" / "charges.py"
# What the operator's effects file says of the payments tools: a charge without a key is a
# non-idempotent write; charge_keyed takes the step id as its idempotency key.
EFFECTS = {
    "payments__charge": "TOOL_EFFECT_NON_IDEMPOTENT_WRITE",
    "payments__charge_keyed": {
        "effect": "TOOL_EFFECT_NON_IDEMPOTENT_WRITE",
        "idempotency_key": {"argument": "idempotency_key"},
    },
}


def agent_python() -> Path:
    """The agent environment's interpreter, made (or made again when the pins change)."""
    python = AGENT_ENV / "bin" / "python"
    stamp = AGENT_ENV / "pins.txt"
    if not (python.exists() and stamp.exists() and stamp.read_text() == "\n".join(PINS)):
        venv.create(AGENT_ENV, clear=True, with_pip=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             *PINS], check=True, timeout=900,
        )  # fmt: skip
        stamp.write_text("\n".join(PINS))
    return python


class Payments:
    """The payments MCP server's process, and what it charged."""

    def __init__(self, folder: Path) -> None:
        self.log = folder / "payments.log"
        self.port = free_port()
        out = (folder / "payments.out").open("ab")
        self.process = subprocess.Popen(
            [sys.executable, str(PAYMENTS), "--port", str(self.port), "--log", str(self.log)],
            stdout=out, stderr=out,
        )  # fmt: skip
        self._wait_listening()

    def _wait_listening(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("the payments MCP server did not start")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def charged(self, run_id: str) -> list[tuple[str, int]]:
        """Every charge made, keyed or not, of the run's customers."""
        made = []
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        for line in lines:
            words = line.split()
            if words[0] == "charge":
                made.append((words[1], int(words[2])))
            elif words[0] == "keyed":
                made.append((words[2], int(words[3])))
        return [(customer, cents) for customer, cents in made if customer.startswith(run_id)]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)


@contextmanager
def mcp_world_of(
    _shared: LocalSidecar | None, folder: Path, worker_module: str = "mcp_worker"
) -> Iterator[World]:
    """The payments server, a sidecar whose gateway fronts it, and a forking worker of
    ``worker_module`` in the agent environment (the grid's shared sidecar is not used: this
    row needs one with the gateway)."""
    python = agent_python()
    payments = Payments(folder)
    effects = folder / "effects.json"
    effects.write_text(json.dumps(EFFECTS))
    port = free_port()
    gateway = ["--mcp-listen", f"127.0.0.1:{port}", "--mcp-upstream", f"payments={payments.url}",
               "--tool-effects", str(effects)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(CLIENT / "src")}
    try:
        with (
            LocalSidecar(args=gateway) as sidecar,
            Client(sidecar.target) as client,
            forking_worker(worker_module, str(python), env) as forks,
        ):
            url = f"http://127.0.0.1:{port}/mcp"
            yield World(sidecar, client, url, payments.charged, folder, forks)
    finally:
        payments.stop()
