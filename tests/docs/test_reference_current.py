"""The reference pages are current: regenerating them from the code changes nothing. Part of
`make check`, so that a setting, flag, metric, reason or RPC changed without `make docs-gen`
is caught before it is committed."""

from __future__ import annotations

from pathlib import Path

from tests.docs.pages import reference_generator
from tests.docs.pages import reference_page as page

gen_reference = reference_generator()


def test_the_committed_pages_are_what_the_generator_makes() -> None:
    stale = [name for name, text in gen_reference.generate().items() if page(name) != text]
    assert not stale, f"docs/reference/{stale} stale: run 'make docs-gen'"


def test_the_generator_says_when_a_page_is_stale(tmp_path: Path) -> None:
    for name, text in gen_reference.generate().items():
        (tmp_path / name).write_text(text)
    assert gen_reference.main(["--check", str(tmp_path)]) == 0
    (tmp_path / "settings.md").write_text(page("settings.md").replace("--listen", "--listne"))
    assert gen_reference.main(["--check", str(tmp_path)]) == 1
