"""Binding a gRPC server to where the operator said, failing with one clear line.

grpc reports a port it cannot bind (in use, no such address, a Unix socket's folder
missing) as a RuntimeError that names no cause; start-up turns an OSError into one
line and exit code 2, so that is what a failed bind becomes here.
"""

from __future__ import annotations

import grpc


def bind(server: grpc.aio.Server, listen: str) -> int:
    """Bind ``server`` to ``listen`` (HOST:PORT or unix:PATH); the bound port, 0 for a socket."""
    try:
        port: int = server.add_insecure_port(listen)
    except RuntimeError:
        port = 0
    if port == 0 and not listen.startswith("unix:"):
        raise OSError(f"could not listen on {listen} (in use, or no such address here)")
    return port
