"""One run, retried across languages: every write lands once.

The run's first attempt is made by the Go client and dies after three
writes; its retry, by the TypeScript client, dies after five; the next, by
the Python client, finishes; a last one by Go finds everything done. Each
agent runs the same plan, in its own process, against one real sidecar.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from actonce_client import Attempt, Client, Effect, Outcome, RawJSON
from actonce_client.ids import WriteType, create_identity, derive_id, thread_identity
from actonce_client.testing import LocalSidecar

RULE = "incident-bot"

# Every write type, and two creates of equal data (another key order, 2.0 for
# 2) that must stay two artifacts: occurrences 0 and 1.
WRITES: list[dict[str, Any]] = [
    {"op": "create_thread", "title": "Incident 7", "as": "thread"},
    {"op": "create", "kind": "ticket", "data": {"title": "Disk full", "severity": 2},
     "as": "ticket"},
    {"op": "edit", "artifact": "ticket", "path": "/status", "value": "open"},
    {"op": "notice", "thread": "thread", "text": "Filed {ticket}"},
    {"op": "create", "kind": "ticket", "data": {"severity": 2.0, "title": "Disk full"},
     "as": "twin"},
    {"op": "step", "tool": "page_oncall", "effect": "IDEMPOTENT_WRITE",
     "args": {"team": "storage"}, "result": {"paged": True}},
    {"op": "send", "thread": "thread", "text": "Paged storage about {ticket}"},
]  # fmt: skip


@pytest.fixture(scope="module")
def target() -> Iterator[str]:
    with LocalSidecar(send_allowlist=[RULE]) as sidecar:
        yield sidecar.target


@pytest.fixture(scope="module")
def agents(go_agents: Path, typescript_build: Path) -> dict[str, list[str]]:
    """The Go and TypeScript plan agents, built from the current sources (conftest.py)."""
    ts_agent = typescript_build / "test" / "plan-agent.js"
    return {"go": [str(go_agents / "planagent")], "typescript": ["node", str(ts_agent)]}


def _run_agent(
    command: list[str], target: str, plan: Path, stop_after: int
) -> list[dict[str, str]]:
    done = subprocess.run([*command, target, str(plan), str(stop_after)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    died = stop_after < len(WRITES)
    assert done.returncode == (3 if died else 0), done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def _run_python(client: Client, plan: dict[str, Any]) -> list[dict[str, str]]:
    """The same plan through the Python client, to the end."""
    attempt = client.begin(plan["run_id"], plan["rule"], checkpoint=plan["checkpoint"])
    named: dict[str, str] = {}
    lines = []
    for write in plan["writes"]:
        written_id, outcome = _perform(attempt, write, named)
        if "as" in write:
            named[write["as"]] = written_id
        lines.append({"op": write["op"], "id": written_id, "outcome": outcome.name})
    attempt.end()
    return lines


def _perform(attempt: Attempt, w: dict[str, Any], named: dict[str, str]) -> tuple[str, Outcome]:
    def expand(text: str) -> str:
        for name, written_id in named.items():
            text = text.replace("{" + name + "}", written_id)
        return text

    match w["op"]:
        case "create_thread":
            done = attempt.create_thread(w["title"])
        case "create":
            done = attempt.create(w["kind"], w["data"])
        case "edit":
            done = attempt.edit(named[w["artifact"]], w["path"], w["value"])
        case "notice":
            done = attempt.notice(named[w["thread"]], expand(w["text"]))
        case "send":
            done = attempt.send(named[w["thread"]], expand(w["text"]))
        case "step":
            args = RawJSON(json.dumps(w["args"]))
            step = attempt.begin_step(w["tool"], Effect[w["effect"]], args)
            if not step.done:
                attempt.end_step(step.id, w["result"])
            return step.id, step.outcome
        case other:
            raise ValueError(f"unknown op {other}")
    return done.id, done.outcome


def test_a_run_retried_across_languages_lands_every_write_once(
    target: str, agents: dict[str, list[str]], tmp_path: Path
) -> None:
    run_id = f"run-{uuid.uuid4()}"
    plan = {"run_id": run_id, "rule": RULE, "checkpoint": "cp-3", "writes": WRITES}
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(plan))

    go_first = _run_agent(agents["go"], target, plan_file, stop_after=3)
    ts_retry = _run_agent(agents["typescript"], target, plan_file, stop_after=5)
    with Client(target) as client:
        py_retry = _run_python(client, plan)
    go_last = _run_agent(agents["go"], target, plan_file, stop_after=len(WRITES))

    attempts = [go_first, ts_retry, py_retry, go_last]
    assert [len(a) for a in attempts] == [3, 5, 7, 7]
    # Each write has one id, whichever language made or retried it.
    for index in range(len(WRITES)):
        ids = {a[index]["id"] for a in attempts if len(a) > index}
        assert len(ids) == 1, (WRITES[index], ids)
    # Made once, by the first attempt that reached it; found done after that.
    outcomes = [[line["outcome"] for line in a] for a in attempts]
    done = "ALREADY_APPLIED"
    assert outcomes[0] == ["APPLIED"] * 3
    assert outcomes[1] == [done, done, "SKIPPED", "APPLIED", "APPLIED"]
    assert outcomes[2] == [done, done, "SKIPPED", done, done, "APPLIED", "APPLIED"]
    assert outcomes[3] == [done, done, "SKIPPED", done, done, done, done]

    # The ids are the ones the scheme derives, the same in every language.
    ticket_identity = create_identity("ticket", '{"title":"Disk full","severity":2}')
    derive: dict[str, Any] = dict(run_id=run_id, checkpoint="cp-3")
    assert py_retry[0]["id"] == derive_id(WriteType.THREAD, identity=thread_identity("Incident 7"),
                                          occurrence=0, **derive)  # fmt: skip
    assert py_retry[1]["id"] == derive_id(WriteType.CREATE, identity=ticket_identity,
                                          occurrence=0, **derive)  # fmt: skip
    assert py_retry[4]["id"] == derive_id(WriteType.CREATE, identity=ticket_identity,
                                          occurrence=1, **derive)  # fmt: skip

    # What the store holds: each write once, read by a run of the rule that owns it.
    thread, ticket, twin = py_retry[0]["id"], py_retry[1]["id"], py_retry[4]["id"]
    with Client(target) as client:
        reader = client.begin(f"reader-{uuid.uuid4()}", RULE)
        messages = reader.read_thread(thread)
        assert [(m.kind, m.text) for m in messages] == [
            ("notice", f"Filed {ticket}"),
            ("message", f"Paged storage about {ticket}"),
        ]
        filed = reader.read_artifact(ticket)
        assert (filed.data, filed.version) == ({"title": "Disk full", "severity": 2,
                                                "status": "open"}, 2)  # fmt: skip
        assert reader.read_artifact(twin).data == {"title": "Disk full", "severity": 2}
        reader.end()
