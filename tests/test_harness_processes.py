"""A sidecar the tests spawn under a prefix (faketime, which forks the server as its child) is
stopped whole: no server outlives its test."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from tests.harness import sidecar_config, spawn_sidecar


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(child) for child in (task / "children").read_text().split()]
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_a_sidecar_spawned_under_a_wrapper_is_stopped_with_it(tmp_path: Path) -> None:
    assert shutil.which("faketime"), "faketime is missing: `make faketime` installs it"
    running = spawn_sidecar(
        sidecar_config(tmp_path / "data"), tmp_path / "log", prefix=("faketime", "-f", "-2h")
    )
    [server] = _children(running.process.pid)  # the wrapper's child serves
    assert _alive(server)
    running.stop()
    deadline = time.monotonic() + 10
    while _alive(server) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(server)
