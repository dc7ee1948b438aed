"""A TCP proxy that holds back the server's answers, as a slow network does.

    python clients/testkit/holding_proxy.py 127.0.0.1:50051

It listens on a free loopback port and prints its target ("127.0.0.1:PORT") on
the first line of stdout. It reads commands on stdin, one a line, and answers
each on stdout once it is in force:

    hold      keep every byte the server sends from now on, until the
              client gives up on a call (below) or "release"   -> "held"
    release   send what was kept, and pass bytes on again      -> "released"
    given-up  how many calls the client gave up on while held  -> a number

Bytes from the client always pass at once, so a request reaches the sidecar and
is carried out while its answer is held past the caller's deadline: the outcome
is unknown to the caller, though the write landed. A gRPC client gives up on a
call by resetting its HTTP/2 stream (RST_STREAM, once its deadline passes); the
proxy reads the client's frames and, at the first reset while holding, sends
what it kept and passes bytes on again, so that the caller's next call, a
repeat of the one it gave up on, is answered. The proxy stops when its stdin
closes, so a test that dies cannot leave it behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_RST_STREAM = 0x3


class HoldingProxy:
    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.rpartition(":")
        self.upstream = (host, int(port))
        self.holding = False
        self.released = asyncio.Event()
        self.released.set()
        self.given_up = 0

    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        frames = _Frames()
        # Stopping the proxy cancels the connections still open. Python 3.11's stream server
        # logs a traceback for a connection task that ends cancelled, so one ends quietly.
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(
                self._pipe(reader, up_writer, frames=frames),
                self._pipe(up_reader, writer),
                return_exceptions=True,
            )

    def reset_seen(self) -> None:
        if not self.released.is_set():
            self.given_up += 1
            self.released.set()

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        frames: _Frames | None = None,
    ) -> None:
        try:
            while data := await reader.read(65536):
                if frames is None:  # from the server: held while holding
                    await self.released.wait()
                elif _RST_STREAM in frames.types(data):
                    self.reset_seen()
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    def command(self, line: str) -> str:
        if line == "given-up":
            return str(self.given_up)
        if line == "hold":
            self.released.clear()
            return "held"
        if line == "release":
            self.released.set()
            return "released"
        return f"unknown command {line!r}"


class _Frames:
    """The types of the HTTP/2 frames a client sends, read as its bytes pass."""

    def __init__(self) -> None:
        self.pending = b""
        self.preface = len(_PREFACE)

    def types(self, data: bytes) -> list[int]:
        self.pending += data
        if self.preface:
            skipped = min(self.preface, len(self.pending))
            self.pending, self.preface = self.pending[skipped:], self.preface - skipped
        found = []
        while len(self.pending) >= 9:
            length = int.from_bytes(self.pending[:3], "big")
            if len(self.pending) < 9 + length:
                break
            found.append(self.pending[3])
            self.pending = self.pending[9 + length :]
        return found


async def main(upstream: str) -> None:
    proxy = HoldingProxy(upstream)
    server = await asyncio.start_server(proxy.connection, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    print(f"127.0.0.1:{port}", flush=True)
    loop = asyncio.get_running_loop()
    stdin_closed = asyncio.Event()

    def read_commands() -> None:
        for line in sys.stdin:
            answer = asyncio.run_coroutine_threadsafe(_apply(proxy, line.strip()), loop).result()
            print(answer, flush=True)
        loop.call_soon_threadsafe(stdin_closed.set)

    threading.Thread(target=read_commands, daemon=True).start()
    await stdin_closed.wait()
    server.close()


async def _apply(proxy: HoldingProxy, line: str) -> str:
    return proxy.command(line)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
