"""The coverage-guided fuzz targets run, briefly, and find nothing (``make fuzz`` runs longer)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(
    importlib.util.find_spec("atheris") is None,
    reason="atheris is in the fuzz extra (make fuzz installs it)",
)
@pytest.mark.parametrize("target", ["json", "pointer"])
def test_a_short_fuzz_run_finds_no_crash(target: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.fuzz.atheris_targets", target, "3"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Done" in done.stderr
