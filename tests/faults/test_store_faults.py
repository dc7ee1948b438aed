"""The store misbehaving: slower than the call deadline, paused, refusing with every code.

For each, writes fail with the documented reason and class, nothing is acknowledged that did
not land, reads answer where they can, and the sidecar recovers by itself when the fault
ends: the same attempt goes on, and each write is in the store once.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import types_pb2
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from sidecar.refstore.wire import grpc_status_for
from sidecar.store_contract import StoreRefusal
from tests.conftest import MakeConfig
from tests.faults.support import data, outcome_of, spawn_store, wait_for
from tests.harness import Refusal, RunningSidecar, sidecar_config, start_sidecar, start_store
from tests.helpers import postgres as pg
from tests.helpers.locks import lock_held

APPLIED_OR_DONE = (types_pb2.OUTCOME_APPLIED, types_pb2.OUTCOME_ALREADY_APPLIED)


def _store_for(backend: str, tmp_path: Path) -> tuple[Any, str | None]:
    dsn = pg.fresh_database("store") if backend == "postgres" else None
    return spawn_store(tmp_path / "store", tmp_path / "store.log", dsn=dsn), dsn


def _count(sc: RunningSidecar, kind: str, n: int) -> int:
    return sum(1 for a in sc.artifacts(kind) if json.loads(a.data_json) == {"n": n})


def test_a_store_slower_than_the_deadline_is_retryable_and_a_late_write_lands_once(
    backend: str, make_config: MakeConfig, tmp_path: Path
) -> None:
    store, dsn = _store_for(backend, tmp_path)
    sc = start_sidecar(
        make_config(tmp_path / "sidecar", store_target=store.target, store_timeout_seconds=0.5)
    )
    try:
        attempt = sc.begin("run-slow")
        kept = sc.stub.Create(pb.CreateRequest(attempt_id=attempt, kind="k", data_json=data(0)))
        # Another process holds the store's database: its writes wait behind it (up to its
        # own busy timeout of 5 s), longer than the sidecar's 0.5 s deadline.
        if dsn:
            lock = lock_held("postgres", dsn, "LOCK TABLE store_artifacts IN EXCLUSIVE MODE")
        else:
            lock = lock_held("sqlite", str(tmp_path / "store" / "store.db"), "BEGIN IMMEDIATE")
        with lock:
            started = time.monotonic()
            slow = outcome_of(
                sc.stub.Create, pb.CreateRequest(attempt_id=attempt, kind="k", data_json=data(1))
            )
            elapsed = time.monotonic() - started
            read = outcome_of(sc.stub.Read, pb.ReadRequest(attempt_id=attempt, artifact_id=kept.id))
            time.sleep(1.0)
        assert isinstance(slow, Refusal)
        assert (slow.code, slow.reason, slow.failure_class) == (
            grpc.StatusCode.DEADLINE_EXCEEDED,
            "STORE_DEADLINE_EXCEEDED",
            "RETRYABLE",
        )
        assert elapsed < 3
        # A read needs the store too: it answers, or is refused as retryable.
        assert not isinstance(read, Refusal) or read.failure_class == "RETRYABLE"
        # The write the sidecar gave up on lands once the lock is gone; tried again, it is
        # the same write with the same id, and the store holds it once.
        assert wait_for(lambda: _count(sc, "k", 1) == 1, timeout=10)
        again = sc.stub.Create(pb.CreateRequest(attempt_id=attempt, kind="k", data_json=data(1)))
        assert again.outcome == types_pb2.OUTCOME_ALREADY_APPLIED
        assert _count(sc, "k", 1) == 1
    finally:
        sc.stop()
        store.stop()
        if dsn:
            pg.drop_database(dsn)


def test_a_paused_store_is_retryable_and_the_sidecar_recovers_when_it_resumes(
    backend: str, make_config: MakeConfig, tmp_path: Path
) -> None:
    store, dsn = _store_for(backend, tmp_path)
    sc = start_sidecar(
        make_config(tmp_path / "sidecar", store_target=store.target, store_timeout_seconds=0.5)
    )
    try:
        attempt = sc.begin("run-paused")
        thread = sc.stub.CreateThread(pb.CreateThreadRequest(attempt_id=attempt, title="t"))
        os.kill(store.process.pid, signal.SIGSTOP)
        try:
            during = [
                outcome_of(
                    sc.stub.Create,
                    pb.CreateRequest(attempt_id=attempt, kind="k", data_json=data(1)),
                ),
                outcome_of(
                    sc.stub.Notice,
                    pb.NoticeRequest(attempt_id=attempt, thread_id=thread.thread_id, text="hi"),
                ),
                outcome_of(
                    sc.stub.Read, pb.ReadRequest(attempt_id=attempt, thread_id=thread.thread_id)
                ),
            ]
            not_serving = wait_for(lambda: sc.health() == 2, timeout=10)
        finally:
            os.kill(store.process.pid, signal.SIGCONT)
        for got in during:
            assert isinstance(got, Refusal)
            assert (got.reason, got.failure_class) == ("STORE_DEADLINE_EXCEEDED", "RETRYABLE")
        assert not_serving
        assert wait_for(lambda: sc.health() == 1, timeout=15)
        # No restart: the same attempt goes on; the calls the paused store took in are
        # answered as the writes they were, once each.
        create = sc.stub.Create(pb.CreateRequest(attempt_id=attempt, kind="k", data_json=data(1)))
        notice = sc.stub.Notice(
            pb.NoticeRequest(attempt_id=attempt, thread_id=thread.thread_id, text="hi")
        )
        assert create.outcome in APPLIED_OR_DONE and notice.outcome in APPLIED_OR_DONE
        assert _count(sc, "k", 1) == 1
        assert [m.text for m in sc.messages(thread.thread_id)] == ["hi"]
    finally:
        sc.stop()
        store.stop()
        if dsn:
            pg.drop_database(dsn)


# -- every refusal code -----------------------------------------------------------------

_WRITES = ("/CreateArtifact", "/PatchArtifact", "/CreateProposal", "/CreateThread", "/PostMessage")


class RefusingStore(grpc.aio.ServerInterceptor):
    """A real store whose writes are refused with one status while ``active``."""

    def __init__(self, status: grpc.Status) -> None:
        self.status = status
        self.active = False
        self.refused = 0

    async def intercept_service(self, continuation: Any, details: Any) -> Any:
        handler = await continuation(details)
        if not (self.active and details.method.endswith(_WRITES)):
            return handler

        async def refuse(request: Any, context: Any) -> Any:
            self.refused += 1
            await context.abort_with_status(self.status)

        return grpc.unary_unary_rpc_method_handler(
            refuse,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


def _refusal(code: str, states: tuple[str, ...] = ()) -> grpc.Status:
    return grpc_status_for(StoreRefusal(code, "refused by the fault", states=states))


def _status(code: grpc.StatusCode, reason: str = "", states: str = "") -> grpc.Status:
    details = []
    if reason:
        info = error_details_pb2.ErrorInfo(reason=reason, domain="store.actonce",
                                           metadata={"states": states} if states else {})  # fmt: skip
        packed = any_pb2.Any()
        packed.Pack(info)
        details.append(packed)
    return rpc_status.to_status(
        status_pb2.Status(code=code.value[0], message="refused by the fault", details=details)
    )


S = grpc.StatusCode
# (case, the store's answer, expected reason, failure class, status code); None: success.
REFUSALS: list[tuple[str, grpc.Status, tuple[str, str, grpc.StatusCode] | None]] = [
    ("not-found", _refusal("NOT_FOUND"), ("NOT_FOUND", "REFUSED", S.NOT_FOUND)),
    (
        "validation",
        _refusal("VALIDATION_FAILED"),
        ("VALIDATION_FAILED", "REFUSED", S.INVALID_ARGUMENT),
    ),
    ("patch", _refusal("PATCH_FAILED"), ("PATCH_FAILED", "REFUSED", S.FAILED_PRECONDITION)),
    ("conflict", _refusal("VERSION_CONFLICT"), ("VERSION_CONFLICT", "RETRYABLE", S.ABORTED)),
    ("forbidden", _refusal("FORBIDDEN"), ("FORBIDDEN", "PERMANENT", S.PERMISSION_DENIED)),
    (
        "archived",
        _refusal("INVALID_STATE", ("ARCHIVED",)),
        ("INVALID_STATE", "PERMANENT", S.FAILED_PRECONDITION),
    ),
    (
        "used-and-archived",
        _refusal("INVALID_STATE", ("ID_USED", "ARCHIVED")),
        ("INVALID_STATE", "PERMANENT", S.FAILED_PRECONDITION),
    ),
    (
        "unknown-code",
        _status(S.FAILED_PRECONDITION, "QUOTA_EXCEEDED"),
        ("QUOTA_EXCEEDED", "PERMANENT", S.FAILED_PRECONDITION),
    ),
    (
        "bare-permission-denied",
        _status(S.PERMISSION_DENIED),
        ("FORBIDDEN", "PERMANENT", S.PERMISSION_DENIED),
    ),
    ("bare-unavailable", _status(S.UNAVAILABLE), ("STORE_UNAVAILABLE", "RETRYABLE", S.UNAVAILABLE)),
    ("bare-internal", _status(S.INTERNAL), ("STORE_UNAVAILABLE", "RETRYABLE", S.UNAVAILABLE)),
    ("id-used", _refusal("INVALID_STATE", ("ID_USED",)), None),
]


def _writes(attempt: str, artifact: str, thread: str) -> list[tuple[str, Any]]:
    return [
        ("Create", pb.CreateRequest(attempt_id=attempt, kind="k", data_json=data(1))),
        ("Create", pb.CreateRequest(attempt_id=attempt, kind="k", data_json=data(2), propose=True)),
        ("CreateThread", pb.CreateThreadRequest(attempt_id=attempt, title="t2")),
        ("Notice", pb.NoticeRequest(attempt_id=attempt, thread_id=thread, text="n")),
        ("Send", pb.SendRequest(attempt_id=attempt, thread_id=thread, text="s")),
        (
            "Edit",
            pb.EditRequest(attempt_id=attempt, artifact_id=artifact, path="/n", value_json="9"),
        ),
        (
            "Edit",
            pb.EditRequest(
                attempt_id=attempt, artifact_id=artifact, path="/p", value_json="1", propose=True
            ),
        ),
    ]


@pytest.mark.parametrize(("case", "answer", "expected"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_every_store_refusal_gets_its_documented_reason_and_class(
    tmp_path: Path,
    case: str,
    answer: grpc.Status,
    expected: tuple[str, str, grpc.StatusCode] | None,
) -> None:
    fault = RefusingStore(answer)
    store = start_store(tmp_path / "store", interceptors=[fault])
    sc = start_sidecar(sidecar_config(tmp_path / "sidecar", store_target=store.target,
                                      send_allowlist=frozenset({"pager"})))  # fmt: skip
    try:
        attempt = sc.begin("run-refused", rule="pager")
        artifact = sc.stub.Create(
            pb.CreateRequest(attempt_id=attempt, kind="k", data_json=data(0))
        ).id
        thread = sc.stub.CreateThread(
            pb.CreateThreadRequest(attempt_id=attempt, title="t")
        ).thread_id
        before = store.backend.list_artifacts("k").artifacts, store.backend.list_messages(thread)
        fault.active = True
        answers = [(rpc, outcome_of(getattr(sc.stub, rpc), request))
                   for rpc, request in _writes(attempt, artifact, thread)]  # fmt: skip
        read = outcome_of(sc.stub.Read, pb.ReadRequest(attempt_id=attempt, artifact_id=artifact))
        fault.active = False
        for rpc, got in answers:
            if expected is None:
                if rpc == "Edit" and not got_propose(got):
                    # A direct patch carries no id: "id used" cannot make it done.
                    assert isinstance(got, Refusal) and got.failure_class == "PERMANENT"
                else:
                    assert (
                        not isinstance(got, Refusal)
                        and got.outcome == types_pb2.OUTCOME_ALREADY_APPLIED
                    ), (rpc, got)
                continue
            assert isinstance(got, Refusal), (rpc, got)
            assert (got.reason, got.failure_class, got.code) == expected, (rpc, got)
        assert not isinstance(read, Refusal) and read.artifact.id == artifact  # reads answer
        # Nothing landed, and each refusal is audited with its reason and class.
        assert (
            store.backend.list_artifacts("k").artifacts,
            store.backend.list_messages(thread),
        ) == before
        if expected is not None:
            refusals = [e.event for e in sc.audit("run-refused") if e.event.reason == expected[0]]
            assert len(refusals) >= len(answers)
            assert {e.failure_class for e in refusals} == {expected[1]}
        # The fault is over: the same attempt makes the same writes, once each.
        for rpc, request in _writes(attempt, artifact, thread):
            assert getattr(sc.stub, rpc)(request).outcome in (
                *APPLIED_OR_DONE,
                types_pb2.OUTCOME_SKIPPED,
            )
        assert len(store.backend.list_artifacts("k").artifacts) == 2
        assert sorted(m.text for m in store.backend.list_messages(thread)) == ["n", "s"]
    finally:
        sc.stop()
        store.stop()


def got_propose(got: Any) -> bool:
    # A proposed edit answers with its proposal id; a direct one has none.
    return not isinstance(got, Refusal) and bool(got.proposal_id)
