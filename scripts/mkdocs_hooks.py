"""MkDocs hooks: the site is the repository's own pages, read as they are on disk.

Every page is written to read in a checkout (and on a code host), with links relative to the
file it is in: the README links `docs/x.md`, a page under `docs/` links `../CHANGELOG.md` or
`../clients/python/README.md`. The site keeps those pages unchanged and
- serves the README as its home page (`index.md`), so the front page is written once;
- adds every file outside `docs/` that a page links to, under `_repo/` (a Markdown file as a
  page, anything else as it is), and the files those pages link to, and so on;
- rewrites each link of each page from "relative to this file in the repository" to
  "relative to this page on the site", so that MkDocs checks every link and anchor strictly.

A link to a folder goes to its README.md. The rewriting skips fenced code.
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files, InclusionLevel

log = logging.getLogger("mkdocs.hooks.actonce")

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^( {0,3})(```|~~~).*?^\1\2[ \t]*$", re.S | re.M)
LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s]+)(\))")
SCHEME = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*:")

# src_uri on the site -> the file's path in the repository, for every page and file added here.
_REPO_PATH: dict[str, str] = {}


def site_uri(repo_path: str) -> str:
    """Where a repository file is on the site."""
    if repo_path == "README.md":
        return "index.md"
    if repo_path.startswith("docs/"):
        return repo_path.removeprefix("docs/")
    return f"_repo/{repo_path}"


def repo_path_of(src_uri: str) -> str:
    return _REPO_PATH.get(src_uri, f"docs/{src_uri}")


def _outside_code(text: str, replace: Any) -> str:
    parts, last = [], 0
    for fence in FENCE.finditer(text):
        parts.append(replace(text[last : fence.start()]))
        parts.append(fence.group(0))
        last = fence.end()
    parts.append(replace(text[last:]))
    return "".join(parts)


def _target(repo_path: str, link: str) -> tuple[str, str] | None:
    """The repository file a relative link of ``repo_path`` names, and its anchor; None for
    another site's link or an anchor of the page itself."""
    if SCHEME.match(link) or link.startswith("#"):
        return None
    path, _, anchor = link.partition("#")
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(repo_path), path))
    if (ROOT / joined).is_dir() and (ROOT / joined / "README.md").is_file():
        joined = posixpath.join(joined, "README.md")
    return joined, anchor


def _links(repo_path: str) -> list[str]:
    found: list[str] = []

    def collect(text: str) -> str:
        for match in LINK.finditer(text):
            target = _target(repo_path, match.group(2))
            if target is not None:
                found.append(target[0])
        return text

    _outside_code((ROOT / repo_path).read_text(), collect)
    return found


# Pages the nav lists ahead of their text: left out of the nav until the file exists. Any
# other page the nav names and the disk lacks fails the strict build.
AHEAD = frozenset({"model-turns.md", "grants.md"})


def _present(nav: list[Any], docs: Path) -> list[Any]:
    kept: list[Any] = []
    for entry in nav:
        ((title, value),) = entry.items() if isinstance(entry, dict) else [(None, entry)]
        if isinstance(value, list):
            value = _present(value, docs)
        elif value in AHEAD and not (docs / value).is_file():
            continue
        kept.append({title: value} if title is not None else value)
    return kept


def on_config(config: Any) -> Any:
    config.nav = _present(config.nav, Path(config.docs_dir))
    return config


def on_files(files: Files, config: Any) -> Files:
    readme = File.generated(config, "index.md", abs_src_path=str(ROOT / "README.md"))
    files.append(readme)
    _REPO_PATH["index.md"] = "README.md"
    pages = ["README.md"] + [f"docs/{f.src_uri}" for f in files.documentation_pages()]
    seen = set(pages)
    while pages:
        page = pages.pop()
        if not (ROOT / page).is_file():
            continue
        for linked in _links(page):
            if linked in seen or linked.startswith(("docs/", "../")) or linked == "README.md":
                continue
            seen.add(linked)
            if not (ROOT / linked).is_file():
                continue  # MkDocs names it as a broken link
            uri = site_uri(linked)
            _REPO_PATH[uri] = linked
            files.append(
                File.generated(
                    config,
                    uri,
                    abs_src_path=str(ROOT / linked),
                    inclusion=InclusionLevel.NOT_IN_NAV,
                )
            )
            if linked.endswith(".md"):
                pages.append(linked)
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    repo_path = repo_path_of(page.file.src_uri)
    here = posixpath.dirname(page.file.src_uri)

    def rewrite(text: str) -> str:
        def one(match: re.Match[str]) -> str:
            target = _target(repo_path, match.group(2))
            if target is None:
                return match.group(0)
            path, anchor = target
            if page.file.src_uri.startswith("_repo/") and not (ROOT / path).is_file():
                # A repository file's link to a folder, or to output it does not commit (a
                # benchmark's plots): the site shows its text, as the checkout has no file.
                log.info("%s: %s names no file; shown as text", repo_path, match.group(2))
                return match.group(1).removeprefix("!")[1:-2]
            relative = posixpath.relpath(site_uri(path), here or ".")
            return f"{match.group(1)}{relative}{'#' + anchor if anchor else ''}{match.group(3)}"

        return LINK.sub(one, text)

    return _outside_code(markdown, rewrite)
