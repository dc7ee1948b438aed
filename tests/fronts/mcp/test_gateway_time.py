"""A gateway call's one deadline and its bounded answer, with real processes: an upstream
made with the MCP SDK that counts its charges in a file, ``actonce serve`` in front of it,
and the MCP SDK's own client.

A call is bounded as a whole (connect, handshake, send, every byte of its answer) by the
smaller of ``--mcp-upstream-timeout`` and what is left of its attempt's lease; its answer is
read as it comes and refused past a bound. Past either once sent, the call was sent: the
step is left begun (failed), the agent is told ``UPSTREAM_FAILED``, and a repeat is in
doubt, never sent again. Past the deadline before it was sent, it was not: the step is
aborted, and a retry sends it once.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from sidecar.ledger.base import Phase
from tests.fronts.mcp.conftest import StartCharges
from tests.fronts.mcp.gateway_support import (
    begin,
    begin_with_lease,
    call,
    end_attempt,
    error_of,
    ledger_events,
    pending,
    serve_gateway,
)
from tests.harness import sidecar_config

MIB = 1 << 20


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def _reset_peak(pid: int) -> None:
    # Linux: writing 5 to clear_refs resets the process's peak resident set (VmHWM).
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def test_an_answer_too_large_was_sent_is_never_read_whole_and_is_upstream_failed(
    tmp_path: Path, start_charges: StartCharges
) -> None:
    payments = start_charges()
    config = sidecar_config(tmp_path / "data")
    sidecar, base = serve_gateway(config, tmp_path, payments.url, "large")
    try:
        # Listed and warmed up by a small call first: what grows after is the answer.
        warm = call(base, begin(base, "run-warm"), "payments__balance", {"customer": "ann"})
        assert not warm.is_error
        attempt = begin(base, "run-large")
        pid = sidecar.process.pid
        _reset_peak(pid)
        before = _status_kib(pid, "VmRSS")
        large = call(base, attempt, "payments__statement", {"customer": "ann", "mib": 24})
        grown = (_status_kib(pid, "VmHWM") - before) * 1024
        # The upstream acted: the agent is told it may have, never "nothing was written".
        assert error_of(large) == ("UPSTREAM_FAILED", "UNKNOWN")
        said = large.structured_content["message"]
        assert "larger than" in said and "Nothing was written" not in said
        # Read as it came and dropped past the bound: far from the 24 MiB held twice over.
        assert grown < 16 * MIB, f"the sidecar grew {grown / MIB:.1f} MiB"
        # The same call again is that call repeated: in doubt, not sent again.
        again = call(base, attempt, "payments__statement", {"customer": "ann", "mib": 24})
        assert error_of(again) == ("IN_DOUBT", "UNKNOWN")
        assert sidecar.drain() == 0  # stopped: its attempt is no longer live
    finally:
        sidecar.stop()
    assert payments.lines("statement ann") == ["statement ann"]
    phases = [e.event.phase for e in ledger_events(config, "run-large")]
    assert Phase.STEP_FAILED in phases and Phase.STEP_END not in phases
    code, items = pending(config)
    assert code == 3 and [i["tool"] for i in items] == ["payments__statement"]


@pytest.mark.parametrize("tool", ["payments__hang", "payments__chatter"])
def test_an_upstream_that_streams_and_never_answers_is_cut_at_the_calls_deadline(
    tmp_path: Path, start_charges: StartCharges, tool: str
) -> None:
    # Keep-alive comments every 0.2 s (hang) or a notification every 10 ms (chatter):
    # every read is quick, so only a deadline on the whole call ends it.
    upstream = start_charges("streams", sse_ping=0.2)
    config = sidecar_config(tmp_path / "data")
    sidecar, base = serve_gateway(
        config, tmp_path, upstream.url, "never", "--mcp-upstream-timeout", "2"
    )
    try:
        attempt = begin(base, "run-never")
        never = call(base, attempt, tool, {"customer": "bo"}, timeout=20)
        assert error_of(never) == ("UPSTREAM_FAILED", "UNKNOWN")
        assert "deadline of 2.000s passed" in never.structured_content["message"]
        # Nothing of the call is left under way: the attempt ends at once.
        counts = end_attempt(base, attempt, timeout=10)
        assert counts is not None
    finally:
        sidecar.stop()
    assert len(upstream.lines(f"{tool.removeprefix('payments__')} bo")) == 1
    code, items = pending(config)
    assert code == 3 and [i["tool"] for i in items] == [tool]


def test_a_call_is_bounded_by_its_attempts_lease_when_that_ends_first(
    tmp_path: Path, start_charges: StartCharges
) -> None:
    slow = start_charges("slow", charge_seconds=12)
    config = sidecar_config(tmp_path / "data")
    sidecar, base = serve_gateway(config, tmp_path, slow.url, "lease")
    try:
        listing = call(base, begin(base, "run-listing"), "payments__balance", {"customer": "x"})
        assert not listing.is_error
        # Long enough for the step to begin (a write needs the store's deadline left on
        # its lease, 5 s by default), shorter than the charge.
        lease = (datetime.now(UTC) + timedelta(seconds=8)).isoformat()
        attempt = begin_with_lease(base, "run-lease", lease)
        charged = call(base, attempt, "payments__charge", {"customer": "cy", "cents": 4})
        # The lease ended before the charge answered: the call ended with it, sent.
        assert error_of(charged) == ("UPSTREAM_FAILED", "UNKNOWN")
        assert "deadline of" in charged.structured_content["message"]
    finally:
        sidecar.stop()
    assert slow.lines("charge cy") == ["charge cy 4"]
    phases = [e.event.phase for e in ledger_events(config, "run-lease")]
    assert Phase.STEP_FAILED in phases and Phase.STEP_END not in phases


def test_a_handshake_past_the_calls_deadline_is_not_sent_and_a_retry_sends_it_once(
    tmp_path: Path, start_charges: StartCharges
) -> None:
    upstream = start_charges("handshake", slow_handshake=4)
    config = sidecar_config(tmp_path / "data")
    sidecar, base = serve_gateway(
        config, tmp_path, upstream.url, "handshake", "--mcp-upstream-timeout", "2"
    )
    armed = upstream.log.with_suffix(".slow")
    try:
        attempt = begin(base, "run-handshake")
        assert not call(base, attempt, "payments__balance", {"customer": "di"}).is_error
        armed.touch()  # from now on the upstream's handshake outlasts the call's deadline
        late = call(base, attempt, "payments__charge", {"customer": "di", "cents": 6})
        assert error_of(late) == ("UPSTREAM_NOT_SENT", "RETRYABLE")
        assert "nothing was sent" in late.structured_content["message"]
        assert upstream.lines("charge di") == []
        armed.unlink()
        again = call(base, attempt, "payments__charge", {"customer": "di", "cents": 6})
        assert not again.is_error and again.meta["actonce/outcome"] == "OUTCOME_APPLIED"
    finally:
        sidecar.stop()
    assert upstream.lines("charge di") == ["charge di 6"]
    phases = [e.event.phase for e in ledger_events(config, "run-handshake")]
    assert Phase.STEP_ABORT in phases and Phase.STEP_FAILED not in phases
    assert pending(config) == (0, [])
