"""The kill loop that the agent frameworks' suites and the scenario grid share: a run
delivered by a worker process killed with SIGKILL after its k-th write, for every k,
and as its m-th model call starts, for every m, then delivered again; each write must
be in the store once, and each charge made once by the card processor, or in doubt
and made once (the run parked), never twice, never lost.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from card_processor import Ledger, card_processor
from delivery import Job, canonical
from forking import Forks, forking_worker

from actonce_client import Client
from actonce_client.testing import LocalSidecar

WORKER_RULE = "billing-agent"  # every framework's worker's rule

# The charges a run made: (customer, cents) each, of the customers its run id prefixes.
Charged = Callable[[str], list[tuple[str, int]]]


@dataclass
class World:
    sidecar: LocalSidecar
    client: Client
    processor: str  # where the worker's charges go: the card processor, or an MCP server
    charged: Charged
    folder: Path
    forks: Forks
    ledger: Ledger | None = None  # the card processor's, when it is the card processor


def charged_by(ledger: Ledger) -> Charged:
    def charged(run_id: str) -> list[tuple[str, int]]:
        with ledger.lock:
            return [(c["customer"], c["cents"]) for c in ledger.charges
                    if c["customer"].startswith(run_id)]  # fmt: skip

    return charged


@contextmanager
def world_of(sidecar: LocalSidecar, folder: Path, worker_module: str) -> Iterator[World]:
    """A card processor, and a forking worker of ``worker_module`` (its ``run``)."""
    with (
        card_processor() as (url, ledger),
        Client(sidecar.target) as client,
        forking_worker(worker_module) as forks,
    ):
        yield World(sidecar, client, url, charged_by(ledger), folder, forks, ledger)


def new_job(world: World, scenario: str) -> Job:
    run_id = f"{scenario}-{uuid.uuid4().hex[:8]}"
    # The thread belongs to the workers' rule, whose notices go to it: a thread is its
    # creating rule's own.
    setup = world.client.begin(f"setup-{run_id}", WORKER_RULE)
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


@dataclass(frozen=True)
class Kill:
    """Where a delivery is killed: delivery ``delivery``, after its ``write``-th write or
    as its ``model_call``-th model call starts."""

    delivery: int
    write: int = 0
    model_call: int = 0


def run_all(world: World, job: Job, kill: Kill | None = None) -> list[dict[str, Any]]:
    """Every delivery of the run; with ``kill``, that delivery is killed there and
    delivered again, as the queue does when a worker dies or its lease expires."""
    results = []
    for i, resume in enumerate(deliveries(job.scenario)):
        this = replace(job, resume=resume)
        if kill is not None and kill.delivery == i:
            killed = replace(this, kill_at=kill.write, kill_at_model=kill.model_call)
            assert world.forks.deliver(asdict(killed)) is None, f"not killed: {kill}"
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
    charges = world.charged(job.run_id)
    return Seen(
        tuple(sorted(canonical(title) for (title,) in tickets)),
        tuple(sorted(canonical(text) for (text,) in notices)),
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


@dataclass
class Tally:
    """What the kills of one scenario did: how many, and how many runs duplicated a
    write, lost one, or parked (a charge in doubt, made once)."""

    kills: int = 0
    duplicates: int = 0
    losses: int = 0
    parked: int = 0
    failures: list[str] = field(default_factory=list)

    def add(self, kill: Kill | None, expected: Seen, found: Seen, state: str) -> None:
        if kill is not None:
            self.kills += 1
        parked = state == "IN_DOUBT"
        self.parked += parked
        wanted = replace(expected, tickets=(), notices=()) if parked else expected
        got = replace(found, tickets=(), notices=()) if parked else found
        # A parked run stopped before its later writes: only its charges must be whole.
        if got == wanted and (parked or state == "done"):
            return
        more = any(_more(g, w) for g, w in zip(_parts(got), _parts(wanted), strict=True))
        fewer = any(_more(w, g) for g, w in zip(_parts(got), _parts(wanted), strict=True))
        self.duplicates += more
        self.losses += fewer or not more
        self.failures.append(f"{kill}: {state}: {found} != {expected}")


def _parts(seen: Seen) -> list[tuple[Any, ...]]:
    return [seen.tickets, seen.notices, seen.charges]


def _more(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """Whether ``a`` holds something more often than ``b`` does."""
    return any(a.count(x) > b.count(x) for x in set(a))


def kills_of(results: list[dict[str, Any]]) -> list[Kill]:
    """A kill after every write and as every model call starts, of every delivery."""
    found = []
    for i, result in enumerate(results):
        found += [Kill(i, write=k) for k in range(1, int(result["writes"]) + 1)]
        found += [Kill(i, model_call=m) for m in range(1, int(result.get("model_calls", 0)) + 1)]
    return found


def tally_every_kill(world: World, scenario: str, expected: Seen, *, every: int = 1) -> Tally:
    """Run ``scenario`` once cleanly, then once per kill (every ``every``-th of them: the
    quick form), each delivered again until done; what each run left, tallied."""
    tally = Tally()
    clean = new_job(world, scenario)
    results = run_all(world, clean)
    tally.add(None, expected, unprefixed(clean, seen(world, clean)), str(results[-1]["state"]))
    kills = kills_of(results)
    assert kills, "the scenario makes writes"
    for kill in kills[::every]:
        job = new_job(world, scenario)
        last = run_all(world, job, kill)[-1]
        tally.add(kill, expected, unprefixed(job, seen(world, job)), str(last["state"]))
    return tally


# The suites' quick form of the grid: every third kill (`make grid` makes every one).
QUICK = 3


def check_every_kill(world: World, scenario: str, expected: Seen, *, every: int = QUICK) -> int:
    """:func:`tally_every_kill`, every ``every``-th kill: no run duplicates or loses a
    write. The number of kills."""
    tally = tally_every_kill(world, scenario, expected, every=every)
    assert not tally.failures, "\n".join(tally.failures)
    return tally.kills
