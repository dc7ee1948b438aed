"""No module of the crash harness (chaos/) or the bench (bench/) is over 450 lines.

A module that long holds more than one idea; it is split into modules of one idea each, by
what the code is for, rather than allowed to grow. Each module is its own case, so that a
failure names the module and its length.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("chaos", "bench")
MAX_LINES = 450


def _modules() -> list[Path]:
    return sorted(path for folder in FOLDERS for path in (ROOT / folder).rglob("*.py"))


def test_each_folder_has_modules_to_hold_to_the_limit() -> None:
    # So that a folder moved or renamed fails here instead of leaving nothing to check.
    empty = [folder for folder in FOLDERS if not any((ROOT / folder).rglob("*.py"))]
    assert not empty, f"no module found under {empty}"


@pytest.mark.parametrize("module", _modules(), ids=lambda path: str(path.relative_to(ROOT)))
def test_module_is_at_most_450_lines(module: Path) -> None:
    lines = len(module.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, (
        f"{module.relative_to(ROOT)} has {lines} lines, {lines - MAX_LINES} over the "
        f"{MAX_LINES} a module of chaos/ or bench/ may have: split it by what its parts are for"
    )
