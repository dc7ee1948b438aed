"""The environment a child ``actonce`` process is started with."""

from __future__ import annotations

import os
from collections.abc import Mapping


def scrubbed_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without any ACTONCE_* setting, plus ``extra``.

    ``actonce`` refuses an ACTONCE_* variable it does not know (the tests' and the
    benchmarks' own are such), and a child must not take a developer's settings for its own.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACTONCE_")}
    env.update(extra or {})
    return env
