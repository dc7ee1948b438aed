"""Every cross-reference in the README and the docs resolves: the file it names exists, and
the section it names is a heading of that file (as GitHub anchors headings). The site's build
(`make docs`, strict) checks the same links as pages of the site; the anchors agree, since the
site names headings by the same rule."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").rglob("*.md")),
    *sorted((ROOT / "clients").glob("*/README.md")),
]
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*$", re.M)


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lowercased, punctuation but hyphens and spaces
    dropped, spaces made hyphens (written here: no library we ship spells the rule)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text())):
        slug, n = anchor(heading), 1
        while slug in found:  # a repeated heading gets -1, -2, ...
            slug = f"{anchor(heading)}-{n}"
            n += 1
        found.add(slug)
    return found


def links(path: Path) -> list[str]:
    return LINK.findall(FENCE.sub("", path.read_text()))


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_resolves(doc: Path) -> None:
    broken = []
    for target in links(doc):
        if re.match(r"[a-z]+:", target):
            continue  # another site: not this repository's to keep
        file_part, _, section = target.partition("#")
        found = (doc.parent / file_part).resolve() if file_part else doc
        if not found.exists():
            broken.append(f"{target}: no {file_part}")
        elif section and found.suffix == ".md" and section not in anchors(found):
            broken.append(f"{target}: no section #{section} in {found.name}")
    assert not broken, f"{doc.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_anchor_rule_is_githubs() -> None:
    assert anchor("Steps: the agent's own tools ([ADR-111](docs/x.md))") == (
        "steps-the-agents-own-tools-adr-111"
    )
    assert anchor("`actonce audit`") == "actonce-audit"


def test_the_site_anchors_headings_by_the_same_rule() -> None:
    # mkdocs.yml's toc slugify: a link written for the repository's pages works on the site.
    from pymdownx.slugs import slugify  # type: ignore[import-untyped]  # (ships no types)

    site = slugify(case="lower")
    headings = [h for doc in DOCS for h in HEADING.findall(FENCE.sub("", doc.read_text()))]
    rendered = [re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", h).replace("`", "") for h in headings]
    differ = [h for h, text in zip(headings, rendered, strict=True) if site(text, "-") != anchor(h)]
    assert not differ, differ
