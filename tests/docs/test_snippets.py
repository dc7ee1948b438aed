"""Every snippet the pages mark as runnable runs: the ones marked `<!-- runnable -->` here,
against a live sidecar at ACTONCE_TARGET as an agent finds it; the framework guides' agents
and the MCP clients' configurations in the tests that need their frameworks, each of which
this file checks is there."""

from __future__ import annotations

import re

import pytest

from tests.docs.pages import ROOT, Snippet, pages, snippets
from tests.harness import RunningSidecar

RUNNABLE = [s for s in snippets() if s.kind == "runnable"]

# Where the snippets of the other kinds run, and how each test names the snippets it runs; a
# TypeScript guide's agent (an example named ts-...) runs from the client's tarball.
RUN_BY = {
    "example": (ROOT / "clients" / "python" / "tests" / "test_doc_agents.py", "{stem}"),
    "ts-example": (ROOT / "clients" / "crosslang" / "test_install_agents.py", '"{name}"'),
    "mcp": (ROOT / "tests" / "fronts" / "mcp", 'readme_snippet("{name}")'),
}


def test_the_pages_mark_runnable_snippets() -> None:
    assert RUNNABLE, "no page marks a snippet <!-- runnable -->"
    assert {s.kind for s in snippets()} == {"runnable", "example", "mcp"}


@pytest.mark.parametrize(
    "snippet", RUNNABLE, ids=lambda s: f"{s.page.relative_to(ROOT)}:{s.code[:30]!r}"
)
def test_a_runnable_snippet_runs(
    snippet: Snippet, sidecar: RunningSidecar, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert snippet.language == "python", f"{snippet.page}: only Python runs here"
    monkeypatch.setenv("ACTONCE_TARGET", f"127.0.0.1:{sidecar.port}")
    exec(compile(snippet.code, str(snippet.page), "exec"), {})


def test_every_other_marked_snippet_is_run_by_a_test() -> None:
    for snippet in snippets():
        if snippet.kind == "runnable":
            continue
        typescript = snippet.kind == "example" and snippet.name.startswith("ts-")
        where, form = RUN_BY["ts-example" if typescript else snippet.kind]
        texts = [p.read_text() for p in ([where] if where.is_file() else where.rglob("*.py"))]
        named = form.format(name=snippet.name, stem=f'"{snippet.name.removesuffix("-agent")}"')
        assert any(named in text for text in texts), f"{snippet.page}: {snippet.name} runs nowhere"


def test_no_snippet_is_marked_with_a_kind_nothing_runs() -> None:
    for page in pages():
        for kind in re.findall(r"<!-- ([\w-]+)(?::[^>]*)? -->\n```", page.read_text()):
            assert kind in {"runnable", "example", "mcp"}, f"{page}: <!-- {kind} --> runs nowhere"
