"""``actonce`` commands in child processes, as an operator or a kubelet runs them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2

from tests.harness import HealthStub, free_port


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without any ACTONCE_* setting, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACTONCE_")}
    env.update(extra or {})
    return env


def run_cli(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    """Run ``actonce ARGS`` to completion and capture what it printed."""
    return subprocess.run(
        [sys.executable, "-m", "sidecar.cli", *args],
        env=clean_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@dataclass
class Served:
    """A long-running ``actonce`` command and the file its output goes to."""

    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)


def start_cli(log_path: Path, *args: str, env: Mapping[str, str] | None = None) -> Served:
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "sidecar.cli", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=clean_env(env),
        )
    return Served(process, log_path)


def health_status(target: str, service: str = "", timeout: float = 2) -> str:
    """The health service's answer at ``target`` by name, or the error's code name."""
    with grpc.insecure_channel(target) as channel:
        stub = HealthStub(channel)
        try:
            answer = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError as error:
            return f"error:{error.code().name}"
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status))


def wait_for_status(
    target: str,
    wanted: str,
    *,
    served: Served | None = None,
    service: str = "",
    timeout: float = 30,
) -> None:
    """Ask until the health service at ``target`` answers ``wanted``."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if served is not None and served.process.poll() is not None:
            raise AssertionError(
                f"exited with {served.process.returncode} before {wanted}: {served.log()[-2000:]}"
            )
        last = health_status(target, service, timeout=1)
        if last == wanted:
            return
        time.sleep(0.05)
    log = served.log()[-2000:] if served else ""
    raise AssertionError(f"{target} answered {last}, never {wanted}. {log}")


def serve_draining(
    tmp_path: Path, store_target: str, grace: float, *extra: str
) -> tuple[Served, str, str]:
    """`actonce serve` against ``store_target`` with a ``grace`` period, SERVING; its API and
    probe addresses."""
    api, probes = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    served = start_cli(
        tmp_path / "sidecar.log",
        "serve",
        "--listen",
        api,
        "--health-listen",
        probes,
        "--data-dir",
        str(tmp_path / "data"),
        "--store-target",
        store_target,
        "--grace-period",
        str(grace),
        "--log-format",
        "json",
        *extra,
    )
    wait_for_status(probes, "SERVING", served=served)
    return served, api, probes
