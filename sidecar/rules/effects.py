"""Tool effects (ADR-111): what each call does to the world, fixed in code.

Each builtin RPC's effect is a property of this module, not of configuration,
so that no operator can relabel a write to dodge fail-closed audit. Resolving
by name is stricter than declaring: a name this code does not know (a stale
tool in a step read back from the ledger) is a non-idempotent write, the
class that is audited fail-closed and never re-run automatically.
"""

from __future__ import annotations

import enum
from types import MappingProxyType


class ToolEffect(enum.IntEnum):
    """Mirrors actonce.v1.ToolEffect; values match the wire numbers."""

    UNSPECIFIED = 0
    READ_ONLY = 1
    IDEMPOTENT_WRITE = 2
    NON_IDEMPOTENT_WRITE = 3


# Builtin RPCs. The writes are idempotent because their ids are derived and
# the store refuses a used id; Edit is keyed to its path.
BUILTIN_EFFECTS = MappingProxyType(
    {
        "Read": ToolEffect.READ_ONLY,
        "Create": ToolEffect.IDEMPOTENT_WRITE,
        "Edit": ToolEffect.IDEMPOTENT_WRITE,
        "Notice": ToolEffect.IDEMPOTENT_WRITE,
        "CreateThread": ToolEffect.IDEMPOTENT_WRITE,
        "Send": ToolEffect.IDEMPOTENT_WRITE,
    }
)


def declared(effect: ToolEffect | int) -> ToolEffect:
    """The effect a step declared; unspecified (or unknown) counts as non-idempotent."""
    try:
        value = ToolEffect(effect)
    except ValueError:
        return ToolEffect.NON_IDEMPOTENT_WRITE
    if value is ToolEffect.UNSPECIFIED:
        return ToolEffect.NON_IDEMPOTENT_WRITE
    return value


def effect_for(name: str) -> ToolEffect:
    """The effect of a builtin by name; any name the code does not know is a
    non-idempotent write."""
    return BUILTIN_EFFECTS.get(name, ToolEffect.NON_IDEMPOTENT_WRITE)


def is_write(effect: ToolEffect) -> bool:
    """Writes are audited fail-closed; reads fail-soft."""
    return declared(effect) is not ToolEffect.READ_ONLY
