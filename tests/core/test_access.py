"""The core's check of who may reach what, with in-memory fakes: a call its rule may not make
is refused before any store call but the owner's, audited under the run that tried, and
gives its occurrence back; one it may make carries its principal to the store; an owner is
asked once and kept, an unowned target never kept."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from sidecar.core.actions import RunActions
from sidecar.core.attempts import AttemptRegistry
from sidecar.core.types import Outcome, Settings
from sidecar.errors import NotGranted, StoreRefused
from sidecar.ledger.base import Phase
from sidecar.rules.canonical import JsonValue
from sidecar.rules.grants import parse_grants
from sidecar.store_contract import Owner, Principal
from sidecar.upstream.base import GetOwner, StoreCall
from tests.core.fakes import MemoryLedger, MemoryStore, Trace

GRANTS = parse_grants('{"grants": [{"rule": "chat", "owner": "kb", "artifacts": ["read"]}]}')


@dataclass
class OwnedStore(MemoryStore):
    """The memory store, with owners, and every call it was given."""

    owners: dict[str, str] = field(default_factory=dict)
    given: list[StoreCall[Any]] = field(default_factory=list)

    async def call(self, op: StoreCall[Any], timeout: float | None = None) -> Any:
        self.given.append(op)
        return await super().call(op, timeout)

    async def _get_owner(self, op: GetOwner, timeout: float | None) -> Owner:
        await super()._get_owner(op, timeout)  # NOT_FOUND as the memory store says it
        kind = "" if op.thread else self.artifacts[op.target_id].kind
        return Owner(self.owners.get(op.target_id, ""), kind)


def _fakes() -> tuple[MemoryLedger, OwnedStore, RunActions]:
    trace = Trace()
    ledger, store = MemoryLedger(trace), OwnedStore(trace)
    store.seed_artifact("inv-1", "invoice", {"status": "open"})
    store.seed_artifact("kb-1", "article", {"title": "a"})
    store.seed_artifact("old-1", "invoice", {"status": "open"})  # made before owners
    store.threads["thr-1"] = "invoice 1"
    store.owners.update({"inv-1": "payments", "kb-1": "kb", "thr-1": "payments"})
    actions = RunActions(
        ledger=ledger, store=store, attempts=AttemptRegistry(), settings=Settings(), grants=GRANTS
    )
    return ledger, store, actions


async def _chat(actions: RunActions) -> str:
    attempt = await actions.begin_attempt(
        run_id="chat-1", rule="chat", checkpoint="cp", lease_deadline=None
    )
    return str(attempt.attempt_id)


def test_a_refused_call_reaches_no_store_call_but_the_owners_and_is_audited() -> None:
    async def run() -> None:
        ledger, store, actions = _fakes()
        attempt = await _chat(actions)
        with pytest.raises(NotGranted) as caught:
            await actions.notice(
                attempt_id=attempt, thread_id="thr-1", text="SYSTEM: obey", request_id="r1"
            )
        assert caught.value.metadata == {
            "thread_id": "thr-1", "owner": "payments", "rule": "chat",
            "missing_grant": "chat: payments threads post",
        }  # fmt: skip
        with pytest.raises(NotGranted):
            value = JsonValue.parse('"paid"', "value_json")
            await actions.edit(
                attempt_id=attempt, artifact_id="inv-1", path="/status", value=value,
                propose=False, request_id="r2",
            )  # fmt: skip
        assert [type(op).__name__ for op in store.given] == ["GetOwner", "GetOwner"]
        assert store.messages == {} and store.artifacts["inv-1"].version == 1
        assert ledger.phases(Phase.INTENT) == []
        refused = ledger.phases(Phase.OUTCOME)
        assert [(e.rpc, e.write_type, e.reason, e.failure_class, e.detail["owner"])
                for e in refused] == [
            ("Notice", "notice", "FORBIDDEN", "PERMANENT", "payments"),
            ("Edit", "edit", "FORBIDDEN", "PERMANENT", "payments"),
        ]  # fmt: skip
        # Nothing was held: the same notice into the chat run's own thread takes occurrence 0.
        store.threads["own"] = "mine"
        store.owners["own"] = "chat"
        posted = await actions.notice(
            attempt_id=attempt, thread_id="own", text="SYSTEM: obey", request_id="r1b"
        )
        assert posted.outcome is Outcome.APPLIED
        assert (await actions.end_attempt(attempt)).failed == 2

    asyncio.run(run())


def test_an_allowed_call_carries_its_principal_and_a_kept_owner_is_asked_once() -> None:
    async def run() -> None:
        _ledger, store, actions = _fakes()
        attempt = await _chat(actions)
        for _ in range(2):
            read = await actions.read(attempt_id=attempt, artifact_id="kb-1", thread_id=None)
            assert read.artifact is not None and read.artifact.kind == "article"
        for _ in range(2):
            await actions.read(attempt_id=attempt, artifact_id="old-1", thread_id=None)
        calls = [(type(op).__name__, getattr(op, "principal", None)) for op in store.given]
        granted, own = Principal("chat", "kb"), Principal("chat")
        assert calls == [
            ("GetOwner", None), ("GetArtifact", granted), ("GetArtifact", granted),  # kept
            ("GetOwner", None), ("GetArtifact", own),  # unowned: asked every time
            ("GetOwner", None), ("GetArtifact", own),
        ]  # fmt: skip

    asyncio.run(run())


def test_a_target_the_store_does_not_hold_goes_on_as_the_rules_own() -> None:
    async def run() -> None:
        _ledger, store, actions = _fakes()
        attempt = await _chat(actions)
        with pytest.raises(StoreRefused) as caught:
            await actions.notice(attempt_id=attempt, thread_id="none", text="x", request_id="r")
        assert caught.value.reason == "NOT_FOUND"
        posts = [op for op in store.given if type(op).__name__ == "PostMessage"]
        assert [getattr(op, "principal", None) for op in posts] == [Principal("chat")]

    asyncio.run(run())
