"""A gateway call is sent only under the ledger's permit, and is nobody's to decide while it
may be under way: when its attempt is fenced, when its lease passes, when the operator's
clock runs ahead, when its sidecar is frozen by the kernel. Real processes throughout: a
payments server made with the MCP SDK that counts its charges in a file, `actonce serve`,
the `actonce audit` command line, PostgreSQL where the ledger is shared."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from sidecar.config import Config
from sidecar.ledger import permits
from sidecar.ledger.base import Phase, StoredEvent
from tests.fronts.mcp.conftest import StartCharges
from tests.fronts.mcp.gateway_support import (
    begin,
    begin_with_lease,
    call,
    error_of,
    ledger_events,
    ledger_flags,
    pending,
    serve_gateway,
)
from tests.harness import sidecar_config
from tests.helpers import postgres as pg
from tests.helpers.env import scrubbed_env

LATE = "payments__charge_late"
CUSTOMER = {"customer": "ann", "cents": 500}


def _in_background(base: str, attempt: str) -> tuple[threading.Thread, list[Any]]:
    answers: list[Any] = []

    def run() -> None:
        try:
            answers.append(call(base, attempt, LATE, CUSTOMER, timeout=60))
        except BaseException as exc:  # the answer under test, whatever it is
            answers.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, answers


def _until(what: Callable[[], Any], seconds: float = 30.0) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"never happened within {seconds} s: {what}")


def _permitted_step(config: Config, run_id: str) -> str:
    def permitted() -> str:
        events = ledger_events(config, run_id)
        return next((e.event.derived_id for e in events if e.event.phase == Phase.STEP_PERMIT), "")

    return str(_until(permitted, seconds=90))


def _open_permit(config: Config, run_id: str, step_id: str) -> StoredEvent | None:
    """The permit of ``step_id`` whose call has no recorded end yet, if there is one."""
    events = [e for e in ledger_events(config, run_id) if e.event.derived_id == step_id]
    return permits.open_permit(events)


def _resolve(
    config: Config, step_id: str, prefix: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    args = [*prefix, sys.executable, "-m", "sidecar.cli", "audit", "resolve", step_id]
    args += ["--did-not-run", "--by", "dana", "--reason", "nothing at the processor"]
    return subprocess.run(
        [*args, *ledger_flags(config)],
        env=scrubbed_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_call_in_flight_when_its_attempt_is_fenced_is_not_decidable_and_charges_once(
    tmp_path: Path, start_charges: StartCharges
) -> None:
    # Long enough for the command line's checks below to run while the call is under way.
    late = start_charges("late", charge_seconds=20)
    config = sidecar_config(tmp_path / "data")
    sidecar, base = serve_gateway(config, tmp_path, late.url, "fenced")
    try:
        first = begin(base, "run-f")
        thread, answers = _in_background(base, first)
        step_id = _permitted_step(config, "run-f")
        redelivery = begin(base, "run-f")  # the queue delivered the run again: first is fenced
        _code, items = pending(config)
        assert step_id not in [item["id"] for item in items], items
        _, flying = pending(config, "--in-flight")
        assert [item["id"] for item in flying] == [step_id]
        refused = _resolve(config, step_id)
        assert refused.returncode != 0 and "under way" in refused.stderr, refused
        # The redelivery's own call of the charge finds it begun and not ended: in doubt.
        assert error_of(call(base, redelivery, LATE, CUSTOMER)) == ("IN_DOUBT", "UNKNOWN")
        thread.join(60)
        # The fenced attempt's call ended: its end is recorded as it came, and later
        # attempts get its result.
        third = begin(base, "run-f")
        replayed = call(base, third, LATE, CUSTOMER)
        assert not replayed.is_error, replayed
        assert replayed.structured_content["charge_id"] == "ch_late_ann_500"
    finally:
        sidecar.stop()
    assert late.lines("late ann") == ["late ann 500"]
    assert answers and not isinstance(answers[0], BaseException)


def test_a_call_whose_lease_passes_is_cut_at_the_lease_and_is_never_decided_while_sent(
    tmp_path: Path, start_charges: StartCharges
) -> None:
    late = start_charges("late", charge_seconds=12)
    config = sidecar_config(tmp_path / "data")
    sidecar, base = serve_gateway(config, tmp_path, late.url, "lease")
    try:
        # Long enough for the step to begin (a write needs the store's deadline, 5 s by
        # default, left on its lease), shorter than the charge.
        lease = (datetime.now(UTC) + timedelta(seconds=7)).isoformat()
        first = begin_with_lease(base, "run-l", lease)
        thread, answers = _in_background(base, first)
        step_id = _permitted_step(config, "run-l")
        permit = next(
            e.event for e in ledger_events(config, "run-l") if e.event.phase == Phase.STEP_PERMIT
        )
        # The call's one deadline is the lease's end, not the upstream timeout's 30 s.
        assert float(permit.detail["seconds"]) <= 7.0
        refused = _resolve(config, step_id)
        assert refused.returncode != 0 and "under way" in refused.stderr, refused
        thread.join(30)
        assert answers and error_of(answers[0]) == ("UPSTREAM_FAILED", "UNKNOWN")
        # Cut at its deadline, it was sent: in doubt for a person, and the run's redelivery
        # does not charge again.
        code, items = pending(config)
        assert code == 3 and [item["id"] for item in items] == [step_id]
        retry = begin(base, "run-l")
        assert error_of(call(base, retry, LATE, CUSTOMER)) == ("IN_DOUBT", "UNKNOWN")
        time.sleep(12)  # longer than the upstream takes to act, whatever it does after the cut
    finally:
        sidecar.stop()
    assert len(late.lines("late ann")) <= 1


@pytest.mark.skipif(shutil.which("faketime") is None, reason="faketime is missing")
def test_an_operator_whose_clock_runs_15_minutes_ahead_cannot_decide_a_call_in_flight(
    tmp_path: Path, start_charges: StartCharges
) -> None:
    late = start_charges("late", charge_seconds=20)
    dsn = pg.fresh_database("skewed")
    config = sidecar_config(tmp_path / "data", audit_dsn=dsn)
    sidecar, base = serve_gateway(config, tmp_path, late.url, "skewed")
    try:
        # Ten minutes of lease by the ledger's clock; past by the operator's, 15 min fast.
        lease = (datetime.now(UTC) + timedelta(minutes=10)).isoformat()
        first = begin_with_lease(base, "run-k", lease)
        thread, answers = _in_background(base, first)
        step_id = _permitted_step(config, "run-k")
        ahead = ("faketime", "-f", "+15m")
        listed = subprocess.run(
            [
                *ahead,
                sys.executable,
                "-m",
                "sidecar.cli",
                "audit",
                "pending",
                "--json",
                *ledger_flags(config),
            ],
            env=scrubbed_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert step_id not in listed.stdout, listed
        refused = _resolve(config, step_id, ahead)
        assert refused.returncode != 0 and "under way" in refused.stderr, refused
        thread.join(60)
        assert answers and not isinstance(answers[0], BaseException)
        assert not answers[0].is_error, answers[0]
    finally:
        sidecar.stop()
        pg.drop_database(dsn)
    assert late.lines("late ann") == ["late ann 500"]


def test_a_sidecar_frozen_between_its_permit_and_its_send_never_sends_after_a_decision(
    tmp_path: Path, start_charges: StartCharges
) -> None:
    # Two sidecars share one ledger and one store. The first is frozen (SIGSTOP) during the
    # upstream's handshake, after its permit; a person decides the step did not run once it
    # is decidable; the redelivery charges on the second sidecar; the first wakes.
    # A handshake far longer than the call's deadline: the freeze comes during it, whatever
    # the machine's load, and the call cannot have been sent before it.
    payments = start_charges("frozen", slow_handshake=30.0)
    ledger_dsn, store_dsn = pg.fresh_database("frozen_ledger"), pg.fresh_database("frozen_store")
    one = sidecar_config(tmp_path / "one", audit_dsn=ledger_dsn, store_dsn=store_dsn)
    two = sidecar_config(tmp_path / "two", audit_dsn=ledger_dsn, store_dsn=store_dsn)
    # Room for a loaded machine to freeze the sidecar well before the call's deadline.
    timeout = ("--mcp-upstream-timeout", "8")
    first_sidecar, first_base = serve_gateway(one, tmp_path, payments.url, "one", *timeout)
    second_sidecar, second_base = serve_gateway(two, tmp_path, payments.url, "two", *timeout)
    armed = payments.log.with_suffix(".slow")
    try:
        attempt = begin(first_base, "run-z")
        listed = call(first_base, attempt, "payments__balance", {"customer": "ann"})
        assert not listed.is_error, listed
        armed.touch()  # the next handshakes are slow: the call waits there, permitted
        thread, _answers = _in_background(first_base, attempt)
        step_id = _permitted_step(one, "run-z")
        os.kill(first_sidecar.process.pid, signal.SIGSTOP)
        permit = _open_permit(one, "run-z", step_id)
        assert permit is not None, "the call ended before the freeze: it was not frozen in flight"
        refused = _resolve(one, step_id)
        assert refused.returncode != 0 and "under way" in refused.stderr, refused
        assert payments.lines("late") == []  # what the person sees at the processor

        def decided() -> bool:
            return _resolve(one, step_id).returncode == 0

        _until(decided, seconds=90)
        # Decidable only once the permit's deadline passed and the frozen sidecar went silent
        # (the ledger is a PostgreSQL server on this host: one clock for both).
        deadline = permits.deadline_of(permit)
        assert deadline is not None and datetime.now(UTC) >= deadline, permit
        armed.unlink()
        redelivery = begin(second_base, "run-z")
        charged = call(second_base, redelivery, LATE, CUSTOMER)
        assert not charged.is_error, charged
        os.kill(first_sidecar.process.pid, signal.SIGCONT)
        thread.join(30)
        time.sleep(2)  # whatever the woken sidecar would send, it has sent by now
    finally:
        os.kill(first_sidecar.process.pid, signal.SIGCONT)
        first_sidecar.stop()
        second_sidecar.stop()
    phases = [e.event.phase for e in ledger_events(one, "run-z")]
    pg.drop_database(ledger_dsn)
    pg.drop_database(store_dsn)
    assert payments.lines("late ann") == ["late ann 500"], payments.lines()
    assert Phase.STEP_ABORT in phases
