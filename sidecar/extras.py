"""The features that come with an extra of the ``actonce`` package, and the one line that
says how to install one that is missing.

The sidecar alone (``make run``, ``pip install actonce``) serves with the embedded store
and an SQLite ledger. The MCP front, traces, the console and PostgreSQL each import their
libraries only when asked for; asking for one whose extra is not installed stops start-up
with the command that installs it, never with an ImportError's traceback.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from sidecar import version


@dataclass(frozen=True)
class Extra:
    name: str
    # One module of each distribution the extra installs: all must be importable.
    modules: tuple[str, ...]


MCP = Extra("mcp", ("mcp", "yaml"))
OTEL = Extra(
    "otel",
    (
        "opentelemetry.sdk",
        "opentelemetry.exporter.otlp.proto.grpc",
        "opentelemetry.instrumentation.grpc",
    ),
)
CONSOLE = Extra("console", ("starlette", "jinja2", "uvicorn", "multipart", "itsdangerous"))
POSTGRES = Extra("postgres", ("psycopg",))


class MissingExtra(Exception):
    """A feature was asked for whose extra is not installed; the message says how to install it."""


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def require(extra: Extra, feature: str) -> None:
    """Raise MissingExtra naming ``feature`` and the install command when ``extra`` is missing."""
    missing = [module for module in extra.modules if not _installed(module)]
    if missing:
        raise MissingExtra(
            f"{feature} needs actonce's {extra.name!r} extra, which is not installed (no "
            f"module {missing[0]!r}): in a clone, .venv/bin/pip install -e '.[{extra.name}]' "
            f"(make test installs every extra); from the wheel, pip install "
            f"'actonce-{version()}-py3-none-any.whl[{extra.name}]'"
        )
