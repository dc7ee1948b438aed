"""Leases: a write needs the store call's whole deadline left on its attempt's lease.

A lease bounds the whole write, not its start: it is checked again before every
store call, and each store call's deadline is no later than the lease's end. A
scoped attempt of a delivery is bounded by its delivery's lease too, as it stands
(ExtendLease of the delivery moves it), since the queue's lease is the delivery's.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sidecar.core.attempts import Attempt
from sidecar.errors import InvalidArgument, LeaseExpired


def now() -> datetime:
    """The time leases are checked against (tests move it)."""
    return datetime.now(UTC)


def require_future(lease_deadline: datetime | None) -> None:
    """A new lease deadline must still be ahead."""
    if lease_deadline is not None and lease_deadline <= now():
        raise InvalidArgument("lease_deadline", "is in the past")


def deadline(attempt: Attempt) -> datetime | None:
    """When the attempt's lease ends: its own, or its delivery's if that ends first."""
    bounds = [attempt.lease_deadline]
    if attempt.delivery is not None:
        bounds.append(attempt.delivery.lease_deadline)
    given = [bound for bound in bounds if bound is not None]
    return min(given) if given else None


def require_running(attempt: Attempt) -> None:
    """LeaseExpired unless the attempt's lease still runs: one that ran out is not extended,
    since the queue may have given the run to another worker meanwhile."""
    ends = deadline(attempt)
    if ends is not None and ends <= now():
        raise LeaseExpired(
            f"the attempt's lease ran out at {ends.isoformat()}; a lease that ran out is not "
            "extended, as the queue may have delivered the run again: begin a new attempt",
            metadata={"lease_deadline": ends.isoformat()},
        )


def check(attempt: Attempt, store_timeout: float) -> None:
    """LeaseExpired, before acting, unless the lease outlasts a store call's deadline."""
    ends = deadline(attempt)
    if ends is None:
        return
    left = (ends - now()).total_seconds()
    if left < store_timeout:
        raise LeaseExpired(
            f"the attempt's lease has {max(left, 0.0):.3f}s left, less than the store "
            f"call's deadline of {store_timeout}s; refused before acting",
            metadata={"lease_seconds_left": f"{max(left, 0.0):.3f}"},
        )


def store_deadline(attempt: Attempt, store_timeout: float) -> float:
    """The deadline of a write's next store call, no later than the lease's end;
    LeaseExpired, before the call, if the lease would not outlast it."""
    check(attempt, store_timeout)
    ends = deadline(attempt)
    if ends is None:
        return store_timeout
    return min(store_timeout, (ends - now()).total_seconds())
