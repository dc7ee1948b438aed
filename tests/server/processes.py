"""``actonce`` commands in child processes, as an operator or a kubelet runs them."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.harness import free_port
from tests.helpers.env import scrubbed_env
from tests.helpers.health import NeverAnswered, wait_for_health


def run_cli(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    """Run ``actonce ARGS`` to completion and capture what it printed."""
    return subprocess.run(
        [sys.executable, "-m", "sidecar.cli", *args],
        env=scrubbed_env(env),
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
            env=scrubbed_env(env),
        )
    return Served(process, log_path)


def start_server(
    tmp_path: Path,
    command: str,
    listen: str,
    *flags: str,
    data: str = "data",
    env: Mapping[str, str] | None = None,
) -> Served:
    """``actonce COMMAND`` (serve or store) listening on ``listen``, its data in
    ``tmp_path/DATA``, JSON lines to ``tmp_path/DATA.log``, with ``flags``."""
    return start_cli(
        tmp_path / f"{data}.log",
        command,
        "--listen",
        listen,
        "--data-dir",
        str(tmp_path / data),
        "--log-format",
        "json",
        *flags,
        env=env,
    )


def wait_for_status(
    target: str,
    wanted: str,
    *,
    served: Served | None = None,
    service: str = "",
    timeout: float = 30,
) -> None:
    """Ask until the health service at ``target`` answers ``wanted``; a failure shows the
    end of the command's output."""
    process = served.process if served is not None else None
    try:
        wait_for_health(target, wanted, process=process, service=service, timeout=timeout)
    except NeverAnswered as never:
        log = served.log()[-2000:] if served else ""
        raise AssertionError(f"{never}. {log}") from None


def serve_draining(
    tmp_path: Path, store_target: str, grace: float, *extra: str
) -> tuple[Served, str, str]:
    """`actonce serve` against ``store_target`` with a ``grace`` period, SERVING; its API and
    probe addresses."""
    api, probes = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    served = start_server(
        tmp_path,
        "serve",
        api,
        "--health-listen",
        probes,
        "--store-target",
        store_target,
        "--grace-period",
        str(grace),
        *extra,
    )
    wait_for_status(probes, "SERVING", served=served)
    return served, api, probes
