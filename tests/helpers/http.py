"""HTTP/1.1 over a plain socket, for requests no well-behaved client sends: a Host that is
not the server's, a body larger than a limit, half a request.

Requests are written byte for byte as given; the answer is read to the end of the
connection and parsed with h11, as a client parses it.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import h11


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def raw_request(
    method: str,
    path: str,
    *,
    host: str | None,
    headers: Iterable[tuple[str, str]] = (),
    body: bytes = b"",
    length: bool = True,
) -> bytes:
    """The bytes of one request; ``host=None`` sends no Host header at all."""
    lines = [f"{method} {path} HTTP/1.1"]
    if host is not None:
        lines.append(f"Host: {host}")
    lines += [f"{name}: {value}" for name, value in headers]
    if length:
        lines.append(f"Content-Length: {len(body)}")
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def exchange(port: int, data: bytes, *, method: str = "GET", timeout: float = 20) -> Answer:
    """Send ``data`` to 127.0.0.1:``port`` and parse the one answer it gets."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        # Answered and closed before taking it all: the answer is still there to read.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(data)
        return read_answer(sock, method=method, timeout=timeout)


def read_answer(sock: socket.socket, *, method: str = "GET", timeout: float = 20) -> Answer:
    received = bytearray()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        received += chunk
    return parse_answer(bytes(received), method=method)


def parse_answer(received: bytes, *, method: str = "GET") -> Answer:
    client = h11.Connection(h11.CLIENT)
    # h11 parses an answer only to a request it sent: it "sends" one of the same method.
    client.send(h11.Request(method=method, target="/", headers=[("Host", "x")]))
    client.send(h11.EndOfMessage())
    client.receive_data(received)
    client.receive_data(b"")
    status, headers, body = 0, {}, bytearray()
    while True:
        event = client.next_event()
        if isinstance(event, h11.Response):
            status = event.status_code
            headers = {k.decode().lower(): v.decode("latin-1") for k, v in event.headers}
        elif isinstance(event, h11.Data):
            body += event.data
        elif event is h11.NEED_DATA or isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
            break
    if not status:
        raise AssertionError(f"no HTTP answer: {received[:200]!r}")
    return Answer(status, headers, bytes(body))


def call(
    port: int,
    method: str,
    path: str,
    *,
    host: str | None = "",
    headers: Iterable[tuple[str, str]] = (),
    body: bytes = b"",
    timeout: float = 20,
) -> Answer:
    """One request; ``host=""`` names the server as a client on this host does."""
    named = f"127.0.0.1:{port}" if host == "" else host
    data = raw_request(method, path, host=named, headers=headers, body=body)
    return exchange(port, data, method=method, timeout=timeout)
