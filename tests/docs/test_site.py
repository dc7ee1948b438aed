"""The site builds strict with MkDocs, as `make docs` builds it: the README as its home page,
every page in the nav, every link and anchor checked; and a broken anchor, a broken link or a
page left out of the nav fails the build, naming it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.docs.pages import DOCS, ROOT

CONFIG = ROOT / "mkdocs.yml"


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )


def test_the_site_builds_strict_with_the_readme_as_its_home_page(tmp_path: Path) -> None:
    built = build(CONFIG, tmp_path / "site")
    assert built.returncode == 0, built.stderr
    home = (tmp_path / "site" / "index.html").read_text()
    assert 'href="get-started.html"' in home  # the README's docs/get-started.md, on the site
    assert 'href="reference/settings.html"' in home
    for page in ("langgraph.html", "reference/settings.html", "reference/api.html"):
        assert (tmp_path / "site" / page).is_file(), page
    # A repository file a page links to is served beside the pages (a README as its index).
    install = (tmp_path / "site" / "install.html").read_text()
    assert 'href="_repo/clients/python/index.html"' in install
    assert (tmp_path / "site" / "_repo" / "clients" / "python" / "index.html").is_file()


def test_a_broken_anchor_a_broken_link_and_a_page_out_of_the_nav_fail_it(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs)
    with (docs / "get-started.md").open("a") as page:
        page.write("\n[gone](guarantees.md#no-such-section) and [lost](no-such-page.md)\n")
    (docs / "stray.md").write_text("# A page in no nav\n")
    config = CONFIG.read_text()
    config = config.replace("docs_dir: docs\n", f"docs_dir: {docs}\n")
    config = config.replace(
        "- scripts/mkdocs_hooks.py", f"- {ROOT / 'scripts' / 'mkdocs_hooks.py'}"
    )
    (tmp_path / "mkdocs.yml").write_text(config)
    built = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert built.returncode != 0
    assert "'#no-such-section'" in built.stderr, built.stderr
    assert "no-such-page.md" in built.stderr, built.stderr
    assert "stray.md" in built.stderr, built.stderr
