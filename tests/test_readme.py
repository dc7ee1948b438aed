"""The README is the front page: short, with the two commands, the port, the example call
(run here against a live sidecar, so that it cannot rot), the demo and where to go next."""

from __future__ import annotations

import re

import pytest

from sidecar.cli import build_parser
from tests.docs.pages import README
from tests.harness import RunningSidecar

TEXT = README.read_text()


def _section(heading: str) -> str:
    found = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", TEXT, re.S | re.M)
    assert found, f"the README has no section {heading!r}"
    return found.group(1)


def test_the_readme_is_a_front_page() -> None:
    assert len(TEXT.splitlines()) < 250
    headings = re.findall(r"^## (.*)$", TEXT, re.M)
    needed_sections = (
        "Quick start", "An example call", "The demo", "Guarantees", "Not promised", "Security"
    )  # fmt: skip
    for needed in needed_sections:
        assert needed in headings, needed
    assert "Where to go next" in headings[-1]


def test_the_quick_start_is_two_commands_and_says_how_to_change_the_port() -> None:
    quick = _section("Quick start")
    (block,) = re.findall(r"```sh\n(.*?)```", quick, re.S)
    commands = [line.split("#")[0].strip() for line in block.splitlines()]
    assert commands == ["make run", "make test"]
    assert "ACTONCE_LISTEN" in quick and "--listen" in quick
    assert "ACTONCE_TARGET" in quick


def test_the_trust_table_names_tests_and_settings_that_exist() -> None:
    rows = [line for line in _section("Security").splitlines() if line.startswith("| ")][2:]
    whom = [row.split("|")[1].strip() for row in rows]
    for needed in ("harness", "agent", "operator", "writer role", "other pods", "web pages"):
        assert any(needed in who for who in whom), f"the trust table has no row for {needed}"
    serve = build_parser()
    for row in rows:
        *_, held, tested, _ = row.split("|")
        folder = README.parent
        for name in re.findall(r"`([\w/.]+\.py)`", tested):
            path = README.parent / name if "/" in name else folder / name
            assert path.is_file(), f"the trust table names {name}, which is not a test here"
            folder = path.parent  # a bare file name is in the folder named before it
        for flag in re.findall(r"`(--[\w-]+)`", held):
            serve.parse_args(["serve", flag, "true" if flag == "--agent-capabilities" else "x"])


def test_the_readme_example_call_works(
    sidecar: RunningSidecar, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocks = re.findall(r"```python\n(.*?)```", _section("An example call"), flags=re.DOTALL)
    assert blocks, "the README has no python example"
    # The example reads the sidecar's address as an agent does, from ACTONCE_TARGET.
    assert "127.0.0.1:50051" in blocks[0] and "ACTONCE_TARGET" in blocks[0]
    monkeypatch.setenv("ACTONCE_TARGET", f"127.0.0.1:{sidecar.port}")
    namespace: dict[str, object] = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)
    assert namespace["again"].id == namespace["ticket"].id  # type: ignore[attr-defined]
    assert len(sidecar.artifacts("ticket")) == 1
