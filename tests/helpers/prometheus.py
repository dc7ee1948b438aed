"""A real Prometheus server (Debian's `prometheus`, which `make deploy-tools` installs) on
loopback, scraping targets of the test's own every second and evaluating rule files, and its
HTTP API as the tests and the monitoring screenshot use it."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from tests.harness import free_port

SCRAPE_SECONDS = 1


class Prometheus:
    """``prometheus`` scraping ``targets`` (HOST:PORT, each with labels of its own), its data
    in ``folder``; ``rule_files`` evaluated every second; ``extra_flags`` on its command line.
    Stop it with :meth:`stop`."""

    def __init__(
        self,
        folder: Path,
        targets: Mapping[str, Mapping[str, str]],
        rule_files: Sequence[Path] = (),
        extra_flags: Sequence[str] = (),
    ) -> None:
        binary = shutil.which("prometheus")
        assert binary is not None, "prometheus is missing: run `make deploy-tools`"
        folder.mkdir(parents=True, exist_ok=True)
        config = {
            "global": {
                "scrape_interval": f"{SCRAPE_SECONDS}s",
                "evaluation_interval": f"{SCRAPE_SECONDS}s",
            },
            "rule_files": [str(path) for path in rule_files],
            "scrape_configs": [
                {
                    "job_name": "actonce",
                    "static_configs": [
                        {"targets": [target], "labels": dict(labels)}
                        for target, labels in targets.items()
                    ],
                }
            ],
        }
        (folder / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = (folder / "prometheus.log").open("wb")
        self._process = subprocess.Popen(
            [
                binary,
                f"--config.file={folder / 'prometheus.yml'}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                *extra_flags,
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self._folder = folder
        self._wait_ready()

    def _wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self._process.poll() is None, f"prometheus exited: {self.log()}"
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError):
                pass
            time.sleep(0.1)
        raise AssertionError(f"prometheus not ready in {timeout} s: {self.log()}")

    def log(self) -> str:
        return (self._folder / "prometheus.log").read_text()[-3000:]

    def api(self, path: str, **params: str | Sequence[str]) -> Any:
        """``GET /api/v1/PATH`` with ``params``; the answer's JSON, whatever its status (a
        query that does not parse answers 400 with ``status: error``)."""
        query = urllib.parse.urlencode(params, doseq=True)
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as a:
                return json.load(a)
        except urllib.error.HTTPError as error:
            return json.load(error)

    def query(self, expr: str) -> Any:
        return self.api("query", query=expr)

    def wait_for_scrapes(self, count: int, timeout: float = 30.0) -> None:
        """Until every target was scraped ``count`` times, successfully."""
        deadline = time.monotonic() + timeout
        expr = f"min(count_over_time(up[5m])) >= {count} and min(up) == 1"
        while time.monotonic() < deadline:
            if self.query(expr)["data"]["result"]:
                return
            time.sleep(SCRAPE_SECONDS / 4)
        raise AssertionError(f"fewer than {count} scrapes in {timeout} s: {self.log()}")

    def stop(self) -> None:
        self._process.terminate()
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(10)
        self._log.close()
