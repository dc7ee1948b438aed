"""uvicorn as the HTTP fronts run it: a deadline on every request's arrival, a cap on
connections and on a request head's size, no WebSocket, no proxy headers.

uvicorn bounds the wait between two requests (``timeout_keep_alive``), and resets it with
every byte; nothing bounds how long one request takes to arrive, and ASGI middleware runs
only once its head is whole. A client that sends half a head holds its connection, and its
place under the connection cap, for ever. :class:`DeadlineProtocol` is uvicorn's own h11
protocol with one timer more: a request's head must arrive within ``header_seconds`` of its
first byte (of the connection, for the first), and all of it within ``read_seconds``;
otherwise it is answered 408, or cut when an answer had begun. A request received whole
has no deadline: a slow answer is the application's, never cut here.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import h11
import structlog
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from sidecar import defaults
from sidecar.errors import FailureClass
from sidecar.ops.http_guard import refusal_body

log = structlog.get_logger()


@dataclass(frozen=True)
class ServingLimits:
    """How long a request may take to arrive, and how many connections and head bytes."""

    header_seconds: float = defaults.HTTP_HEADER_TIMEOUT_SECONDS
    read_seconds: float = defaults.HTTP_READ_TIMEOUT_SECONDS
    keep_alive_seconds: int = defaults.HTTP_KEEP_ALIVE_SECONDS
    max_connections: int = defaults.HTTP_MAX_CONNECTIONS
    max_header_bytes: int = defaults.HTTP_MAX_HEADER_BYTES


class DeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol, with a deadline on each request until it is received whole."""

    limits: ClassVar[ServingLimits] = ServingLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._began = 0.0
        self._head_received = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._request_begins()

    def data_received(self, data: bytes) -> None:
        if self._deadline is None and self.conn.their_state is h11.IDLE:
            self._request_begins()
        super().data_received(data)
        self._follow_request()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow_request()  # a pipelined request's head, taken from the buffer

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        super().send_400_response(msg)
        self._abandon_request()

    # -- the deadline ------------------------------------------------------------------

    def _request_begins(self) -> None:
        self._began = self.loop.time()
        self._head_received = False
        self._arm(self._began + self.limits.header_seconds)

    def _follow_request(self) -> None:
        state = self.conn.their_state
        if state is h11.IDLE:
            return  # the head is still coming (or nothing is, which keep-alive bounds)
        if state is h11.SEND_BODY:
            if not self._head_received:
                self._head_received = True
                self._arm(self._began + self.limits.read_seconds)
            return
        self._disarm()  # received whole, or the connection is done with

    def _arm(self, when: float) -> None:
        self._disarm()
        self._deadline = self.loop.call_at(when, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        answering = self.cycle is not None and self.cycle.response_started
        if not answering or self.cycle.response_complete:
            self.transport.write(_timeout_answer(self._head_received, self.limits))
        log.info("http_request_timeout", head_received=self._head_received)
        self.transport.close()
        self._abandon_request()

    def _abandon_request(self) -> None:
        """Tell the application of a request in hand that its client went away, at once: the
        connection is answered and closing, and an answer of its own would meet h11's closed
        state (an error, logged with its traceback) before uvicorn noticed the close."""
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True
            cycle.message_event.set()


def _timeout_answer(head_received: bool, limits: ServingLimits) -> bytes:
    part, seconds = (
        ("body", limits.read_seconds) if head_received else ("head", limits.header_seconds)
    )
    body = refusal_body(
        "REQUEST_TIMEOUT",
        FailureClass.RETRYABLE,
        f"the request's {part} did not arrive within {seconds:g} s",
    )
    return (
        b"HTTP/1.1 408 Request Timeout\r\n"
        b"content-type: application/json\r\n"
        b"content-length: %d\r\n"
        b"connection: close\r\n"
        b"x-content-type-options: nosniff\r\n"
        b"cache-control: no-store\r\n\r\n" % len(body)
    ) + body


def protocol(limits: ServingLimits) -> type[DeadlineProtocol]:
    """The protocol class uvicorn builds each connection with, under ``limits``."""
    return cast(
        "type[DeadlineProtocol]", type("DeadlineProtocol", (DeadlineProtocol,), {"limits": limits})
    )


def server_config(app: Any, limits: ServingLimits | None = None, **options: Any) -> uvicorn.Config:
    """uvicorn's configuration of an HTTP front: the deadlines and caps, h11 always (the
    deadline is built on it), no WebSocket (no front has a WebSocket route), the client's
    own address (no ``X-Forwarded-*``), no ``server`` header, logs through structlog."""
    limits = limits or ServingLimits()
    return uvicorn.Config(
        app,
        http=protocol(limits),
        ws="none",
        limit_concurrency=limits.max_connections,
        timeout_keep_alive=limits.keep_alive_seconds,
        h11_max_incomplete_event_size=limits.max_header_bytes,
        proxy_headers=False,
        server_header=False,
        log_config=None,
        access_log=False,
        **options,
    )
