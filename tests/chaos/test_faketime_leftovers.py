"""What killed faketime wrappers leave in shared memory is cleared before a skewed start:
a wrapper that gets a dead one's pid could not make its semaphore, and its sidecar would
never start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from chaos.processes import clear_stale_faketime


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return int(done.stdout)


def test_only_a_dead_wrappers_semaphore_and_memory_are_cleared(tmp_path: Path) -> None:
    dead, live = _dead_pid(), os.getpid()
    names = [
        f"sem.faketime_sem_{dead}",
        f"faketime_shm_{dead}",
        f"sem.faketime_sem_{live}",
        f"faketime_shm_{live}",
        "PostgreSQL.1187567288",
        "sem.faketime_sem_notapid",
    ]
    for name in names:
        (tmp_path / name).touch()
    cleared = clear_stale_faketime(tmp_path)
    assert sorted(cleared) == sorted(names[:2])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[2:])
