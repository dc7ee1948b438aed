"""Client-side bounds on PostgreSQL connections, for the ledger and the reference store.

PostgreSQL's own timeouts (``statement_timeout``, ``lock_timeout``) fire in the
server: a server that stops answering (a frozen host, a cut network, a process
stopped with SIGSTOP) fires none of them, and a psycopg call waits on its socket
for good, holding its thread, its caller and, at exit, the process. Three bounds
on this side instead:

- connection settings (:func:`conninfo`): ``connect_timeout``, TCP keepalives and
  ``tcp_user_timeout``, so that the kernel gives up on a peer that vanished;
- :class:`Watchdog`: a call that outlives its bound has its socket shut down from
  another thread, so psycopg's wait returns at once with a connection error. The
  socket is shut down, not closed: the descriptor stays the connection's own until
  psycopg closes it, so no other file can take its number in between;
- :func:`stale`: an idle connection whose socket has something to read was closed
  by the server (a restart, ``idle_session_timeout``): it is replaced before use,
  with no round trip.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import select
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import structlog
from psycopg.conninfo import conninfo_to_dict, make_conninfo

log = structlog.get_logger()

# The DSN's own settings win over these. Keepalives notice a vanished peer in about
# 10 s when nothing is being sent; tcp_user_timeout, data sent and never acknowledged.
_BOUNDS = {
    "keepalives": "1",
    "keepalives_idle": "5",
    "keepalives_interval": "2",
    "keepalives_count": "3",
    "tcp_user_timeout": "10000",
}


def conninfo(dsn: str, *, connect_timeout: float, **settings: Any) -> str:
    """``dsn`` with the bounds above and ``settings`` (the DSN's own settings win over
    both), and ``connect_timeout`` (which wins over the DSN's)."""
    given = conninfo_to_dict(dsn)
    merged: dict[str, Any] = {**_BOUNDS, **settings, **given}
    # libpq counts whole seconds, and 0 would mean "wait forever".
    merged["connect_timeout"] = max(1, round(connect_timeout))
    return make_conninfo("", **merged)


def connect(
    dsn: str, *, connect_timeout: float, autocommit: bool, **settings: Any
) -> psycopg.Connection[Any]:
    """A connection to ``dsn`` within the bounds above, that a pooler in transaction mode
    (PgBouncer) can serve: it sends no startup ``options`` (a setting is made per
    transaction, with ``SET LOCAL``) and prepares no statement (a prepared statement lives
    in one server connection, and the pooler hands the next transaction to another)."""
    return psycopg.connect(
        conninfo(dsn, connect_timeout=connect_timeout, **settings),
        autocommit=autocommit,
        prepare_threshold=None,
    )


def stale(conn: psycopg.Connection[Any]) -> bool:
    """True when an idle connection can no longer be used: closed, broken, or with
    something to read (the server's goodbye, or the end of the stream)."""
    if conn.closed or conn.broken:
        return True
    try:
        poller = select.poll()
        poller.register(conn.fileno(), select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError, psycopg.Error):
        return True


def _cut(conn: psycopg.Connection[Any]) -> None:
    try:
        fd = conn.pgconn.socket
    except psycopg.Error:
        return  # already closed
    with contextlib.suppress(OSError), socket.socket(fileno=os.dup(fd)) as sock:
        sock.shutdown(socket.SHUT_RDWR)


class Watchdog:
    """One thread that cuts the connection of any call that outlives its bound."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Condition()
        self._armed: dict[int, tuple[float, psycopg.Connection[Any]]] = {}
        self._heap: list[tuple[float, int]] = []
        self._tokens = itertools.count()
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def bound(self, conn: psycopg.Connection[Any], seconds: float) -> Iterator[None]:
        """Cut ``conn`` if the block has not ended within ``seconds``."""
        deadline = time.monotonic() + seconds
        with self._lock:
            token = next(self._tokens)
            self._armed[token] = (deadline, conn)
            heapq.heappush(self._heap, (deadline, token))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"{self._name}-watchdog", daemon=True
                )
                self._thread.start()
            self._lock.notify()
        try:
            yield
        finally:
            # Under the lock: once disarmed, the connection is never cut for this call.
            with self._lock:
                self._armed.pop(token, None)

    def _run(self) -> None:
        with self._lock:
            while True:
                while self._heap and self._heap[0][1] not in self._armed:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._lock.wait()
                    continue
                deadline, token = self._heap[0]
                wait = deadline - time.monotonic()
                if wait > 0:
                    self._lock.wait(wait)
                    continue
                heapq.heappop(self._heap)
                _deadline, conn = self._armed.pop(token)
                log.warning("postgres_call_cut", pool=self._name, reason="no answer in time")
                _cut(conn)
