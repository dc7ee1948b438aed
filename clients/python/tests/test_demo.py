"""`actonce demo`, the newcomer's first look, must keep telling the truth."""

from __future__ import annotations

import subprocess
import sys


def test_actonce_demo_lands_every_write_once() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sidecar.cli", "demo"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "killed (SIGKILL) after 3 of 7 writes" in done.stdout
    rows = [line.split() for line in done.stdout.splitlines() if line.strip().startswith("edit /")]
    # The first edit was made before the kill and found in place by the retry.
    assert rows[0][-2:] == ["APPLIED", "SKIPPED"]
    assert rows[1][-2:] == ["-", "APPLIED"]
    assert "every write landed once" in done.stdout
