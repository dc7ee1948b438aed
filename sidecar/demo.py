"""``actonce demo``: a run of a scripted incident agent, killed mid-run and retried.

It starts a sidecar (embedded store, data in a temporary folder), runs the
agent in a process of its own through the Python client (clients/python),
kills it after three writes, starts the run again from its checkpoint, and
prints what landed with which outcome. The second attempt makes the same
writes; the derived ids let the sidecar tell which ones the first already made.

Run as ``python -m sidecar.demo TARGET RUN_ID CHECKPOINT``, this module is the
agent itself: one JSON line per write on stdout.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from actonce_client import Attempt

RULE = "incident-bot"
CHECKPOINT = "triaged"
KILL_AFTER = 3
# A model takes a while between tool calls; the kill lands in such a pause.
THINK_SECONDS = 0.2

Step = tuple[str, Callable[["Attempt", dict[str, str]], tuple[str, str]]]


def _plan() -> list[Step]:
    """The agent's writes, in order: (label, write). Later writes use earlier ids."""
    from actonce_client import Effect

    def create_thread(a: Attempt, ids: dict[str, str]) -> tuple[str, str]:
        w = a.create_thread("Disk full on db-3")
        ids["thread"] = w.id
        return w.id, w.outcome.name

    def create_ticket(a: Attempt, ids: dict[str, str]) -> tuple[str, str]:
        w = a.create("ticket", {"title": "Disk full on db-3", "severity": 2})
        ids["ticket"] = w.id
        return w.id, w.outcome.name

    def edit(path: str, value: str) -> Callable[[Attempt, dict[str, str]], tuple[str, str]]:
        def write(a: Attempt, ids: dict[str, str]) -> tuple[str, str]:
            w = a.edit(ids["ticket"], path, value)
            return w.id, w.outcome.name

        return write

    def page_oncall(a: Attempt, ids: dict[str, str]) -> tuple[str, str]:
        step = a.begin_step("page_oncall", Effect.IDEMPOTENT_WRITE, {"team": "storage"})
        if not step.done:  # an earlier attempt paged already: do not page twice
            a.end_step(step.id, {"paged": "storage-oncall"})
        return step.id, step.outcome.name

    def notice(a: Attempt, ids: dict[str, str]) -> tuple[str, str]:
        w = a.notice(ids["thread"], f"Filed {ids['ticket']}; paged storage on-call.")
        return w.id, w.outcome.name

    def send(a: Attempt, ids: dict[str, str]) -> tuple[str, str]:
        w = a.send(ids["thread"], "Storage on-call: please confirm the cleanup plan.")
        return w.id, w.outcome.name

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
    from actonce_client import Client

    target, run_id, checkpoint = argv
    ids: dict[str, str] = {}
    with Client(target) as client:
        attempt = client.begin(run_id, RULE, checkpoint=checkpoint)
        for label, write in _plan():
            written_id, outcome = write(attempt, ids)
            print(json.dumps({"write": label, "id": written_id, "outcome": outcome}), flush=True)
            time.sleep(THINK_SECONDS)
        attempt.end()
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


def run_demo() -> int:
    """``actonce demo``: 0 when every write landed once, 1 otherwise."""
    try:
        from actonce_client import Client
        from actonce_client.testing import LocalSidecar
    except ImportError:
        print(
            "actonce demo needs the Python client: pip install './clients/python[testing]'",
            file=sys.stderr,
        )
        return 2
    run_id = f"run-demo-{secrets.token_hex(3)}"
    print("actonce demo: one run of an incident agent, killed mid-run and retried.\n")
    started = time.monotonic()
    with LocalSidecar(send_allowlist=[RULE], command=[sys.executable, "-m", "sidecar.cli"]) as s:
        print(f"  sidecar    {s.target}, embedded store in {s.data_dir}")
        print(f"  run        {run_id}, rule {RULE}, from checkpoint {CHECKPOINT!r}\n")
        first = _attempt(s.target, run_id, kill_after=KILL_AFTER)
        print(f"  attempt 1  killed (SIGKILL) after {len(first)} of {len(_plan())} writes")
        second = _attempt(s.target, run_id, kill_after=None)
        print(f"  attempt 2  the queue retried the run from checkpoint {CHECKPOINT!r}\n")
        with Client(s.target) as client:
            reader = client.begin(f"{run_id}-reader", "demo-reader")
            thread, ticket = second[0]["id"], second[1]["id"]
            messages = reader.read_thread(thread)
            artifact = reader.read_artifact(ticket)
            reader.end()
    _table(first, second)
    kinds = ", ".join(m.kind for m in messages)
    print(f"\n  in the store: thread {thread}: {len(messages)} messages ({kinds})")
    print(f"                ticket {ticket}: version {artifact.version}")
    landed_once = _landed_once(first, second, len(messages), artifact.data)
    verdict = "every write landed once" if landed_once else "SOME WRITE DID NOT LAND ONCE"
    print(f"\n  {verdict} ({time.monotonic() - started:.1f} s)")
    return 0 if landed_once else 1


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
    expected = {"title": "Disk full on db-3", "severity": 2, "status": "investigating",
                "assignee": "storage-oncall"}  # fmt: skip
    return same_ids and made_once and messages == 2 and data == expected


if __name__ == "__main__":
    raise SystemExit(agent(sys.argv[1:]))
