"""What a run id and a rule may be: names a person reads, in a terminal and on a page.

Both are chosen by the caller of BeginAttempt, then printed to operators (``actonce
audit``, the console) and kept in every audit event of the run. So each is a non-empty
name, of at most :data:`MAX_RUN_ID_BYTES` (:data:`MAX_RULE_BYTES`) bytes of UTF-8, with
no control character (C0, DEL, C1: escape sequences, line breaks, NUL). Output escapes
such characters anyway (sidecar.ops.terminal), for events recorded before this rule.
"""

from __future__ import annotations

import re

from sidecar.errors import InvalidArgument
from sidecar.rules import canonical

# A run id is often a queue's message id or a workflow's key; 512 bytes, as every name.
MAX_RUN_ID_BYTES = canonical.MAX_NAME_BYTES
# A rule is an automation's name, named again in --rules, --send-allowlist and grants.
MAX_RULE_BYTES = 256

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def require_run(run_id: str, rule: str) -> None:
    """Refuse a run id or a rule that is not a name a person can be shown."""
    _require(run_id, "run_id", MAX_RUN_ID_BYTES)
    _require(rule, "rule", MAX_RULE_BYTES)


def _require(value: str, field: str, limit: int) -> None:
    canonical.require_text(value, field, limit=limit)
    control = _CONTROL.search(value)
    if control is not None:
        raise InvalidArgument(
            field, f"holds a control character (U+{ord(control.group()):04X}) at {control.start()}"
        )
