"""Reading a command's settings: each one a flag of its parser, or else its ``ACTONCE_*``
variable, parsed; a malformed one refused with the one line the user sees."""

from __future__ import annotations

import argparse
import os
from typing import Any

from sidecar.config import commands
from sidecar.config.setting import Setting


class ConfigError(Exception):
    """A setting that cannot be used; its message is the one line the user sees."""


def add_settings(parser: argparse.ArgumentParser, settings: dict[str, Setting]) -> None:
    for flag, setting in settings.items():
        action = "append" if setting.repeatable else "store"
        shown = f"{setting.help}{setting.shown_default()} [env {setting.env}]"
        metavar = flag.removeprefix("--").replace("-", "_").upper()
        parser.add_argument(
            flag, dest=setting.dest, metavar=metavar, default=None, action=action, help=shown
        )


def given(args: argparse.Namespace, settings: dict[str, Setting]) -> dict[str, Any]:
    """The settings given by a flag or a variable, parsed, by their keys; a DSN read from
    its file in the DSN's place."""
    values: dict[str, Any] = {}
    for flag, setting in settings.items():
        raw, source = getattr(args, setting.dest), flag
        if isinstance(raw, list):
            raw = ",".join(raw)
        if raw is None:
            raw, source = os.environ.get(setting.env) or None, setting.env
        if raw is not None:
            values[setting.dest] = _parsed(setting, raw, source)
    return _from_files(values, settings)


def _parsed(setting: Setting, raw: str, source: str) -> Any:
    try:
        return setting.parse(raw)
    except ValueError as exc:
        # A DSN carries its password: the one line names the setting, not its value.
        shown = "" if setting.env.endswith("_DSN") else f"={raw!r}"
        raise ConfigError(f"{source}{shown} is not valid: {exc}") from None


def _from_files(given: dict[str, Any], settings: dict[str, Setting]) -> dict[str, Any]:
    """A value read from its file takes the value's place; both at once name it twice."""
    for setting in settings.values():
        if setting.file_of is None or setting.dest not in given:
            continue
        if setting.file_of in given:
            flag = setting.flag.removesuffix("-file")
            raise ConfigError(f"{flag} and {setting.flag} both name a DSN: give one")
        given[setting.file_of] = given.pop(setting.dest)
    return given


def resolve(args: argparse.Namespace, settings: dict[str, Setting]) -> dict[str, Any]:
    """Every setting of a command, given or its default."""
    defaults = {s.dest: s.default for s in settings.values() if s.file_of is None}
    return defaults | given(args, settings)


def check_environment() -> None:
    known = commands.known_variables()
    unknown = sorted(k for k in os.environ if k.startswith("ACTONCE_") and k not in known)
    if unknown:
        raise ConfigError(f"unknown setting {unknown[0]} (see actonce serve --help)")
