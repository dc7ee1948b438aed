"""The TypeScript MCP SDK's client against a live ``actonce serve --mcp-listen``.

Its tests are in typescript/front.test.mjs; ``make test`` installs their package
(mk/mcp.mk) before the Python tests run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.harness import free_port, sidecar_config, spawn_sidecar

PACKAGE = Path(__file__).parent / "typescript"


def test_the_typescript_sdk_client_passes_its_tests(tmp_path: Path) -> None:
    node = shutil.which("node")
    assert node, "node is needed: install Node.js 20 or later"
    assert (PACKAGE / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir(), (
        "the TypeScript client's package is not installed: run `make mcp-typescript-deps`"
    )
    port = free_port()
    config = sidecar_config(tmp_path / "data")
    sidecar = spawn_sidecar(config, tmp_path / "sidecar.log", "--mcp-listen", f"127.0.0.1:{port}")
    try:
        run = subprocess.run(
            [node, "--test", "--test-reporter=spec", "front.test.mjs"],
            cwd=PACKAGE,
            env={**os.environ, "ACTONCE_MCP_BASE": f"http://127.0.0.1:{port}"},
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        sidecar.stop()
    assert run.returncode == 0, run.stdout + run.stderr
    assert "pass 3" in run.stdout and "fail 0" in run.stdout, run.stdout
