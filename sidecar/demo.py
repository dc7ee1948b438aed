"""``actonce demo``: a run of a scripted incident agent, killed mid-run and retried.

It starts a sidecar in this process (embedded store and ledger in a folder that
is kept, ``.actonce-demo`` by default), runs the agent in a process of its own,
kills it after three writes, starts the run again from its checkpoint, and
prints what landed with which outcome, then how to open the run's audit with
``actonce audit show`` and the console. The second attempt makes the same
writes; the derived ids let the sidecar tell which ones the first already made.

The agent speaks to the sidecar through the generated stubs the sidecar ships,
so the demo needs nothing but the project itself; the clients in clients/ wrap
the same calls with a request id, retries and typed errors.

Run as ``python -m sidecar.demo TARGET RUN_ID CHECKPOINT``, this module is the
agent itself: one JSON line per write on stdout.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc
from actonce_api.v1 import types_pb2

from sidecar.assembly.server import create_server
from sidecar.assembly.sidecar import Sidecar
from sidecar.config import Config
from sidecar.ops import logs

RULE = "incident-bot"
# Where the demo keeps its embedded store and its ledger, so that the run can be opened
# afterwards; each run has an id of its own, so runs accumulate side by side.
DATA_DIR = Path(".actonce-demo")
CHECKPOINT = "triaged"
KILL_AFTER = 3
# A model takes a while between tool calls; the kill lands in such a pause.
THINK_SECONDS = 0.2


class Agent:
    """One attempt of the run, its calls each with a request id of their own."""

    def __init__(self, stub: pb_grpc.RunActionsServiceStub, run_id: str, checkpoint: str) -> None:
        self.stub = stub
        begun = stub.BeginAttempt(
            pb.BeginAttemptRequest(run_id=run_id, rule=RULE, checkpoint=checkpoint)
        )
        self.attempt_id: str = begun.attempt_id

    def call(self, rpc: str, request: Any) -> Any:
        request.attempt_id = self.attempt_id
        if hasattr(request, "request_id"):
            request.request_id = uuid.uuid4().hex
        return getattr(self.stub, rpc)(request, timeout=10)


Write = Callable[[Agent, dict[str, str]], tuple[str, str]]


def _outcome(answer: Any) -> str:
    return str(types_pb2.Outcome.Name(answer.outcome)).removeprefix("OUTCOME_")


def _plan() -> list[tuple[str, Write]]:
    """The agent's writes, in order: (label, write). Later writes use earlier ids."""

    def create_thread(a: Agent, ids: dict[str, str]) -> tuple[str, str]:
        w = a.call("CreateThread", pb.CreateThreadRequest(title="Disk full on db-3"))
        ids["thread"] = w.thread_id
        return w.thread_id, _outcome(w)

    def create_ticket(a: Agent, ids: dict[str, str]) -> tuple[str, str]:
        data = json.dumps({"title": "Disk full on db-3", "severity": 2})
        w = a.call("Create", pb.CreateRequest(kind="ticket", data_json=data))
        ids["ticket"] = w.id
        return w.id, _outcome(w)

    def edit(path: str, value: str) -> Write:
        def write(a: Agent, ids: dict[str, str]) -> tuple[str, str]:
            request = pb.EditRequest(
                artifact_id=ids["ticket"], path=path, value_json=json.dumps(value)
            )
            return ids["ticket"], _outcome(a.call("Edit", request))

        return write

    def page_oncall(a: Agent, ids: dict[str, str]) -> tuple[str, str]:
        request = pb.BeginStepRequest(
            tool="page_oncall",
            effect=types_pb2.TOOL_EFFECT_IDEMPOTENT_WRITE,
            args_json=json.dumps({"team": "storage"}),
        )
        step = a.call("BeginStep", request)
        if step.outcome == types_pb2.OUTCOME_APPLIED:  # not paged by an earlier attempt
            result = json.dumps({"paged": "storage-oncall"})
            a.call("EndStep", pb.EndStepRequest(step_id=step.step_id, result_json=result))
        return step.step_id, _outcome(step)

    def notice(a: Agent, ids: dict[str, str]) -> tuple[str, str]:
        text = f"Filed {ids['ticket']}; paged storage on-call."
        w = a.call("Notice", pb.NoticeRequest(thread_id=ids["thread"], text=text))
        return w.message_id, _outcome(w)

    def send(a: Agent, ids: dict[str, str]) -> tuple[str, str]:
        text = "Storage on-call: please confirm the cleanup plan."
        w = a.call("Send", pb.SendRequest(thread_id=ids["thread"], text=text))
        return w.message_id, _outcome(w)

    return [
        ("create_thread 'Disk full on db-3'", create_thread),
        ("create ticket", create_ticket),
        ("edit /status = investigating", edit("/status", "investigating")),
        ("step page_oncall", page_oncall),
        ("notice 'Filed ...; paged ...'", notice),
        ("edit /assignee = storage-oncall", edit("/assignee", "storage-oncall")),
        ("send 'please confirm ...'", send),
    ]


def agent(argv: Sequence[str]) -> int:
    """The scripted agent: one attempt of the run, a JSON line per write."""
    target, run_id, checkpoint = argv
    ids: dict[str, str] = {}
    with grpc.insecure_channel(target) as channel:
        attempt = Agent(pb_grpc.RunActionsServiceStub(channel), run_id, checkpoint)
        for label, write in _plan():
            written_id, outcome = write(attempt, ids)
            print(json.dumps({"write": label, "id": written_id, "outcome": outcome}), flush=True)
            time.sleep(THINK_SECONDS)
        attempt.call("EndAttempt", pb.EndAttemptRequest())
    return 0


def _attempt(target: str, run_id: str, *, kill_after: int | None) -> list[dict[str, str]]:
    """Run the agent as a process of its own; SIGKILL it after ``kill_after`` writes."""
    command = [sys.executable, "-m", "sidecar.demo", target, run_id, CHECKPOINT]
    lines: list[dict[str, str]] = []
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as process:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(json.loads(line))
            if len(lines) == kill_after:
                process.kill()
                break
        process.wait()
    return lines


class _LocalSidecar:
    """``actonce serve`` with the embedded store, in a thread of this process."""

    def __init__(self, data_dir: Path) -> None:
        config = replace(
            Config(listen="127.0.0.1:0", data_dir=data_dir), send_allowlist=frozenset({RULE})
        )
        self.audit_db = config.audit_path
        # The table below is the demo's output; the sidecar's own lines would drown it.
        # Not even a warning: stopping at once, the drain warns that it had no time to
        # see the (finished) callers go quiet, which is no news here.
        logs.configure("error")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.sidecar, port = self._run(self._start(config))
        self.target = f"127.0.0.1:{port}"

    def _run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(60)

    @staticmethod
    async def _start(config: Config) -> tuple[Sidecar, int]:
        sidecar, port = await create_server(config)
        await sidecar.start()
        return sidecar, port

    def stop(self) -> None:
        self._run(self.sidecar.stop(0))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def run_demo(data_dir: Path = DATA_DIR) -> int:
    """``actonce demo``: 0 when every write landed once, 1 otherwise."""
    run_id = f"run-demo-{secrets.token_hex(3)}"
    print("actonce demo: one run of an incident agent, killed mid-run and retried.\n")
    started = time.monotonic()
    data_dir.mkdir(parents=True, exist_ok=True)
    local = _LocalSidecar(data_dir)
    try:
        print(f"  sidecar    {local.target}, embedded store and ledger in {data_dir}/")
        print(f"  run        {run_id}, rule {RULE}, from checkpoint {CHECKPOINT!r}\n")
        first = _attempt(local.target, run_id, kill_after=KILL_AFTER)
        print(f"  attempt 1  killed (SIGKILL) after {len(first)} of {len(_plan())} writes")
        second = _attempt(local.target, run_id, kill_after=None)
        print(f"  attempt 2  the queue retried the run from checkpoint {CHECKPOINT!r}\n")
        thread, ticket = second[0]["id"], second[1]["id"]
        messages, artifact = _read_back(local.target, run_id, thread, ticket)
    finally:
        local.stop()
    _table(first, second)
    kinds = ", ".join(m.kind for m in messages)
    print(f"\n  in the store: thread {thread}: {len(messages)} messages ({kinds})")
    print(f"                ticket {ticket}: version {artifact.version}")
    landed_once = _landed_once(first, second, len(messages), json.loads(artifact.data_json))
    verdict = "every write landed once" if landed_once else "SOME WRITE DID NOT LAND ONCE"
    print(f"\n  {verdict} ({time.monotonic() - started:.1f} s)")
    _how_to_open(run_id, local.audit_db)
    return 0 if landed_once else 1


def _how_to_open(run_id: str, audit_db: Path) -> None:
    """The commands that open what the run left in the ledger, as this program is called."""
    program = sys.argv[0] if os.path.basename(sys.argv[0]) == "actonce" else "actonce"
    print(f"\n  The ledger is kept in {audit_db}. Open the run's audit with")
    print(f"    {program} audit show {run_id} --audit-db {audit_db}")
    print("  or in the console (then http://127.0.0.1:8080/runs/" + run_id + "):")
    print(f"    {program} console --audit-db {audit_db}")


def _read_back(target: str, run_id: str, thread: str, ticket: str) -> tuple[Any, Any]:
    with grpc.insecure_channel(target) as channel:
        reader = Agent(pb_grpc.RunActionsServiceStub(channel), f"{run_id}-reader", "")
        messages = reader.call("Read", pb.ReadRequest(thread_id=thread)).messages
        artifact = reader.call("Read", pb.ReadRequest(artifact_id=ticket)).artifact
        reader.call("EndAttempt", pb.EndAttemptRequest())
    return messages, artifact


def _table(first: list[dict[str, str]], second: list[dict[str, str]]) -> None:
    print(f"  {'write':<36} {'id':<31} {'attempt 1':<14} attempt 2")
    for n, row in enumerate(second):
        before = first[n]["outcome"] if n < len(first) else "-"
        print(f"  {row['write']:<36} {row['id']:<31} {before:<14} {row['outcome']}")
    print(
        "\n  APPLIED: made now. ALREADY_APPLIED: an earlier attempt made it (its id was used)."
        "\n  SKIPPED: the edit's value was already there. -: the attempt was dead by then."
    )


def _landed_once(
    first: list[dict[str, str]], second: list[dict[str, str]], messages: int, data: Any
) -> bool:
    same_ids = all(a["id"] == b["id"] for a, b in zip(first, second, strict=False))
    # Made by the attempt that first reached it; found done by the retry.
    made_once = all(
        row["outcome"] in (("ALREADY_APPLIED", "SKIPPED") if n < len(first) else ("APPLIED",))
        for n, row in enumerate(second)
    )
    expected = {
        "title": "Disk full on db-3",
        "severity": 2,
        "status": "investigating",
        "assignee": "storage-oncall",
    }
    return same_ids and made_once and messages == 2 and data == expected


if __name__ == "__main__":
    raise SystemExit(agent(sys.argv[1:]))
