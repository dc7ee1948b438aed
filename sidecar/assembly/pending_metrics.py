"""The gauge of what needs a person: ``actonce_pending_items{kind=...}``.

Counted from the sidecar's ledger (the same rules as ``actonce audit
pending``) when Prometheus scrapes, on the metrics endpoint's own thread and a
read-only connection of its own, never on the path of a write: the whole
ledger at the first scrape, then only the ids that new events name. A count is reused for
``max_age`` seconds so that frequent scrapes do not turn into frequent queries;
a ledger that cannot be read shows as ``actonce_pending_scrape_errors_total``
and leaves the last count in place.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import structlog
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sidecar.ledger.base import LedgerError
from sidecar.ledger.operator import OperatorLedger, PendingTracker
from sidecar.ledger.pending import Kind

log = structlog.get_logger()

OpenLedger = Callable[[], OperatorLedger]


class PendingCollector(Collector):
    """Counts pending items by kind at scrape time."""

    def __init__(self, open_ledger: OpenLedger, *, max_age: float = 10.0) -> None:
        self._open = open_ledger
        self._max_age = max_age
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {kind.value: 0 for kind in Kind}
        self._at = float("-inf")
        self._errors = 0
        self._tracker: PendingTracker | None = None

    def _refresh(self) -> None:
        with self._lock:
            if time.monotonic() - self._at < self._max_age:
                return
            try:
                if self._tracker is None:
                    self._tracker = PendingTracker(self._open())
                items = self._tracker.items()
            except LedgerError as exc:
                if self._tracker is not None:
                    self._tracker.ledger.close()
                    self._tracker = None
                self._errors += 1
                log.warning("pending_count_failed", error=str(exc))
                return
            finally:
                # Between scrapes the sidecar holds no connection for the count: its pools
                # are what it holds (--audit-pool-size).
                if self._tracker is not None:
                    self._tracker.ledger.idle()
            counts = {kind.value: 0 for kind in Kind}
            for item in items:
                counts[item.kind.value] += 1
            self._counts, self._at = counts, time.monotonic()

    def collect(self) -> Iterator[Metric]:
        self._refresh()
        gauge = GaugeMetricFamily(
            "actonce_pending_items",
            "Steps in doubt and writes without a known outcome in this sidecar's ledger, "
            "by kind: what `actonce audit pending` lists for a person to decide.",
            labels=["kind"],
        )
        for kind, count in sorted(self._counts.items()):
            gauge.add_metric([kind], count)
        yield gauge
        errors = CounterMetricFamily(
            "actonce_pending_scrape_errors",
            "Scrapes whose count of pending items failed to read the ledger.",
        )
        errors.add_metric([], self._errors)
        yield errors
