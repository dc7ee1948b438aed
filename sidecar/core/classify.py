"""The store's answers as the core's: a used id counts as done, any other refusal
is an error that keeps the store's code as its reason (docs/design.md, refusals)."""

from __future__ import annotations

from sidecar.core.types import Outcome, WriteResult
from sidecar.errors import StoreRefused
from sidecar.refstore.backend import StoredArtifact
from sidecar.rules import refusals
from sidecar.upstream.base import Refusal, StoreClient


def refused(refusal: Refusal) -> StoreRefused:
    """The error a store refusal is answered with, classed by its code."""
    metadata = {"states": ",".join(sorted(refusal.states))} if refusal.states else {}
    return StoreRefused(
        f"the store refused: {refusal.message}",
        reason=refusal.code,
        failure_class=refusals.failure_class(refusal.code),
        metadata=metadata,
    )


def already_applied(refusal: Refusal, *, id: str, version: int = 0) -> WriteResult:
    """ALREADY_APPLIED when the store refused only because the derived id is used
    (an earlier attempt made the write); else the refusal, as an error."""
    if refusals.is_used_id_only(refusal.code, refusal.states):
        return WriteResult(Outcome.ALREADY_APPLIED, id=id, version=version)
    raise refused(refusal) from refusal


async def get_artifact(
    store: StoreClient, artifact_id: str, *, timeout: float | None = None
) -> StoredArtifact:
    """The artifact, or the store's refusal as an error."""
    try:
        return await store.get_artifact(artifact_id, timeout=timeout)
    except Refusal as refusal:
        raise refused(refusal) from refusal
