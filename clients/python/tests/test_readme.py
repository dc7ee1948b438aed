"""The README's example is the one developers copy: it must run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_example_runs(target: str, capsys: pytest.CaptureFixture[str]) -> None:
    blocks = re.findall(
        r"```python\n(from actonce_client import Client\n.*?)```", README.read_text(), re.S
    )
    assert blocks, "README.md has no runnable example"
    exec(compile(blocks[0].replace("127.0.0.1:50051", target), "README.md", "exec"), {})
    assert re.fullmatch(r"art_[a-z2-7]{26} (ALREADY_)?APPLIED\n", capsys.readouterr().out)
