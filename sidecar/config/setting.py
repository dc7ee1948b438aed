"""One setting: its flag, its ``ACTONCE_*`` variable, its parser, its default and its help.

The sidecar's settings are the fields of :class:`sidecar.config.Config`, each declared with
:func:`setting`; the command line builds ``actonce serve``'s flags, reads the variables and
fills a Config from those fields alone. The other commands' settings are tables of
:class:`Setting` (:mod:`sidecar.config.commands`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from sidecar.config import values

_SETTING = "setting"


@dataclass(frozen=True)
class Setting:
    """A flag and its variable. ``dest`` is the key its value is given under (a Config
    field's name, or the flag's name in snake case); a setting that reads another's value
    from a file (a Secret mount) names that other's key as ``file_of``."""

    flag: str
    env: str
    parse: Callable[[str], Any]
    help: str
    default: Any = None
    repeatable: bool = False
    dest: str = ""
    file_of: str | None = None

    def __post_init__(self) -> None:
        if not self.dest:
            object.__setattr__(self, "dest", self.flag.lstrip("-").replace("-", "_"))

    def shown_default(self) -> str:
        """The default as the help shows it; nothing for an empty or absent one."""
        default = self.default
        if default in (None, frozenset(), {}, ()):
            return ""
        if isinstance(default, frozenset | tuple):
            default = ",".join(sorted(default))
        return f" (default {default})"

    def renamed(self, flag: str, help: str) -> Setting:
        """The same variable, parser and default under another command's flag."""
        return dataclasses.replace(self, flag=flag, help=help, dest="")


def setting(
    flag: str,
    env: str,
    parse: Callable[[str], Any],
    help: str,
    default: Any = None,
    *,
    repeatable: bool = False,
    dsn_from_file: bool = False,
) -> Any:
    """A Config field that is a setting, with ``default`` when neither flag nor variable
    gives it. ``dsn_from_file`` adds the ``FLAG-file`` setting that reads the DSN from a
    file instead (a Secret mount)."""
    declared = Setting(flag, env, parse, help, default, repeatable)
    metadata = {_SETTING: (declared, dsn_from_file)}
    if isinstance(default, dict):
        return dataclasses.field(default_factory=dict, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def settings_of(kind: type) -> Iterator[Setting]:
    """The settings a dataclass declares, in its fields' order, each keyed by its field."""
    for field in dataclasses.fields(kind):
        if _SETTING not in field.metadata:
            continue
        declared, dsn_from_file = field.metadata[_SETTING]
        named = dataclasses.replace(declared, dest=field.name)
        yield named
        if dsn_from_file:
            yield _read_from_file(named)


def _read_from_file(named: Setting) -> Setting:
    flag = named.flag.removeprefix("--")
    return Setting(
        f"--{flag}-file",
        f"{named.env}_FILE",
        values.dsn_file,
        f"file holding --{flag}'s DSN (a Secret mount), instead of it",
        file_of=named.dest,
    )
