"""The ledger's chain status for the console: verified in a thread of its own.

Walking the chain reads every event, so no page waits for it: a thread
verifies at start and then every ``interval`` seconds, and pages show the
latest verdict (intact, or the first bad event) and when it was reached.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import structlog

from sidecar.ledger import inspect
from sidecar.ledger.base import LedgerReader

log = structlog.get_logger()


class ChainWatch:
    def __init__(self, open_reader: Callable[[], LedgerReader], *, interval: float = 300.0) -> None:
        self._open = open_reader
        self._interval = interval
        self._verdict: dict[str, Any] = {"state": "checking", "checked": 0}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chain-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def verdict(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._verdict)

    def check_now(self) -> dict[str, Any]:
        """Verify the whole chain once, here, and keep the verdict."""
        at = datetime.now(UTC).isoformat(timespec="seconds")
        try:
            reader = self._open()
            try:
                found = inspect.verify(reader)
            finally:
                reader.close()
        except Exception as exc:  # an unreadable ledger is a status to show, not a crash
            log.warning("chain_check_failed", error=str(exc))
            verdict: dict[str, Any] = {"state": "unreadable", "problem": str(exc), "at": at}
        else:
            verdict = {
                "state": "intact" if found.intact else "tampered",
                "checked": found.checked,
                "first_bad": found.first_bad,
                "problem": found.problem,
                "at": at,
            }
        with self._lock:
            self._verdict = verdict
        return verdict

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.check_now()
            self._stop.wait(max(self._interval - (time.monotonic() - started), 1.0))
