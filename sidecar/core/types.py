"""The core's own records: what a write answers, an attempt's counts, a read, the settings.

Every front (gRPC, MCP) turns these into its protocol's answers; the core takes and
returns nothing else. The store's records are the store contract's
(:mod:`sidecar.store_contract`): the gRPC store client decodes its messages into them, and
the reference store answers with them.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from sidecar import defaults
from sidecar.store_contract import StoredArtifact, StoredMessage


class Outcome(enum.StrEnum):
    """Mirrors actonce.v1.Outcome by name."""

    APPLIED = "OUTCOME_APPLIED"
    ALREADY_APPLIED = "OUTCOME_ALREADY_APPLIED"
    SKIPPED = "OUTCOME_SKIPPED"


@dataclass(frozen=True)
class WriteResult:
    """What a successful write answers."""

    outcome: Outcome
    id: str = ""
    version: int = 0
    proposal_id: str = ""
    result_json: str = ""


@dataclass(frozen=True)
class StepPermit:
    """The ledger's leave to send one step's call, and the call's one deadline.

    ``seconds`` is the whole call's budget (connect, send, every byte of the answer): the
    smaller of the caller's timeout and what is left of the attempt's lease, fixed when the
    ledger granted the permit and recorded with it (``deadline``, by the ledger's clock).
    ``started`` is this process's monotonic clock taken *before* the permit was asked for,
    so that the bound measured here never ends later than the one the ledger recorded,
    whatever the process waits for in between (a scheduler, a handshake, a freeze).
    """

    step_id: str
    seconds: float
    started: float
    deadline: str = ""

    def left(self) -> float:
        """Seconds of the call's budget still left, by this process's monotonic clock."""
        return self.seconds - (time.monotonic() - self.started)

    def expired(self) -> bool:
        """Whether the call may no longer be sent (or go on)."""
        return self.left() <= 0.0


@dataclass(frozen=True)
class AttemptCounts:
    """An attempt's writes by outcome (EndAttempt). A step counts once, by its begin's
    outcome: its end or abort is not another write."""

    applied: int
    already_applied: int
    skipped: int
    failed: int


@dataclass(frozen=True)
class ReadResult:
    """An artifact, or a thread's messages."""

    artifact: StoredArtifact | None = None
    messages: Sequence[StoredMessage] = field(default_factory=tuple)


@dataclass
class Settings:
    """The operator's choices that the rules consult."""

    send_allowlist: Collection[str] = frozenset()
    # The rules this sidecar serves (--rules); None serves any rule the agent names.
    # Pinned by the operator, so that the send allowlist does not rest on the agent's
    # word for which rule it runs.
    rules: Collection[str] | None = None
    # A write needs this much lease left: the store call's own deadline, so
    # that no write is still in flight when the queue hands the run on.
    store_timeout_seconds: float = defaults.STORE_TIMEOUT_SECONDS
    # The derived-id scheme of a (run, scope) the ledger has no attempt of; one
    # it has keeps the scheme its first attempt began with.
    id_scheme: int = defaults.ID_SCHEME
    # How long a BeginStep that repeats a step of its attempt still running waits for
    # that step to end, before it is answered without its result.
    step_repeat_wait_seconds: float = defaults.STEP_REPEAT_WAIT_SECONDS
    # This sidecar process's id, which its attempts' begins record and its heartbeat in
    # the ledger names (sidecar.ledger.liveness); "" when it beats no heartbeat.
    sidecar_id: str = ""
