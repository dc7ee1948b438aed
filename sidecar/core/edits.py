"""An edit's perform: what an Edit asks of the store, and how its answers are read.

It reads the artifact, skips a value already there, else patches it at the version it
read (or proposes the patch); a VERSION_CONFLICT reads it again, a bounded number of
times. The patch is chosen by :mod:`sidecar.rules.edits`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from sidecar import store_contract
from sidecar.core.edit_queue import EditQueue, QueueTooSlow
from sidecar.core.types import Outcome, WriteResult
from sidecar.errors import ArtifactArchived, StoreDeadlineExceeded
from sidecar.rules import edits
from sidecar.store_contract import ARCHIVED, Principal, Refusal, RefusalCode, StoredArtifact
from sidecar.upstream.base import GetArtifact, PatchArtifact, ProposePatch, StoreClient

log = structlog.get_logger()

# A VERSION_CONFLICT re-reads the artifact and edits again this many times
# within the attempt before the attempt fails to be retried.
VERSION_CONFLICT_REREADS = 3


@dataclass(frozen=True)
class Edit:
    """An edit's perform: read the artifact, skip the value already there, else patch
    it (or propose the patch); after a VERSION_CONFLICT, read it again, a bounded
    number of times in the attempt. A patch waits in its artifact's queue, so that the
    sidecar's own edits of it do not conflict with each other; a proposal patches nothing
    and does not queue."""

    store: StoreClient
    deadline: Callable[[], float]
    on_reread: Callable[[], None]
    queue: EditQueue
    artifact_id: str
    pointer: str
    value: Any
    propose: bool
    # The rule it acts for (and the owner a grant opened): the store checks the artifact's.
    principal: Principal | None = None

    async def perform(self, derived: str) -> WriteResult:
        if self.propose:
            return await self._edit(derived)
        try:
            async with self.queue.of(self.artifact_id, wait_seconds=self.deadline()):
                return await self._edit(derived)
        except QueueTooSlow:
            raise StoreDeadlineExceeded(
                f"edits of artifact {self.artifact_id} queued in this sidecar past the store's "
                "deadline; this one was not sent, and a retry with the same derived id is safe",
                nothing_sent=True,
            ) from None

    async def _edit(self, derived: str) -> WriteResult:
        conflicts = 0
        while True:
            artifact = await self._read(reread=conflicts > 0)
            document = json.loads(artifact.data_json)
            if edits.holds(document, self.pointer, self.value):
                return WriteResult(Outcome.SKIPPED, version=artifact.version)
            patch = edits.set_patch(document, self.pointer, self.value)
            try:
                return await self._apply(derived, artifact, patch)
            except Refusal as refusal:
                if refusal.code == RefusalCode.VERSION_CONFLICT:
                    conflicts += 1
                    log.info("version_conflict_reread", rereads=conflicts)
                    if conflicts <= VERSION_CONFLICT_REREADS:
                        continue
                return self._refused(derived, artifact, refusal)

    async def _read(self, *, reread: bool) -> StoredArtifact:
        timeout = self.deadline()
        if reread:
            self.on_reread()
        try:
            artifact = await self.store.call(GetArtifact(self.artifact_id, self.principal), timeout)
        except Refusal as refusal:
            raise store_contract.as_error(refusal) from refusal
        if artifact.archived:
            raise ArtifactArchived(
                f"artifact {self.artifact_id} is archived; an edit of it is refused "
                "before it is tried",
                metadata={"states": ARCHIVED},
            )
        return artifact

    async def _apply(self, derived: str, artifact: StoredArtifact, patch: str) -> WriteResult:
        timeout = self.deadline()
        if self.propose:
            proposal = ProposePatch(
                derived, self.artifact_id, patch, artifact.version, self.principal
            )
            await self.store.call(proposal, timeout)
            return WriteResult(Outcome.APPLIED, version=artifact.version, proposal_id=derived)
        edit = PatchArtifact(self.artifact_id, artifact.version, patch, self.principal)
        patched = await self.store.call(edit, timeout)
        return WriteResult(Outcome.APPLIED, version=patched.version)

    def _refused(self, derived: str, artifact: StoredArtifact, refusal: Refusal) -> WriteResult:
        if not (self.propose and store_contract.counts_as_done(refusal)):
            raise store_contract.as_error(refusal) from refusal
        return WriteResult(Outcome.ALREADY_APPLIED, version=artifact.version, proposal_id=derived)
