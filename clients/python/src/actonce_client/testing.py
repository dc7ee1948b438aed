"""A real sidecar for tests and demos: ``actonce serve`` on a free loopback
port, its data in a temporary folder, ready once its health service says
SERVING. Needs the ``testing`` extra (grpcio-health-checking).

    with LocalSidecar(send_allowlist=["triage"]) as sidecar:
        with Client(sidecar.target) as client:
            ...
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

import grpc
from grpc_health.v1 import health_pb2

SERVICE = "actonce.v1.RunActionsService"


def actonce_command() -> list[str]:
    """``$ACTONCE_BIN``, else the ``actonce`` beside this interpreter, else on PATH."""
    if given := os.environ.get("ACTONCE_BIN"):
        return [given]
    beside = Path(sys.executable).parent / "actonce"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("actonce")
    if found is None:
        raise FileNotFoundError("no actonce command: install the sidecar or set ACTONCE_BIN")
    return [found]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class LocalSidecar:
    """A running ``actonce serve``; ``stop()`` (or leaving the ``with``) ends it."""

    def __init__(
        self,
        *,
        send_allowlist: Sequence[str] = (),
        command: Sequence[str] | None = None,
        ready_within: float = 30.0,
        args: Sequence[str] = (),
    ) -> None:
        self.target = f"127.0.0.1:{free_port()}"
        self._data = tempfile.TemporaryDirectory(prefix="actonce-")
        self.data_dir = Path(self._data.name)
        self.log_path = self.data_dir / "sidecar.log"
        serve = [
            *(command or actonce_command()), "serve", "--listen", self.target,
            "--data-dir", str(self.data_dir), "--log-format", "json", "--log-level", "warning",
        ]  # fmt: skip
        if send_allowlist:
            serve += ["--send-allowlist", ",".join(send_allowlist)]
        serve += list(args)
        with self.log_path.open("wb") as log:
            self._process = subprocess.Popen(serve, stdout=log, stderr=subprocess.STDOUT)
        try:
            self._wait_serving(ready_within)
        except RuntimeError as error:
            output = self.log_path.read_text(errors="replace")
            self.stop()
            raise RuntimeError(f"{error}\n{output}") from None

    def _wait_serving(self, limit: float) -> None:
        request = health_pb2.HealthCheckRequest(service=SERVICE)
        with grpc.insecure_channel(self.target) as channel:
            # The health package's type stubs name no methods on its HealthStub.
            check = channel.unary_unary(
                "/grpc.health.v1.Health/Check",
                request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
                response_deserializer=health_pb2.HealthCheckResponse.FromString,
            )
            deadline = time.monotonic() + limit
            while time.monotonic() < deadline:
                if self._process.poll() is not None:
                    raise RuntimeError(f"actonce serve exited with {self._process.returncode}")
                try:
                    status = check(request, timeout=1).status
                except grpc.RpcError:
                    status = None
                if status == health_pb2.HealthCheckResponse.SERVING:
                    return
                time.sleep(0.05)
        raise RuntimeError(f"actonce serve at {self.target} was not SERVING within {limit}s")

    def stop(self) -> None:
        self._process.kill()
        self._process.wait()
        self._data.cleanup()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
