"""The README's example call runs against a live sidecar, so that it cannot rot."""

from __future__ import annotations

import re
from pathlib import Path

from tests.harness import RunningSidecar

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_example_call_works(sidecar: RunningSidecar) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    assert blocks, "the README has no python example"
    code = blocks[0].replace("127.0.0.1:50051", f"127.0.0.1:{sidecar.port}")
    namespace: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), namespace)
    assert namespace["again"].id == namespace["ticket"].id  # type: ignore[attr-defined]
    assert len(sidecar.artifacts("ticket")) == 1
