"""Who may reach what: an attempt reaches the artifacts and threads its rule owns, and others
only where the operator's grants open them (:mod:`sidecar.rules.grants`).

Before a Read, an Edit (or its proposal), a Notice or a Send reaches its target, the core asks
the store who owns it (:class:`~sidecar.upstream.base.GetOwner`) and decides by the grants.
A call its rule may not make is refused with FORBIDDEN (``PERMANENT``) before the store sees
it, its ErrorInfo naming the target's owner and the grant it lacks, and audited as a refusal
under the run that tried. One it may make is sent with the :class:`Principal` it acts for:
the store checks the owner again, in the write's own transaction.

Why a read of the owner beforehand is correct under concurrency: an owner is set once and
never changed. A create records it; data made before owners were recorded gets one, once, from
``actonce store assign-owners``, and nothing changes it after. So an owner this sidecar read
is still the owner when its write lands, and is kept (a bounded cache: a target's second call
asks nothing). The one change there can be, an unowned target getting its owner between the
read and the write, is caught by the store itself, which checks the principal against the row
the write reads in its transaction (``store_contract.may_reach``): the write is refused
FORBIDDEN there, and nothing lands. Unowned targets are therefore never kept.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from sidecar import store_contract
from sidecar.core.attempts import Attempt, store_deadline
from sidecar.core.audit import Audit, Subject, event
from sidecar.errors import NotGranted
from sidecar.ledger.base import Phase
from sidecar.rules.grants import ARTIFACT, THREAD, Access, Grants
from sidecar.store_contract import Owner, Principal, Refusal, RefusalCode
from sidecar.upstream.base import GetOwner, StoreClient

__all__ = ["ARTIFACT", "THREAD", "Access", "Owners", "Reach", "Target"]

# What a refused call would have done, as its message says it.
_DOING = {
    Access.READ: "read it",
    Access.EDIT: "edit it",
    Access.PROPOSE: "propose an edit of it",
    Access.POST: "post into it",
}

# Owned targets whose owner is kept: each entry is a few hundred bytes.
OWNERS_KEPT = 10_000


@dataclass(frozen=True, slots=True)
class Target:
    """What a call reaches: an artifact or a thread, by id."""

    kind: str  # ARTIFACT or THREAD
    id: str

    @property
    def field(self) -> str:
        return "artifact_id" if self.kind == ARTIFACT else "thread_id"


class Owners:
    """The owners of targets, asked of the store; an owned target's is kept, since it never
    changes (the module's docstring says why that is correct)."""

    def __init__(self, store: StoreClient, kept: int = OWNERS_KEPT) -> None:
        self._store = store
        self._kept: OrderedDict[Target, Owner] = OrderedDict()
        self._most = kept

    async def of(self, target: Target, seconds: float) -> Owner | None:
        """The target's owner; None when the store has no such target (the call then goes
        on with its own principal, and the store answers NOT_FOUND, or FORBIDDEN when
        another rule made it meanwhile)."""
        known = self._kept.get(target)
        if known is not None:
            self._kept.move_to_end(target)
            return known
        try:
            owner = await self._store.call(
                GetOwner(target.id, thread=target.kind == THREAD), seconds
            )
        except Refusal as refusal:
            if refusal.code == RefusalCode.NOT_FOUND:
                return None
            raise store_contract.as_error(refusal) from refusal
        if owner.owner:
            self._kept[target] = owner
            if len(self._kept) > self._most:
                self._kept.popitem(last=False)
        return owner


class Reach:
    """Decides whether an attempt's call may reach its target, and refuses it if not."""

    def __init__(self, owners: Owners, audit: Audit, grants: Grants, store_timeout: float) -> None:
        self._owners = owners
        self._audit = audit
        self._grants = grants
        self._store_timeout = store_timeout

    async def principal(
        self, attempt: Attempt, rpc: str, write_type: str, target: Target, access: Access
    ) -> Principal:
        """The principal ``attempt``'s call ``rpc`` acts for on ``target``; NotGranted,
        audited under the attempt's run, when its rule may not ``access`` it.

        ``write_type`` names the write in the refusal's event (empty for a read, whose
        refusal is audited as its read event, as every read's failure is)."""
        # A write's lease bounds its every store call; a read's never did, nor does its owner's.
        timeout = (
            store_deadline(attempt, self._store_timeout) if write_type else self._store_timeout
        )
        owner = await self._owners.of(target, timeout)
        if owner is None:
            return Principal(attempt.rule)
        decision = self._grants.decide(attempt.rule, owner.owner, target.kind, owner.kind, access)
        if decision.allowed:
            return Principal(attempt.rule, decision.granted_owner)
        raise await self._refused(attempt, rpc, write_type, target, owner, decision.missing, access)

    async def _refused(
        self,
        attempt: Attempt,
        rpc: str,
        write_type: str,
        target: Target,
        owner: Owner,
        missing: str,
        access: Access,
    ) -> NotGranted:
        error = NotGranted(
            f"{target.field} {target.id} belongs to rule {owner.owner!r}; rule "
            f"{attempt.rule!r} has no grant to {_DOING[access]} (the operator's grants "
            f"would need: {missing})",
            metadata={
                target.field: target.id,
                "owner": owner.owner,
                "rule": attempt.rule,
                "missing_grant": missing,
            },
            nothing_sent=True,
        )
        # Recorded under the run that tried, so that the owner's operator can see who did.
        detail = {target.field: target.id, "owner": owner.owner, "missing_grant": missing}
        if write_type:
            attempt.failed += 1
            subject = Subject(str(write_type))
            refusal = event(attempt, rpc, Phase.OUTCOME, subject, refused=error, detail=detail)
        else:
            subject = Subject(derived_id=target.id)
            refusal = event(attempt, rpc, Phase.READ, subject, refused=error, detail=detail)
        await self._audit.best_effort(refusal, lost="audit_refusal_record_lost")
        return error
