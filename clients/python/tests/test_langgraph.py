"""A LangGraph agent on actonce, its worker killed with SIGKILL after each of its
writes and the run delivered again: every write is in the store once, and every
charge is made once by the card processor, or is IN_DOUBT, never twice.

A real graph (StateGraph with ToolNode and the node's RetryPolicy, and the stock
create_agent) with a scripted chat model, checkpointed in SQLite files by the
langgraph-checkpoint-sqlite package, calling a real `actonce serve` over gRPC
and a card processor over HTTP. Each delivery runs in a process of its own,
forked from a worker that imported LangGraph once (tests/forking_worker.py), so
that a kill loop is quick.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import grpc
import pytest
from card_processor import Ledger, card_processor
from forking import Forks, forking_worker
from langchain_core.messages import ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph_worker import DONE, Job
from scripted_model import ScriptedChatModel, turn

from actonce_client import ActonceError, Client, FailureClass
from actonce_client.langgraph import Actonce, ToolCall, deliver, handle_tool_error, retry_policy
from actonce_client.testing import LocalSidecar

pytestmark = pytest.mark.timeout(120)


@dataclass
class World:
    sidecar: LocalSidecar
    client: Client
    processor: str
    ledger: Ledger
    folder: Path
    forks: Forks


@pytest.fixture(scope="module")
def world(sidecar: LocalSidecar, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with (
        card_processor() as (url, ledger),
        Client(sidecar.target) as client,
        forking_worker("langgraph_worker") as forks,
    ):
        yield World(sidecar, client, url, ledger, tmp_path_factory.mktemp("langgraph"), forks)


def new_job(world: World, scenario: str) -> Job:
    run_id = f"{scenario}-{uuid.uuid4().hex[:8]}"
    setup = world.client.begin(f"setup-{run_id}", "setup")
    thread = setup.create_thread(f"thread of {run_id}").id
    setup.end()
    folder = world.folder / run_id
    folder.mkdir()
    return Job(
        scenario=scenario, run_id=run_id, resume=False, target=world.sidecar.target,
        processor=world.processor, thread_id=thread,
        checkpoints=str(folder / "checkpoints.db"), result=str(folder / "result.json"),
    )  # fmt: skip


def deliveries(scenario: str) -> list[bool]:
    """The deliveries a run takes when nothing fails: resume flags, in order."""
    return [False, True] if scenario == "approval" else [False]


def run_all(world: World, job: Job, kill: tuple[int, int] | None = None) -> list[dict[str, Any]]:
    """Every delivery of the run; with ``kill=(i, k)``, delivery i is killed after
    its k-th write and delivered again, as the queue does when a lease expires."""
    results = []
    for i, resume in enumerate(deliveries(job.scenario)):
        this = replace(job, resume=resume)
        if kill is not None and kill[0] == i:
            assert world.forks.deliver(asdict(replace(this, kill_at=kill[1]))) is None, "not killed"
        result = world.forks.deliver(asdict(this))
        assert result is not None
        results.append(result)
    return results


def store_rows(world: World, sql: str, *args: str) -> list[tuple[str, ...]]:
    with sqlite3.connect(world.sidecar.data_dir / "store.db") as db:
        return db.execute(sql, args).fetchall()


@dataclass(frozen=True)
class Seen:
    """What one run left in the world."""

    tickets: tuple[str, ...]  # titles, sorted
    notices: tuple[str, ...]  # texts, sorted
    charges: tuple[tuple[str, int], ...]  # (customer, cents), sorted


def seen(world: World, job: Job) -> Seen:
    tickets = store_rows(
        world, "SELECT json_extract(data_json, '$.title') FROM artifacts"
        " WHERE kind = 'ticket' AND json_extract(data_json, '$.run') = ?", job.run_id,
    )  # fmt: skip
    notices = store_rows(world, "SELECT text FROM messages WHERE thread_id = ?", job.thread_id)
    with world.ledger.lock:
        charges = [(c["customer"], c["cents"]) for c in world.ledger.charges
                   if c["customer"].startswith(job.run_id)]  # fmt: skip
    return Seen(
        tuple(sorted(title for (title,) in tickets)),
        tuple(sorted(text for (text,) in notices)),
        tuple(sorted(charges)),
    )


def unprefixed(job: Job, found: Seen) -> Seen:
    """``found`` with the run's own prefix taken off its customers."""
    cut = len(job.run_id) + 1
    return replace(found, charges=tuple((c[cut:], n) for c, n in found.charges))


EXPECTED = {
    "parallel": Seen(("Disk full", "Disk full"),
                     ("charged ada 500", "opened a ticket: Disk full",
                      "opened a ticket: Disk full"),
                     (("ada", 500),)),
    "create_agent": Seen(("Disk full",), ("charged ada 500", "opened a ticket: Disk full"),
                         (("ada", 500),)),
    "retry": Seen((), ("charged bob-reset 700", "looking into it"), (("bob-reset", 700),)),
    "approval": Seen(("Refund later",), ("opened a ticket: Refund later",), (("cy", 900),)),
}  # fmt: skip


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_each_write_once_whichever_write_the_worker_is_killed_after(
    world: World, scenario: str
) -> None:
    clean = new_job(world, scenario)
    results = run_all(world, clean)
    assert [r["state"] for r in results][-1] == "done"
    assert unprefixed(clean, seen(world, clean)) == EXPECTED[scenario]
    kills = [(i, k) for i, r in enumerate(results) for k in range(1, int(str(r["writes"])) + 1)]
    assert kills, "the scenario makes writes"
    for kill in kills:
        job = new_job(world, scenario)
        last = run_all(world, job, kill)[-1]
        found = unprefixed(job, seen(world, job))
        if last["state"] == "IN_DOUBT":
            # A charge with no idempotency key was made, and the worker died before
            # it heard: it is not made again, and a person decides.
            assert found.charges == EXPECTED[scenario].charges, kill
        else:
            assert last["state"] == "done", (kill, last)
            assert found == EXPECTED[scenario], kill


def small_agent(client: Client, checkpointer: Any) -> Any:
    """One tool that edits an artifact that does not exist, a model that calls it once."""
    actonce = Actonce(client, rule="editor")

    @actonce.tool
    def retitle(artifact_id: str, title: str, call: ToolCall) -> str:
        """Retitle an artifact."""
        return call.attempt.edit(artifact_id, "/title", title).id

    model = ScriptedChatModel(
        script=[turn(("call-1", "retitle", {"artifact_id": "art_missing", "title": "x"})), DONE]
    )
    graph = StateGraph(MessagesState)
    graph.add_node("model", lambda state: {"messages": [model.invoke(state["messages"])]})
    graph.add_node("tools", ToolNode([retitle], handle_tool_errors=handle_tool_error))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    return graph.compile(checkpointer=checkpointer)


def test_a_refused_call_goes_back_to_the_model_as_the_tool_message(
    client: Client, tmp_path: Path
) -> None:
    with SqliteSaver.from_conn_string(str(tmp_path / "checkpoints.db")) as saver:
        app = small_agent(client, saver)
        out = deliver(app, f"run-{uuid.uuid4().hex}", "thread-1", {"messages": [("user", "go")]})
    answered = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert len(answered) == 1 and str(answered[0].content).startswith("refused: NOT_FOUND")
    assert out["messages"][-1].content == "done"


def error(failure_class: FailureClass, reason: str) -> ActonceError:
    return ActonceError(
        "x", code=grpc.StatusCode.FAILED_PRECONDITION, reason=reason, failure_class=failure_class
    )


@pytest.mark.parametrize(
    "failure",
    [
        error(FailureClass.UNKNOWN, "IN_DOUBT"),
        error(FailureClass.RETRYABLE, "LEASE_EXPIRED"),
        error(FailureClass.PERMANENT, "FORBIDDEN"),
        ValueError("a bug"),
    ],
)
def test_every_error_but_a_refusal_is_raised_past_the_model(failure: Exception) -> None:
    with pytest.raises(type(failure)):
        handle_tool_error(failure)


def test_the_retry_policy_retries_retryable_and_the_listed_transient_errors_only() -> None:
    retry_on = retry_policy(transient=(ConnectionError,)).retry_on
    assert callable(retry_on)
    assert retry_on(error(FailureClass.RETRYABLE, "ATTEMPT_FENCED"))
    assert retry_on(ConnectionResetError())
    for never in [error(FailureClass.UNKNOWN, "IN_DOUBT"),
                  error(FailureClass.UNKNOWN, "AUDIT_PERSISTENCE_FAILED"),
                  error(FailureClass.PERMANENT, "FORBIDDEN"),
                  error(FailureClass.REFUSED, "NOT_FOUND"), ValueError("a bug")]:  # fmt: skip
        assert not retry_on(never), never


def test_deliver_refuses_a_checkpointer_that_dies_with_the_worker(client: Client) -> None:
    for checkpointer in (InMemorySaver(), None):
        app = small_agent(client, checkpointer)
        with pytest.raises(ValueError, match="durable checkpointer"):
            deliver(app, "run-1", "thread-1", {"messages": [("user", "go")]})


def test_a_tool_names_its_tool_call_parameter_by_type(client: Client) -> None:
    actonce = Actonce(client, rule="editor")

    def no_call(title: str) -> str:
        """No ToolCall."""
        return title

    with pytest.raises(TypeError, match="ToolCall"):
        actonce.tool(no_call)
