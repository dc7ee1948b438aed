"""The person on call: ``actonce audit pending`` and ``actonce audit resolve``, as a shell runs
them, beside the payments upstream's own record of what it charged.

While a gateway charge is under way or in doubt, the operator lists what is pending about
once a second. A gateway charge listed is decided from what the upstream counted for that
customer, read after the listing: charged, ``--ran`` with the result the upstream gave;
not charged, ``--did-not-run``. A listing says the step is decidable, so that no call of it
may still be under way: what the upstream counts then is what it will count, unless the
sidecar was wrong to list it. A decision the ledger refuses (a call that may still be under
way) is tried again at the next listing. On PostgreSQL the operator's commands may run under
``faketime`` with a clock minutes off the ledger's.

Every decision the ledger took is recorded with what the operator saw, for the checker;
the agent whose charge is in doubt waits for its run's decision and then delivers the run
again.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from chaos.plan_writes import GATEWAY_TOOL
from chaos.upstream import Upstream, recorded_result
from tests.helpers.env import scrubbed_env

POLL_SECONDS = 1.0
RAN = "ran"
DID_NOT_RUN = "did_not_run"


@dataclass(frozen=True)
class Decision:
    """A decision the ledger accepted: on which step, which, and what the upstream showed."""

    run_id: str
    step_id: str
    decision: str
    counted: int  # the upstream's charges of the customer when the operator looked
    at: float  # time.time() when the ledger accepted it


@dataclass
class Listing:
    """``actonce audit pending --json``: its exit code and its items."""

    code: int
    items: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""


def audit_command(args: Sequence[str], ledger: Sequence[str], prefix: Sequence[str]) -> list[str]:
    return [*prefix, sys.executable, "-m", "sidecar.cli", "audit", *args, *ledger]


def pending(ledger: Sequence[str], prefix: Sequence[str] = ()) -> Listing:
    """The pending items as the CLI lists them; exit code 2 (the ledger could not be read, a
    frozen SQLite writer holding its lock) leaves the items empty."""
    done = subprocess.run(
        audit_command(["pending", "--json"], ledger, prefix),
        capture_output=True,
        text=True,
        timeout=120,
        env=scrubbed_env(),
        check=False,
    )
    if done.returncode not in (0, 3):
        return Listing(done.returncode, error=done.stderr.strip()[-500:])
    items = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    return Listing(done.returncode, items)


def in_flight(ledger: Sequence[str], prefix: Sequence[str] = ()) -> Listing:
    """``actonce audit pending --in-flight --json``: the steps whose call may still be under
    way, each with why and when it becomes decidable (exit code 0 either way)."""
    done = subprocess.run(
        audit_command(["pending", "--in-flight", "--json"], ledger, prefix),
        capture_output=True,
        text=True,
        timeout=120,
        env=scrubbed_env(),
        check=False,
    )
    if done.returncode != 0:
        return Listing(done.returncode, error=done.stderr.strip()[-500:])
    return Listing(0, [json.loads(line) for line in done.stdout.splitlines() if line.strip()])


def settled(ledger: Sequence[str], within: float) -> tuple[Listing, Listing, int]:
    """What is left for a person once every process has stopped, as a person who lists it
    then sees it: ``pending`` once ``pending --in-flight`` lists nothing, waiting up to
    ``within`` seconds. A killed sidecar's permitted call becomes decidable only once its
    deadline has passed and that sidecar's last heartbeat is STALE_SECONDS old, by the
    ledger's clock, so a listing made sooner rightly leaves it out. Answers the listing,
    what was still in flight when it was made (nothing, unless the wait ran out), and how
    many steps were in flight when the harness first looked."""
    started = time.monotonic()
    flying = in_flight(ledger)
    first = len(flying.items)
    while flying.items and time.monotonic() - started < within:
        time.sleep(POLL_SECONDS)
        flying = in_flight(ledger)
    return pending(ledger), flying, first


class Operator:
    """One seed's operator: a thread that lists and decides while a charge is watched."""

    def __init__(
        self,
        ledger: Sequence[str],
        upstream: Upstream,
        charges: dict[str, tuple[str, int]],
        *,
        prefix: Sequence[str] = (),
    ) -> None:
        # run id -> (customer, cents) of its gateway charge.
        self.ledger = list(ledger)
        self.upstream = upstream
        self.charges = charges
        self.prefix = list(prefix)
        self.decisions: list[Decision] = []
        self.refused = 0
        self.listings = 0
        self.problems: list[str] = []
        self._watched: set[str] = set()
        self._changed = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._work, name="operator", daemon=True)
        self._thread.start()

    def watch(self, run_id: str) -> None:
        """The run's charge is under way or in doubt: look at what is pending."""
        with self._changed:
            self._watched.add(run_id)
            self._changed.notify_all()

    def unwatch(self, run_id: str) -> None:
        with self._changed:
            self._watched.discard(run_id)

    def wait_decided(self, run_id: str, since: int, timeout: float) -> Decision | None:
        """The first decision on the run's charge after the ``since``-th, within
        ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._changed:
            self._watched.add(run_id)
            self._changed.notify_all()
            while True:
                mine = [d for d in self.decisions if d.run_id == run_id]
                if len(mine) > since:
                    return mine[since]
                left = deadline - time.monotonic()
                if left <= 0 or self._closed:
                    return None
                self._changed.wait(left)

    def decided(self, run_id: str) -> int:
        with self._changed:
            return sum(1 for d in self.decisions if d.run_id == run_id)

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        self._thread.join(180)

    def _work(self) -> None:
        while True:
            with self._changed:
                while not self._watched and not self._closed:
                    self._changed.wait()
                if self._closed:
                    return
            # A charge that answers at once is never looked at: the CLI costs a process.
            time.sleep(POLL_SECONDS)
            with self._changed:
                if self._closed:
                    return
                if not self._watched:
                    continue
            try:
                self._look()
            except Exception as exc:  # reported with the seed, never swallowed
                self.problems.append(f"operator: {type(exc).__name__}: {exc}")

    def _look(self) -> None:
        listing = pending(self.ledger, self.prefix)
        self.listings += 1
        for item in listing.items:
            run_id = str(item.get("run_id", ""))
            if item.get("tool") != GATEWAY_TOOL or run_id not in self.charges:
                continue  # the agent's own charge_card, or a write: nobody's to check here
            customer, cents = self.charges[run_id]
            # Read after the listing said the step is decidable: no call of it is under way.
            counted = self.upstream.charges()[customer]
            decision = RAN if counted else DID_NOT_RUN
            flags = (
                ["--ran", "--result-json", recorded_result(customer, cents)]
                if counted
                else ["--did-not-run"]
            )
            done = subprocess.run(
                audit_command(
                    ["resolve", str(item["id"]), *flags, "--by", "chaos-operator",
                     "--reason", f"the processor shows {counted} charge(s) of {customer}"],
                    self.ledger,
                    self.prefix,
                ),
                capture_output=True, text=True, timeout=120, env=scrubbed_env(), check=False,
            )  # fmt: skip
            if done.returncode == 0:
                with self._changed:
                    self.decisions.append(
                        Decision(run_id, str(item["id"]), decision, counted, time.time())
                    )
                    self._changed.notify_all()
            else:
                self.refused += 1
