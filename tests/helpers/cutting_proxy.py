"""A TCP proxy that passes a request on and then cuts the connection before its answer.

Between a client and a server on loopback, it forwards bytes both ways. Once a request
holding ``marker`` (``b'"tools/call"'``, say) has passed to the server and ``armed`` is
set, the server's answer to it is not forwarded: the client's connection is reset
(RST, SO_LINGER 0) as the answer's first bytes arrive. The server did its work; the client
never hears of it, as when a connection drops after the server acted.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class CuttingProxy:
    """``answer_marker``, when given, names the bytes of the answer itself: what comes back
    before them (an HTTP/2 window update, say) still passes, so that the cut falls after
    the server did its work."""

    def __init__(self, upstream_port: int, marker: bytes, answer_marker: bytes = b"") -> None:
        self.upstream_port = upstream_port
        self.marker = marker
        self.answer_marker = answer_marker
        self.armed = threading.Event()
        self.cuts = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.port = int(self._sock.getsockname()[1])
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> CuttingProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(10)
        return self

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _serve(self) -> None:
        self._server = await asyncio.start_server(self._pipe, sock=self._sock)

    async def _pipe(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        marked = asyncio.Event()

        async def to_server() -> None:
            while data := await client_r.read(65536):
                if self.armed.is_set() and self.marker in data:
                    marked.set()
                server_w.write(data)
                await server_w.drain()
            server_w.close()

        async def to_client() -> None:
            while data := await server_r.read(65536):
                if marked.is_set() and self.answer_marker in data:
                    self._reset(client_w)
                    self.cuts += 1
                    self.armed.clear()
                    return
                client_w.write(data)
                await client_w.drain()
            client_w.close()

        await asyncio.gather(to_server(), to_client(), return_exceptions=True)
        server_w.close()

    @staticmethod
    def _reset(writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()


@contextmanager
def cutting_proxy(
    upstream_port: int, marker: bytes = b'"tools/call"', answer_marker: bytes = b""
) -> Iterator[CuttingProxy]:
    proxy = CuttingProxy(upstream_port, marker, answer_marker).start()
    try:
        yield proxy
    finally:
        proxy.stop()
