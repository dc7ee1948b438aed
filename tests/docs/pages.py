"""The documentation as the tests read it: the README, the pages under docs/, and the
snippets they mark as runnable."""

from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
REFERENCE = DOCS / "reference"

# A fenced block right under one of these comments is a snippet a test runs:
#   <!-- runnable -->          Python run here (tests/docs/test_snippets.py) against a live
#                              sidecar whose address is in ACTONCE_TARGET
#   <!-- example: NAME -->     a framework guide's complete agent (clients/python/tests)
#   <!-- mcp: NAME -->         an MCP client's configuration (tests/fronts/mcp)
MARKED = re.compile(r"<!-- (runnable|example|mcp)(?:: ([\w-]+))? -->\n```(\w+)\n(.*?)```", re.S)


@dataclass(frozen=True)
class Snippet:
    page: Path
    kind: str
    name: str
    language: str
    code: str


def pages() -> list[Path]:
    """Every Markdown page of the site, the README (its home page) first."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def page_text(name: str) -> str:
    """A page's text by its path under docs/ (or README.md)."""
    return (ROOT / name).read_text() if name == "README.md" else (DOCS / name).read_text()


def snippets() -> list[Snippet]:
    found = []
    for page in pages():
        for kind, name, language, code in MARKED.findall(page.read_text()):
            found.append(Snippet(page, kind, name, language, code))
    return found


def snippet(kind: str, name: str) -> str:
    """The code of the one snippet marked ``<!-- kind: name -->`` on any page."""
    (found,) = [s.code for s in snippets() if (s.kind, s.name) == (kind, name)]
    return found


def reference_page(name: str) -> str:
    """A generated reference page's committed text."""
    return (REFERENCE / name).read_text()


def reference_generator() -> ModuleType:
    """scripts/gen_reference.py, a script rather than a package: loaded from its file."""
    if "gen_reference" not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            "gen_reference", ROOT / "scripts" / "gen_reference.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["gen_reference"] = module
        spec.loader.exec_module(module)
    return sys.modules["gen_reference"]
