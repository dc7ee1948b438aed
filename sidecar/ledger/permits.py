"""Send permits: the ledger's leave to send one step's call, and when it may be decided.

A call of a non-idempotent or keyed step is sent only once the ledger has recorded a
permit for it (``Phase.STEP_PERMIT``), in the transaction that appends it:

- granted only while the step's attempt is the newest of its run and scope (fencing, as
  for an intent), its lease has not passed **by the ledger's clock** (PostgreSQL's, or the
  writing host's for a SQLite file: never an operator's host), and no operator decided the
  step since this attempt began it;
- with the call's one deadline: the smaller of the budget the sidecar asked for (its
  upstream timeout) and what is left of the lease, fixed and recorded with the permit
  (``seconds``, ``deadline``, by the ledger's clock).

A decision and a permit exclude each other: both are appended under the chain's head lock,
the permit refused when a decision came first, the decision refused while a permitted call
may still be under way (:func:`still_under_way`): until the call's end is recorded (its
step ended, failed or was aborted by the attempt that holds the permit), or until its
deadline has passed by the ledger's clock and its sidecar has stopped beating. A fenced
attempt or a passed lease does not end a call already sent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from sidecar.ledger.base import AuditEvent, LedgerError, Phase, StoredEvent
from sidecar.ledger.liveness import STALE_SECONDS

# The detail keys a permit carries: what the sidecar asks, what the ledger grants.
ASKED_SECONDS = "asked_seconds"  # the caller's budget for the whole call
LEASE_DEADLINE = "lease_deadline"  # the attempt's lease as the sidecar holds it ("" if none)
SIDECAR = "sidecar"  # the sidecar that sends the call, whose heartbeat says it is alive
SECONDS = "seconds"  # the granted budget
DEADLINE = "deadline"  # when the call is over at the latest, by the ledger's clock

# What ends a permitted call, from the attempt that holds the permit.
CALL_ENDS = frozenset({Phase.STEP_END, Phase.STEP_FAILED, Phase.STEP_ABORT})


class PermitRefused(LedgerError):
    """A permit the ledger did not grant: nothing may be sent. ``why`` is ``"lease"``
    (the lease passed by the ledger's clock) or ``"decided"`` (an operator decided the
    step since this attempt began it)."""

    def __init__(self, message: str, *, why: str) -> None:
        super().__init__(message)
        self.why = why


def parse_time(text: str) -> datetime | None:
    """An ISO-8601 time as the ledger writes it (naive means UTC); None when unreadable."""
    try:
        stamp = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None
    return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=UTC)


def grant(event: AuditEvent, now: datetime, *, decided: bool) -> AuditEvent | PermitRefused:
    """The permit ``event`` as granted at ``now`` (the ledger's clock), with its seconds and
    deadline; or why it is refused."""
    if decided:
        return PermitRefused(
            f"step {event.derived_id} was decided by an operator after attempt "
            f"{event.attempt_id} began it; that attempt may not send it",
            why="decided",
        )
    asked = float(event.detail.get(ASKED_SECONDS, 0.0))
    seconds = asked
    lease = parse_time(str(event.detail.get(LEASE_DEADLINE, "")))
    if lease is not None:
        seconds = min(asked, (lease - now).total_seconds())
    if seconds <= 0.0:
        return PermitRefused(
            f"the lease of attempt {event.attempt_id} has passed by the ledger's clock "
            f"({now.isoformat()}); nothing was sent",
            why="lease",
        )
    deadline = now + timedelta(seconds=seconds)
    detail = {**event.detail, SECONDS: round(seconds, 6), DEADLINE: deadline.isoformat()}
    return dataclasses.replace(event, detail=detail)


def open_permit(events: Sequence[StoredEvent]) -> StoredEvent | None:
    """Among one step's events (oldest first), the newest permit whose call's end no event
    of its attempt recorded after it; None when every permitted call is over."""
    for index in range(len(events) - 1, -1, -1):
        stored = events[index]
        if stored.event.phase != Phase.STEP_PERMIT:
            continue
        ended = any(
            later.event.attempt_id == stored.event.attempt_id and later.event.phase in CALL_ENDS
            for later in events[index + 1 :]
        )
        return None if ended else stored
    return None


def deadline_of(permit: StoredEvent) -> datetime | None:
    return parse_time(str(permit.event.detail.get(DEADLINE, "")))


def still_under_way(permit: StoredEvent, now: datetime, alive: set[str]) -> str:
    """Why the call ``permit`` let send may still be under way at ``now`` (the ledger's
    clock), with ``alive`` the sidecars beating now; "" when it cannot be."""
    deadline = deadline_of(permit)
    sidecar = str(permit.event.detail.get(SIDECAR, ""))
    if deadline is None or deadline > now:
        when = deadline.isoformat() if deadline is not None else "unknown"
        return (
            f"its call is in flight: permitted in attempt {permit.event.attempt_id}, it may "
            f"still be under way. It can be decided once its end is recorded, or after its "
            f"deadline {when} (by the ledger's clock) once its sidecar {sidecar or '?'} is "
            f"silent (within {STALE_SECONDS:g} s of its last heartbeat)"
        )
    if sidecar and sidecar in alive:
        return (
            f"its call is in flight: its deadline {deadline.isoformat()} has passed, but its "
            f"sidecar {sidecar} is still beating and may yet record how the call ended. It can "
            "be decided once the sidecar records it or stops"
        )
    return ""
