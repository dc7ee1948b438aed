"""What the console's routes share: the ledger, what is pending in it, the operator."""

from __future__ import annotations

from dataclasses import dataclass, field

from starlette.requests import Request

from sidecar.console.chain import ChainWatch
from sidecar.ledger.operator_queries import InFlight, OperatorLedger, PendingTracker
from sidecar.ledger.pending import PendingItem
from sidecar.rules import canonical

PAGE_SIZE = 50


RUN_PAGE_EVENTS = 2000


PENDING_SHOWN = 200  # the newest; `actonce audit pending` and /api/pending list them all


MAX_OPERATOR_BYTES = canonical.MAX_NAME_BYTES


@dataclass
class ConsoleState:
    """What the routes share: the ledger, what is pending in it, the token, the chain's watcher."""

    ledger: OperatorLedger
    token: str | None
    chain: ChainWatch
    # The header a sign-in proxy names the operator in; None: the operator types a name.
    operator_header: str | None = None
    tracker: PendingTracker = field(init=False)

    def __post_init__(self) -> None:
        self.tracker = PendingTracker(self.ledger)

    def pending(self) -> list[PendingItem]:
        return self.tracker.items()

    def operator(self, request: Request) -> str | None:
        """Who the sign-in proxy says sends ``request``; None when no proxy is configured
        or it named nobody usable."""
        if self.operator_header is None:
            return None
        name = request.headers.get(self.operator_header, "").strip()
        if not name or len(name.encode()) > MAX_OPERATOR_BYTES or not name.isprintable():
            return None
        return name

    def in_flight(self) -> list[InFlight]:
        return self.tracker.in_flight()
