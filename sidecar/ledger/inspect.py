"""What an operator asks of a ledger: verify its chain, list runs, show a run, export.

These read through a LedgerReader and write text to a stream, so that
``actonce audit`` is a thin shell around them and tests call them directly.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TextIO

from sidecar.ledger.base import GENESIS_HASH, LedgerReader, Phase, StoredEvent, event_hash

# How often long scans report progress, in events.
PROGRESS_EVERY = 5000

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Verdict:
    """The result of walking a ledger's hash chain."""

    intact: bool
    checked: int
    first_bad: int | None = None
    problem: str = ""


def verify(reader: LedgerReader, progress: Progress | None = None) -> Verdict:
    """Walk the chain from the first event; name the first event that does not fit.

    An edited event no longer matches its own hash; a deleted, inserted or
    reordered one breaks the numbering or its successor's link; events deleted
    from the end leave the chain shorter than its recorded head. The chain and
    the head are read in one snapshot: a batch committed between two reads would
    otherwise look like events deleted from the end of a live ledger.
    """
    with reader.snapshot():
        return _walk(reader, progress)


def _walk(reader: LedgerReader, progress: Progress | None) -> Verdict:
    total = reader.count()
    expected, prev, checked = 1, GENESIS_HASH, 0
    for stored in reader.events():
        if stored.seq != expected:
            return Verdict(False, checked, expected,
                           f"event {expected} is missing: the next event is {stored.seq} "
                           "(deleted or renumbered)")  # fmt: skip
        if stored.prev_hash != prev:
            return Verdict(False, checked, stored.seq,
                           "it does not link to the event before it (an event was deleted, "
                           "inserted or reordered)")  # fmt: skip
        if event_hash(stored.seq, stored.ts, stored.event, prev) != stored.hash:
            problem = "its content does not match its hash (the event was edited)"
            return Verdict(False, checked, stored.seq, problem)
        prev = stored.hash
        expected += 1
        checked += 1
        if progress is not None and checked % PROGRESS_EVERY == 0:
            progress(checked, total)
    head_seq, head_hash = reader.head()
    if (head_seq, head_hash) != (checked, prev):
        return Verdict(False, checked, checked + 1,
                       f"the chain ends at event {checked} but the ledger's head records "
                       f"event {head_seq} (events were deleted from the end)")  # fmt: skip
    if progress is not None:
        progress(checked, total)
    return Verdict(True, checked)


def list_runs(reader: LedgerReader, out: TextIO) -> int:
    runs = reader.runs()
    out.write(f"{'run':<36} {'rule':<20} {'attempts':>8} {'events':>7}  last event\n")
    for run in runs:
        out.write(f"{run.run_id:<36} {run.rule:<20} {run.attempts:>8} {run.events:>7}  "
                  f"{run.last_ts}\n")  # fmt: skip
    return len(runs)


def show_run(reader: LedgerReader, run_id: str, out: TextIO) -> int:
    """A readable timeline of one run: attempts, writes, outcomes, refusals.

    A run whose attempts have scopes (a tool call's attempts, say) is shown as
    one timeline per scope, the unscoped attempts first, then each scope in
    the order it began.
    """
    by_scope: dict[str, list[StoredEvent]] = {"": []}
    for stored in reader.events(run_id=run_id):
        by_scope.setdefault(stored.event.scope, []).append(stored)
    shown = sum(len(events) for events in by_scope.values())
    if shown == 0:
        out.write(f"no events for run {run_id}\n")
    scoped = len(by_scope) > 1
    for scope, events in by_scope.items():
        if scoped and events:
            out.write(f"scope {scope!r}\n" if scope else "unscoped\n")
        for stored in events:
            out.write(_timeline_line(stored) + "\n")
    return shown


def _timeline_line(stored: StoredEvent) -> str:
    e = stored.event
    time = stored.ts[11:23]
    head = f"#{stored.seq:<6} {time}"
    if e.phase == Phase.ATTEMPT_BEGIN:
        scope = f", scope {e.scope!r}" if e.scope else ""
        scheme = f", id scheme {e.detail['id_scheme']}" if "id_scheme" in e.detail else ""
        return (f"{head} attempt {e.attempt_id} began (rule {e.rule}, checkpoint "
                f"{e.checkpoint!r}{scope}{scheme})")  # fmt: skip
    if e.phase == Phase.ATTEMPT_END:
        d = e.detail
        return (f"{head} attempt {e.attempt_id} ended: applied {d.get('applied', 0)}, "
                f"already applied {d.get('already_applied', 0)}, skipped {d.get('skipped', 0)}, "
                f"failed {d.get('failed', 0)}")  # fmt: skip
    if e.phase == Phase.DECISION:
        d = e.detail
        return (f"{head}   decision on {e.derived_id}: {d.get('decision')} by {d.get('by')} "
                f"({d.get('reason')})")  # fmt: skip
    what = f"{e.rpc:<12} {e.derived_id or '-'}"
    if e.occurrence >= 0:
        what += f" (occurrence {e.occurrence})"
    if e.phase in (Phase.INTENT, Phase.STEP_BEGIN):
        return f"{head}   {what}: {'began' if e.phase == Phase.STEP_BEGIN else 'intent'}"
    if e.phase == Phase.STEP_END:
        return f"{head}   {what}: step ended"
    if e.phase == Phase.STEP_ABORT:
        return f"{head}   {what}: step aborted ({e.detail.get('reason', '')!r})"
    if e.phase == Phase.READ:
        result = f"refused {e.reason}/{e.failure_class}" if e.reason else "read"
        return f"{head}   {what}: {result}"
    if e.reason:
        return f"{head}   {what}: refused {e.reason} ({e.failure_class})"
    return f"{head}   {what}: {e.outcome.removeprefix('OUTCOME_')}"


def export(reader: LedgerReader, out: TextIO, progress: Progress | None = None) -> int:
    """Every event as one JSON line, chain fields included, in sequence order."""
    total = reader.count()
    written = 0
    for stored in reader.events():
        line = {"seq": stored.seq, "ts": stored.ts, **asdict(stored.event),
                "prev_hash": stored.prev_hash, "hash": stored.hash}  # fmt: skip
        out.write(json.dumps(line, sort_keys=True, separators=(",", ":")) + "\n")
        written += 1
        if progress is not None and written % PROGRESS_EVERY == 0:
            progress(written, total)
    if progress is not None:
        progress(written, total)
    return written
