"""The metrics on the seams: a hook of the ledger's appends, and middleware of the store client.

Both feed the sidecar's registry (:class:`sidecar.ops.metrics.Metrics`), and both are what
their seam asks for and nothing more: :class:`TimedAppends` is an
:class:`~sidecar.ledger.group_commit.AppendHook`, around each append and each commit;
:class:`TimedStore` is a :class:`~sidecar.upstream.base.StoreClient`, around each call.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextvars import Context
from types import TracebackType
from typing import Any, TypeVar, cast

from sidecar.errors import ActonceError, LeaseExpired, StoreDeadlineExceeded, StoreUnavailable
from sidecar.ledger.base import AuditEvent, FencedError, LedgerError
from sidecar.ledger.group_commit import Append
from sidecar.ops.metrics import Metrics
from sidecar.store_contract import Refusal
from sidecar.upstream.base import AUDITED, Committed, InTurn, OneCommit, StoreCall, StoreClient

_T = TypeVar("_T")
_R = TypeVar("_R")


# -- the ledger ------------------------------------------------------------------


class TimedAppends:
    """Times each append until durable (or failed) and counts the failures; times each
    group commit and the events it carries."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    async def append(self, event: AuditEvent, append: Append) -> int:
        metrics = self._metrics
        started = time.perf_counter()
        try:
            return await append(event)
        except FencedError:
            # A newer attempt's fence refused the event: the ledger worked.
            raise
        except LedgerError:
            metrics.audit_append_failures.inc()
            raise
        finally:
            metrics.observe(metrics.audit_append_seconds, time.perf_counter() - started)

    def commit(self, appends: Sequence[Context]) -> _TimedCommit:
        return _TimedCommit(self._metrics, len(appends))


class _TimedCommit:
    __slots__ = ("_events", "_metrics", "_started")

    def __init__(self, metrics: Metrics, events: int) -> None:
        self._metrics = metrics
        self._events = events
        self._started = 0.0

    def __enter__(self) -> None:
        self._started = time.perf_counter()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if error is not None:  # a failed append is counted where it is seen, once per append
            return
        metrics = self._metrics
        metrics.observe(metrics.audit_commit_seconds, time.perf_counter() - self._started)
        metrics.audit_commit_events.observe(self._events)


# -- the store client ----------------------------------------------------------


def _result_of(error: BaseException) -> str:
    if isinstance(error, Refusal):
        return error.code
    if isinstance(error, StoreDeadlineExceeded):
        return "deadline_exceeded"
    if isinstance(error, StoreUnavailable):
        return "unavailable"
    return "error"


def _store_not_called(op: OneCommit[Any] | InTurn[Any], error: Exception) -> bool:
    """Whether a write's job failed with ``error`` before its store call: fenced, its lease
    run out, or (in turn) its intent not durable or its turn never come."""
    if isinstance(error, FencedError | LeaseExpired):
        return True
    if isinstance(op, InTurn):
        return isinstance(error, LedgerError) or (
            isinstance(error, ActonceError) and error.nothing_sent
        )
    return False


class TimedStore:
    """Times each call of the store client it wraps, by operation and result (ok, the
    store's refusal code, unavailable, deadline_exceeded)."""

    def __init__(self, inner: StoreClient, metrics: Metrics) -> None:
        self._inner = inner
        self._metrics = metrics

    async def call(self, op: StoreCall[_T], timeout: float | None = None) -> _T:
        if isinstance(op, AUDITED):
            return cast(_T, await self._with_audit(op, timeout))
        started = time.perf_counter()
        result = "ok"
        try:
            return await self._inner.call(op, timeout)
        except Exception as error:
            result = _result_of(error)
            raise
        finally:
            self._observe(op.operation, result, time.perf_counter() - started)

    async def _with_audit(
        self, op: OneCommit[_R] | InTurn[_R], timeout: float | None
    ) -> Committed[_R]:
        """The write's store call is timed as any other, by the store's own answer inside the
        job; its two events are durable with the job's commits, so each is an append of the
        job's time, as the ledger's own appends are timed until durable."""
        metrics = self._metrics
        started = time.perf_counter()
        result, events = "ok", 1
        try:
            committed = await self._inner.call(op, timeout)
        except Exception as error:
            if isinstance(error, LedgerError) and not isinstance(error, FencedError):
                metrics.audit_append_failures.inc()
            result = "" if _store_not_called(op, error) else _result_of(error)
            raise
        else:
            events = 2
            lost = committed.outcome_lost
            if lost is not None and not isinstance(lost, FencedError):
                metrics.audit_append_failures.inc()
            if isinstance(committed.answer, Exception):
                result = _result_of(committed.answer)
            return committed
        finally:
            took = time.perf_counter() - started
            if result:  # a write refused before the store was called makes no store call
                self._observe(op.write.operation, result, took)
            for _ in range(events):
                metrics.observe(metrics.audit_append_seconds, took)

    def _observe(self, operation: str, result: str, seconds: float) -> None:
        metrics = self._metrics
        metrics.observe(metrics.store_call_seconds.labels(operation, result), seconds)
