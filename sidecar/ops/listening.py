"""Binding a gRPC server to where the operator said, failing with one clear line.

grpc reports a port it cannot bind (in use, no such address) as a RuntimeError that
names no cause, after its core has printed a line of its own; start-up turns an
OSError into one line and exit code 2. So the address is tried with a plain socket
first, which gives the cause, and grpc's own failure becomes an OSError too.
"""

from __future__ import annotations

import socket
from pathlib import Path

import grpc

from sidecar.ops import files

# gRPC sets SO_REUSEPORT by default: a second sidecar started on a busy port would bind
# it and silently take half the calls, and the attempts it does not know would fail.
SERVER_OPTIONS: list[tuple[str, int]] = [("grpc.so_reuseport", 0)]


def _try_bind(listen: str) -> None:
    host, _, port = listen.rpartition(":")
    if port == "0":
        return
    host = host.strip("[]")
    try:
        infos = socket.getaddrinfo(
            host, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise OSError(f"could not listen on {listen}: {exc.strerror}") from None
    family, kind, proto, _name, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        # As a listening server sets it: a port left in TIME_WAIT is free to take.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            raise OSError(f"could not listen on {listen}: {exc.strerror}") from None


def bind(
    server: grpc.aio.Server, listen: str, credentials: grpc.ServerCredentials | None = None
) -> int:
    """Bind ``server`` to ``listen`` (HOST:PORT or unix:PATH), serving TLS when given
    ``credentials``; the bound port, 0 for a socket."""
    if not listen.startswith("unix:"):
        _try_bind(listen)
    try:
        port: int = (
            server.add_secure_port(listen, credentials)
            if credentials is not None
            else server.add_insecure_port(listen)
        )
    except RuntimeError:
        port = 0
    if port == 0 and not listen.startswith("unix:"):
        raise OSError(f"could not listen on {listen}")
    if listen.startswith("unix:"):
        # Whoever may open the socket may call the sidecar: its owner alone, whatever the umask.
        files.tighten(Path(listen.removeprefix("unix:")))
    return port
