"""The layout table of docs/developing.md names every package and module of the sidecar."""

from __future__ import annotations

from tests.docs.pages import ROOT, page_text


def test_every_part_of_the_sidecar_is_in_the_layout_table() -> None:
    table = page_text("developing.md").split("## Layout", 1)[1]
    parts = [
        f"sidecar/{p.name}/" if p.is_dir() else f"sidecar/{p.name}"
        for p in sorted((ROOT / "sidecar").iterdir())
        if p.name not in {"__init__.py", "py.typed", "__pycache__"}
    ]
    missing = [part for part in parts if f"`{part}" not in table]
    assert not missing, f"docs/developing.md's layout names no {missing}"
