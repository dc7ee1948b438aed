"""Reads: an artifact, or a thread's messages. Their audit is best effort: a ledger
failure is logged, and the read still answers."""

from __future__ import annotations

from sidecar import store_contract
from sidecar.core.attempts import Attempt
from sidecar.core.audit import Audit, Subject, event
from sidecar.core.types import ReadResult
from sidecar.errors import ActonceError
from sidecar.ledger.base import Phase
from sidecar.store_contract import Principal, Refusal
from sidecar.upstream.base import GetArtifact, ListMessages, StoreClient


class Reads:
    """Read, audited best effort."""

    def __init__(self, store: StoreClient, audit: Audit) -> None:
        self.store = store
        self.audit = audit

    async def read(
        self,
        attempt: Attempt,
        *,
        artifact_id: str | None,
        thread_id: str | None,
        principal: Principal | None = None,
    ) -> ReadResult:
        """Read as ``principal`` (the rule it acts for, and the owner a grant opened), which
        the store checks the target's owner against (sidecar.core.access)."""
        target = artifact_id if artifact_id is not None else (thread_id or "")
        try:
            result = await self._fetch(artifact_id, thread_id, principal)
        except ActonceError as error:
            await self._audit(attempt, target, error)
            raise
        await self._audit(attempt, target, None)
        return result

    async def _fetch(
        self, artifact_id: str | None, thread_id: str | None, principal: Principal | None
    ) -> ReadResult:
        try:
            if artifact_id is not None:
                artifact = await self.store.call(GetArtifact(artifact_id, principal))
                return ReadResult(artifact=artifact)
            messages = await self.store.call(ListMessages(thread_id or "", principal))
        except Refusal as refusal:
            raise store_contract.as_error(refusal) from refusal
        return ReadResult(messages=tuple(messages))

    async def _audit(self, attempt: Attempt, target: str, error: ActonceError | None) -> None:
        read = event(attempt, "Read", Phase.READ, Subject(derived_id=target), refused=error)
        await self.audit.best_effort(read, lost="read_audit_failed")
