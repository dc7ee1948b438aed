"""The complete agent of docs/langgraph.md, run as it stands there: a scripted model
takes the place of init_chat_model's, a card processor that of the card API. The
run delivered twice opens its tickets and makes its charge once."""

from __future__ import annotations

import re
import sqlite3
import types
from pathlib import Path

import pytest
from card_processor import card_processor
from kill_loop import store_file
from scripted_model import DONE, ScriptedChatModel, turn

from actonce_client.testing import LocalSidecar

DOC = Path(__file__).resolve().parents[3] / "docs" / "langgraph.md"


def example() -> str:
    found = re.search(
        r"<!-- example: langgraph-agent -->\n```python\n(.*?)```", DOC.read_text(), re.S
    )
    assert found, "docs/langgraph.md has no complete agent"
    return found.group(1)


def user_code_lines(code: str) -> int:
    """Lines of code beyond the tools (between "# Tools" and "# The agent")."""
    before, rest = code.split("# Tools\n")
    _, after = rest.split("# The agent\n")
    lines = (before + after).splitlines()
    return sum(1 for line in lines if line.strip() and not line.strip().startswith("#"))


def test_the_complete_agent_is_at_most_40_lines_beyond_its_tools() -> None:
    assert user_code_lines(example()) <= 40


def test_the_complete_agent_does_its_work_once_when_a_job_is_delivered_twice(
    sidecar: LocalSidecar, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with card_processor() as (url, ledger):
        monkeypatch.setenv("ACTONCE_TARGET", sidecar.target)
        monkeypatch.setenv("CARD_API", url)
        agent = types.ModuleType("billing_agent")
        exec(compile(example(), str(DOC), "exec"), agent.__dict__)
        model = ScriptedChatModel(script=[
            turn(("call-1", "open_ticket", {"title": "Card declined twice"}),
                 ("call-2", "charge_card", {"customer": "doc-ada", "cents": 1200})),
            DONE,
        ])  # fmt: skip
        app = agent.build(model, str(tmp_path / "checkpoints.db"))
        job = {"run_id": "doc-run-1", "thread_id": "doc-thread-1", "text": "Bill Ada."}
        try:
            assert agent.handle(app, job) == "done"
            assert agent.handle(app, job) == "done"  # the queue delivers it again
        finally:
            agent.client.close()
        with sqlite3.connect(store_file(sidecar.data_dir)) as db:
            (tickets,) = db.execute(
                "SELECT count(*) FROM artifacts WHERE kind = 'ticket'"
                " AND json_extract(data_json, '$.title') = 'Card declined twice'"
            ).fetchone()
        assert tickets == 1
        assert [c["cents"] for c in ledger.charges_of("doc-ada")] == [1200]
