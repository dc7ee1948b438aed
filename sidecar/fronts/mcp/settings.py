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


@dataclass(frozen=True)
class ToolSpec:
    """What the operator's effects file says of one upstream tool.

    ``key_argument`` / ``key_meta``: where the tool takes an idempotency key (an
    argument, or a ``_meta`` key); the gateway fills it from the step id, which is
    the same on every attempt. ``errors_mean_nothing_happened``: the tool's error
    answers (``isError``) say it did not act.

    A key is checked against the upstream's listing of the tool: an argument must be one
    of its ``inputSchema.properties``, and a ``_meta`` key must be declared by the tool,
    as a key of the ``_meta`` object of its listing (``"_meta": {"payments/idempotency_key":
    "..."}``), since MCP has no other place for a tool to say which ``_meta`` keys it reads.
    A key the listing does not take would reach no one: the tool is then called unkeyed,
    and reported (sidecar.fronts.mcp.gateway).
    """

    effect: ToolEffect = ToolEffect.NON_IDEMPOTENT_WRITE
    key_argument: str = ""
    key_meta: str = ""
    errors_mean_nothing_happened: bool = False

    @property
    def keyed(self) -> bool:
        return bool(self.key_argument or self.key_meta)

    @property
    def step_effect(self) -> ToolEffect:
        """The effect its steps are bracketed with: a write that takes its key is sent
        again with the same key, as an idempotent one is, instead of going in doubt."""
        if self.keyed and self.effect is ToolEffect.NON_IDEMPOTENT_WRITE:
            return ToolEffect.IDEMPOTENT_WRITE
        return self.effect

    @property
    def label(self) -> str:
        """How the tool's listing names its class to the model and the operator."""
        keyed = " (idempotency key filled by actonce)" if self.keyed else ""
        return f"{EFFECT_PREFIX}{self.effect.name}{keyed}"


UNLISTED = ToolSpec()

_SPEC_KEYS = frozenset({"effect", "idempotency_key", "errors_mean_nothing_happened"})


def load_effects(path: Path) -> dict[str, ToolSpec]:
    """The operator's effects file: a JSON or YAML map from ``NAME__tool`` to either a
    ``ToolEffect`` value name (``TOOL_EFFECT_NON_IDEMPOTENT_WRITE``, ...) or an object:
    ``{"effect": ..., "idempotency_key": {"argument": NAME} or {"meta": KEY},
    "errors_mean_nothing_happened": true}``. The file is read here alone; what it says
    is checked against each upstream's listing when the gateway lists it (ToolSpec)."""
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
        raise ValueError("expected a map from NAME__tool to a ToolEffect value name or object")
    specs: dict[str, ToolSpec] = {}
    for name, value in loaded.items():
        if not isinstance(name, str) or SEPARATOR not in name:
            raise ValueError(f"{name!r} is not a listed tool name (NAME__tool)")
        specs[name] = _spec(name, value)
    return specs


def _spec(name: str, value: Any) -> ToolSpec:
    if not isinstance(value, Mapping):
        return ToolSpec(_effect(name, value))
    unknown = set(value) - _SPEC_KEYS
    if unknown:
        raise ValueError(f"{name}: unknown keys {sorted(unknown)}; allowed: {sorted(_SPEC_KEYS)}")
    if "effect" not in value:
        raise ValueError(f"{name}: name its effect (effect: TOOL_EFFECT_...)")
    argument, meta = _key_place(name, value.get("idempotency_key"))
    nothing = value.get("errors_mean_nothing_happened", False)
    if not isinstance(nothing, bool):
        raise ValueError(f"{name}: errors_mean_nothing_happened is true or false")
    return ToolSpec(_effect(name, value["effect"]), argument, meta, nothing)


def _effect(name: str, value: Any) -> ToolEffect:
    member = str(value).removeprefix(EFFECT_PREFIX)
    if not isinstance(value, str) or member not in ToolEffect.__members__:
        allowed = ", ".join(EFFECT_PREFIX + m for m in ToolEffect.__members__)
        raise ValueError(f"{name}: {value!r} is not one of {allowed}")
    return declared(ToolEffect[member])


def _key_place(name: str, value: Any) -> tuple[str, str]:
    if value is None:
        return "", ""
    if not isinstance(value, Mapping) or len(value) != 1 or set(value) - {"argument", "meta"}:
        raise ValueError(f"{name}: idempotency_key is {{argument: NAME}} or {{meta: KEY}}")
    ((where, key),) = value.items()
    if not isinstance(key, str) or not key:
        raise ValueError(f"{name}: idempotency_key's {where} is a non-empty string")
    return (key, "") if where == "argument" else ("", key)
