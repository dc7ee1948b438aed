"""The kill loop that the agent frameworks' suites share: a run delivered by a
worker process killed with SIGKILL after its k-th write, for every k, then
delivered again; each write must be in the store once, and each charge made
once by the card processor, or IN_DOUBT, never twice.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from card_processor import Ledger, card_processor
from delivery import Job
from forking import Forks, forking_worker

from actonce_client import Client
from actonce_client.testing import LocalSidecar


@dataclass
class World:
    sidecar: LocalSidecar
    client: Client
    processor: str
    ledger: Ledger
    folder: Path
    forks: Forks


@contextmanager
def world_of(sidecar: LocalSidecar, folder: Path, worker_module: str) -> Iterator[World]:
    """A card processor, and a forking worker of ``worker_module`` (its ``run``)."""
    with (
        card_processor() as (url, ledger),
        Client(sidecar.target) as client,
        forking_worker(worker_module) as forks,
    ):
        yield World(sidecar, client, url, ledger, folder, forks)


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


def store_file(data_dir: Path) -> Path:
    """The embedded store's file: the ledger's own (audit.db) in a data folder of one file."""
    own = data_dir / "store.db"
    return own if own.exists() else data_dir / "audit.db"


def store_rows(world: World, sql: str, *args: str) -> list[tuple[str, ...]]:
    with sqlite3.connect(store_file(world.sidecar.data_dir)) as db:
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


# What the scenarios both frameworks' workers run leave, whatever the kills.
SHARED_EXPECTED = {
    "parallel": Seen(("Disk full", "Disk full"),
                     ("charged ada 500", "opened a ticket: Disk full",
                      "opened a ticket: Disk full"),
                     (("ada", 500),)),
    "retry": Seen((), ("charged bob-reset 700", "looking into it"), (("bob-reset", 700),)),
    "approval": Seen(("Refund later",), ("opened a ticket: Refund later",), (("cy", 900),)),
}  # fmt: skip


def check_every_kill(world: World, scenario: str, expected: Seen) -> int:
    """Run ``scenario`` once cleanly, then once per write it makes with the worker
    killed after that write; each run must leave ``expected``. The number of kills."""
    clean = new_job(world, scenario)
    results = run_all(world, clean)
    assert [r["state"] for r in results][-1] == "done"
    assert unprefixed(clean, seen(world, clean)) == expected
    kills = [(i, k) for i, r in enumerate(results) for k in range(1, int(str(r["writes"])) + 1)]
    assert kills, "the scenario makes writes"
    for kill in kills:
        job = new_job(world, scenario)
        last = run_all(world, job, kill)[-1]
        found = unprefixed(job, seen(world, job))
        if last["state"] == "IN_DOUBT":
            # A charge with no idempotency key was made, and the worker died before
            # it heard: it is not made again, and a person decides.
            assert found.charges == expected.charges, kill
        else:
            assert last["state"] == "done", (kill, last)
            assert found == expected, kill
    return len(kills)
