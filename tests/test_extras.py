"""A feature whose extra is not installed stops start-up with the line that says what to install.

The extra is hidden from the child process (``sys.modules[name] = None`` makes every import
and ``find_spec`` of it fail, as in an environment that lacks it); the install test
(clients/crosslang/test_install.py) meets the same lines from a real install of the
sidecar's wheel alone.
"""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from tests.helpers.env import scrubbed_env


def _without(modules: list[str], *args: str, env: dict[str, str] | None = None) -> str:
    hide = "".join(f"sys.modules[{m!r}] = None; " for m in modules)
    code = f"import sys; {hide}from sidecar.cli import main; main({list(args)!r})"
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=scrubbed_env(env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize(
    ("hidden", "args", "env", "feature", "extra"),
    [
        (["mcp"], ["serve", "--mcp-listen", "127.0.0.1:0"], None, "--mcp-listen", "mcp"),
        (
            ["opentelemetry"],
            ["serve", "--listen", "127.0.0.1:0"],
            {"OTEL_TRACES_EXPORTER": "console"},
            "traces",
            "otel",
        ),
        (["starlette"], ["console"], None, "actonce console", "console"),
        (
            ["psycopg"],
            ["audit", "list", "--audit-dsn", "postgresql://127.0.0.1:1/none"],
            None,
            "--audit-dsn",
            "postgres",
        ),
        (
            ["psycopg"],
            ["store", "--store-dsn", "postgresql://127.0.0.1:1/none"],
            None,
            "--store-dsn",
            "postgres",
        ),
    ],
)
def test_a_missing_extra_is_named_with_its_install_command(
    hidden: list[str], args: list[str], env: dict[str, str] | None, feature: str, extra: str
) -> None:
    line = _without(hidden, *args, env=env)
    assert line.startswith(f"actonce: error: {feature}"), line
    assert f".venv/bin/pip install -e '.[{extra}]'" in line, line
    assert f"-py3-none-any.whl[{extra}]'" in line, line
    assert "Traceback" not in line


def test_the_sidecar_alone_serves_without_any_extra_loaded() -> None:
    """What `actonce serve` imports with no feature asked for: none of the extras."""
    code = (
        "import sys; import sidecar.cli, sidecar.assembly.server, sidecar.demo; "
        "print(sorted({m.split('.')[0] for m in sys.modules}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=scrubbed_env(None), capture_output=True, text=True
    )
    loaded = set(ast.literal_eval(done.stdout))
    assert not loaded & {"mcp", "yaml", "opentelemetry", "starlette", "jinja2", "uvicorn",
                         "psycopg", "multipart", "itsdangerous"}, loaded  # fmt: skip


def test_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sidecar.cli", "--version"], capture_output=True, text=True
    )
    assert done.returncode == 0
    from sidecar import version

    assert done.stdout.strip() == f"actonce {version()}"
