"""actonce: the sidecar, its reference store, its ledger and its commands."""

from __future__ import annotations

import importlib.metadata


def version() -> str:
    """The installed actonce's version, as its package metadata has it."""
    return importlib.metadata.version("actonce")
