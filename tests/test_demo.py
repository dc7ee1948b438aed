"""`actonce demo`, the newcomer's first look, must keep telling the truth.

The README offers it right after `make run`, which installs the project and
nothing else, so it runs here with the Python client made unimportable.
"""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.request
from pathlib import Path

from sidecar.config import Config
from tests.console.scenario import start_console
from tests.server.processes import run_cli

# Runs the CLI as a plain install would: any import of the client fails.
PLAIN_INSTALL = (
    "import sys; sys.modules['actonce_client'] = None; from sidecar.cli import main; "
    "main(['demo', '--data-dir', sys.argv[1]])"
)


def test_actonce_demo_lands_every_write_once_from_a_plain_install(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PLAIN_INSTALL, str(tmp_path / "demo")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "killed (SIGKILL) after 3 of 7 writes" in done.stdout
    rows = [line.split() for line in done.stdout.splitlines() if line.strip().startswith("edit /")]
    # The first edit was made before the kill and found in place by the retry.
    assert rows[0][-2:] == ["APPLIED", "SKIPPED"]
    assert rows[1][-2:] == ["-", "APPLIED"]
    assert "every write landed once" in done.stdout
    # The sidecar's own log lines, warnings included, stay out of the demo's table.
    assert not [line for line in (done.stdout + done.stderr).splitlines() if "{" in line[:3]]
    assert done.stderr == ""


def test_the_demo_keeps_its_ledger_and_says_how_to_open_the_run(tmp_path: Path) -> None:
    data = tmp_path / "demo"
    done = run_cli("demo", "--data-dir", str(data), timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    run_id = re.search(r"run +(run-demo-[0-9a-f]+),", done.stdout)
    assert run_id, done.stdout
    run = run_id.group(1)
    ledger = data / "audit.db"
    assert f"actonce audit show {run} --audit-db {ledger}" in done.stdout
    assert f"actonce console --audit-db {ledger}" in done.stdout
    assert f"http://127.0.0.1:8080/runs/{run}" in done.stdout

    # What it says works: the audit shows the run's writes, the console serves its page.
    shown = run_cli("audit", "show", run, "--audit-db", str(ledger))
    assert shown.returncode == 0, shown.stderr
    assert "Create" in shown.stdout and "BeginStep" in shown.stdout, shown.stdout
    assert "OUTCOME_ALREADY_APPLIED" in shown.stdout or "already applied" in shown.stdout
    console = start_console(Config(listen="127.0.0.1:0", data_dir=data), tmp_path, token=False)
    try:
        with urllib.request.urlopen(f"{console.url}/runs/{run}", timeout=10) as page:
            assert page.status == 200
            assert run in page.read().decode()
    finally:
        console.stop()
