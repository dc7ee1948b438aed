"""The metrics port under the limits of the sidecar's other HTTP fronts, over real sockets.

A client that opens connections and sends half a request must not hold a thread, or a
place, for ever: the connections are capped, a head that does not arrive in time is
answered 408 and cut, and the sidecar's threads stay as many as they were.
"""

from __future__ import annotations

import asyncio
import gzip
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sidecar.ops.metrics import EndpointLimits, Metrics, MetricsEndpoint
from tests.harness import Loop, RunningSidecar, sidecar_config, start_sidecar
from tests.server.scrape import scrape

HALF_A_REQUEST = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=30)


def _answer(conn: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    chunks = []
    while chunk := conn.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _refused(conn: socket.socket) -> int | str:
    try:
        return _status(_answer(conn))
    except ConnectionResetError:
        return "reset"


def _status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


@pytest.fixture
def running(tmp_path: Path) -> Iterator[RunningSidecar]:
    sidecar = start_sidecar(sidecar_config(tmp_path / "data", metrics_listen="127.0.0.1:0"))
    try:
        yield sidecar
    finally:
        sidecar.stop()


def test_half_sent_requests_hold_no_thread_and_are_cut(running: RunningSidecar) -> None:
    endpoint = running.sidecar.metrics_endpoint
    assert endpoint is not None
    scrape(endpoint.port)  # the rendering's worker thread, started once
    threads = threading.active_count()
    limit = EndpointLimits().max_connections
    held = []
    try:
        for _ in range(limit * 3):
            conn = _connect(endpoint.port)
            conn.sendall(HALF_A_REQUEST)
            held.append(conn)
        # The server's threads did not grow with the connections (one each, before).
        assert threading.active_count() <= threads + 2
        # Past the cap, a connection is answered at once and closed: no place is held. (Its
        # half request is never read, so the close may reset it before the 503 is read.)
        past_cap = {_refused(conn) for conn in held[limit:]}
        assert past_cap <= {503, "reset"}
        # Those under the cap are answered 408 once their head is late, and cut.
        for conn in held[:limit]:
            answer = _answer(conn)
            assert _status(answer) == 408
            assert b"REQUEST_TIMEOUT" in answer
        assert endpoint.connections == 0
    finally:
        for conn in held:
            conn.close()
    # And the port scrapes as before.
    assert scrape(endpoint.port)


@pytest.fixture
def endpoint() -> Iterator[tuple[Loop, MetricsEndpoint]]:
    loop = Loop()
    limits = EndpointLimits(header_seconds=0.2, max_connections=2, max_header_bytes=1024)
    opened = loop.run(MetricsEndpoint.open("127.0.0.1:0", Metrics(), limits))
    try:
        yield loop, opened
    finally:
        loop.run(opened.close())
        loop.close()


def _ask(port: int, request: bytes) -> bytes:
    with _connect(port) as conn:
        conn.sendall(request)
        return _answer(conn)


def test_the_endpoint_answers_metrics_and_refuses_the_rest(
    endpoint: tuple[Loop, MetricsEndpoint],
) -> None:
    port = endpoint[1].port
    got = _ask(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    head, _, body = got.partition(b"\r\n\r\n")
    assert _status(got) == 200 and b"content-type: text/plain" in head
    assert b"connection: close" in head
    assert b"process_start_time_seconds" in body
    zipped = _ask(port, b"GET /metrics HTTP/1.1\r\nAccept-Encoding: gzip\r\n\r\n")
    assert gzip.decompress(zipped.partition(b"\r\n\r\n")[2]).startswith(b"# HELP")
    heads = _ask(port, b"HEAD /metrics HTTP/1.1\r\n\r\n")
    assert _status(heads) == 200 and heads.endswith(b"\r\n\r\n")
    open_metrics = _ask(
        port, b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text\r\n\r\n"
    )
    assert b"application/openmetrics-text" in open_metrics
    assert _status(_ask(port, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n")) == 405
    too_large = _ask(port, b"GET /metrics HTTP/1.1\r\nX-Pad: " + b"a" * 2048 + b"\r\n\r\n")
    assert _status(too_large) == 431


def test_a_head_that_never_ends_is_answered_408(endpoint: tuple[Loop, MetricsEndpoint]) -> None:
    answer = _ask(endpoint[1].port, HALF_A_REQUEST)
    assert _status(answer) == 408 and b"REQUEST_TIMEOUT" in answer


def test_a_taken_port_is_one_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=f"could not serve metrics on 127.0.0.1:{port}"):
            asyncio.run(MetricsEndpoint.open(f"127.0.0.1:{port}", Metrics()))
