"""The files every client's tests read are what their scripts write."""

from __future__ import annotations

import json
from pathlib import Path

from scripts import make_status_cases

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_status_cases_file_is_what_the_script_writes() -> None:
    written = json.loads((DOCS / "status-cases.json").read_text())
    assert written == make_status_cases.document(), "run scripts/make_status_cases.py"
