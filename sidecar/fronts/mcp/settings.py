"""The gateway's settings, read at start-up: upstreams, their headers, the effects file.

Kept apart from the MCP SDK, so that the command line checks them cheaply.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sidecar.rules.effects import ToolEffect, declared

SEPARATOR = "__"
EFFECT_PREFIX = "TOOL_EFFECT_"


@dataclass(frozen=True)
class Upstream:
    """One upstream MCP server: its name (the prefix of its tools), URL and headers."""

    name: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)


def read_headers(path: Path) -> dict[str, str]:
    """HTTP headers from a file, one ``Name: value`` a line (a Secret mount, for tokens)."""
    headers: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, value = line.partition(":")
        if not sep or not name.strip() or " " in name.strip():
            raise ValueError(f"{path}:{number}: expected 'Name: value'")
        headers[name.strip()] = value.strip()
    return headers


def load_effects(path: Path) -> dict[str, ToolEffect]:
    """The operator's effects file: a JSON or YAML map from ``NAME__tool`` to a
    ``ToolEffect`` value name (``TOOL_EFFECT_NON_IDEMPOTENT_WRITE``, ...)."""
    text = path.read_text(encoding="utf-8")
    loaded: Any
    if path.suffix.lower() == ".json":
        loaded = json.loads(text)
    else:
        import yaml

        try:
            loaded = yaml.safe_load(text)  # YAML is a superset of JSON: either form reads
        except yaml.YAMLError as exc:
            raise ValueError(f"not YAML: {exc}") from None
    if loaded is None:
        loaded = {}
    if not isinstance(loaded, dict):
        raise ValueError("expected a map from NAME__tool to a ToolEffect value name")
    effects: dict[str, ToolEffect] = {}
    for name, value in loaded.items():
        if not isinstance(name, str) or SEPARATOR not in name:
            raise ValueError(f"{name!r} is not a listed tool name (NAME__tool)")
        member = str(value).removeprefix(EFFECT_PREFIX)
        if not isinstance(value, str) or member not in ToolEffect.__members__:
            allowed = ", ".join(EFFECT_PREFIX + m for m in ToolEffect.__members__)
            raise ValueError(f"{name}: {value!r} is not one of {allowed}")
        effects[name] = declared(ToolEffect[member])
    return effects
