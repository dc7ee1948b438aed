"""`actonce demo`, the newcomer's first look, must keep telling the truth.

The README offers it right after `make run`, which installs the project and
nothing else, so it runs here with the Python client made unimportable.
"""

from __future__ import annotations

import subprocess
import sys

# Runs the CLI as a plain install would: any import of the client fails.
PLAIN_INSTALL = (
    "import sys; sys.modules['actonce_client'] = None; from sidecar.cli import main; main(['demo'])"
)


def test_actonce_demo_lands_every_write_once_from_a_plain_install() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PLAIN_INSTALL], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "killed (SIGKILL) after 3 of 7 writes" in done.stdout
    rows = [line.split() for line in done.stdout.splitlines() if line.strip().startswith("edit /")]
    # The first edit was made before the kill and found in place by the retry.
    assert rows[0][-2:] == ["APPLIED", "SKIPPED"]
    assert rows[1][-2:] == ["-", "APPLIED"]
    assert "every write landed once" in done.stdout
    # The sidecar's own log lines stay out of the demo's table.
    assert '"event": "write"' not in done.stdout + done.stderr
