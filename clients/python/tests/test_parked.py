"""A kill during one sibling's call parks only the calls that were sent.

One model turn charges ada, bob and cy at once, none with an idempotency key (a
non-idempotent step each), in each framework's real runner. The worker is killed with
SIGKILL as bob's charge lands, after ada's ended and while cy's tool has started but not
yet sent its call (tests/delivery.py: Siblings). A step begins when its call is sent, so
only bob's is in doubt: the redelivery answers Parked naming bob's step alone, and makes
cy's charge; after ``actonce audit resolve`` the next delivery goes on, and each customer
is charged once.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import asdict, replace
from typing import Any

import pytest
from delivery import Job, Siblings
from kill_loop import World, new_job, world_of

from actonce_client.testing import LocalSidecar, actonce_command

pytestmark = pytest.mark.timeout(180)

WORKERS = ("langgraph_worker", "agents_worker", "pydantic_ai_worker")


@pytest.fixture(scope="module", params=WORKERS)
def world(
    request: pytest.FixtureRequest, sidecar: LocalSidecar, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    worker = str(request.param)
    with world_of(sidecar, tmp_path_factory.mktemp(worker), worker) as world:
        yield world


def audit(world: World, *args: str) -> subprocess.CompletedProcess[str]:
    ledger = str(world.sidecar.data_dir / "audit.db")
    return subprocess.run([*actonce_command(), "audit", *args, "--audit-db", ledger],
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def pending_steps(world: World, job: Job) -> list[dict[str, Any]]:
    done = audit(world, "pending", "--json")
    assert done.returncode in (0, 3), done.stderr
    items = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    return [item for item in items if item["run_id"] == job.run_id]


def sent(job: Job) -> dict[str, list[str]]:
    """Each customer's step ids, as their calls were sent."""
    found: dict[str, list[str]] = {}
    for line in Siblings(job).sent.read_text().splitlines():
        customer, step_id = line.split()
        found.setdefault(customer, []).append(step_id)
    return found


def charged(world: World, job: Job) -> dict[str, int]:
    customers = [customer[len(job.run_id) + 1 :] for customer, _ in world.charged(job.run_id)]
    return {customer: customers.count(customer) for customer in sorted(set(customers))}


def test_a_kill_during_one_siblings_call_parks_only_the_calls_that_were_sent(
    world: World,
) -> None:
    job = new_job(world, "siblings")
    assert world.forks.deliver(asdict(replace(job, kill_in_flight=True))) is None
    # ada's charge ended, bob's was sent and never ended, cy's was never sent.
    assert sorted(sent(job)) == ["ada", "bob"]
    assert charged(world, job) == {"ada": 1, "bob": 1}
    (bob,) = sent(job)["bob"]

    parked = world.forks.deliver(asdict(job))
    assert parked is not None
    assert (parked["state"], parked["parked"]) == ("IN_DOUBT", [bob])
    assert [(i["id"], i["tool"]) for i in pending_steps(world, job)] == [(bob, "charge_unkeyed")]
    # The sibling that had not been sent is not in doubt: the redelivery made it.
    assert charged(world, job) == {"ada": 1, "bob": 1, "cy": 1}

    decision = ["--ran", "--result-json", '"ch_bob"', "--by", "ops@example.com",
                "--reason", "the processor shows the charge"]  # fmt: skip
    resolved = audit(world, "resolve", bob, *decision)
    assert resolved.returncode == 0, resolved.stderr
    done = world.forks.deliver(asdict(job))
    assert done is not None
    assert (done["state"], done["parked"]) == ("done", [])
    assert pending_steps(world, job) == []
    assert charged(world, job) == {"ada": 1, "bob": 1, "cy": 1}
