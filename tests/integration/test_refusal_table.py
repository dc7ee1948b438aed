"""docs/design.md's refusal table, row by row: each refusal's reason, failure class and status."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from actonce_api.store.v1 import artifact_store_pb2 as spb
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import types_pb2
from google.protobuf import timestamp_pb2

from tests.conftest import MakeConfig
from tests.harness import RunningSidecar, RunningStore, refusal, start_sidecar, start_store
from tests.helpers.locks import ledger_locked


def _create(sc: RunningSidecar, attempt: str, data: Any, kind: str = "ticket") -> Any:
    return sc.stub.Create(
        pb.CreateRequest(attempt_id=attempt, kind=kind, data_json=json.dumps(data))
    )


def _refused(call: Any, request: Any) -> Any:
    with pytest.raises(grpc.RpcError) as caught:
        call(request)
    got = refusal(caught.value)
    assert got.domain == "actonce"
    return got


class ConflictingWriter(grpc.aio.ServerInterceptor):
    """Another writer that changes an artifact just before each of the next
    ``times`` patches reaches the store: real version conflicts, on time."""

    def __init__(self, store: list[RunningStore], times: int) -> None:
        self.store = store
        self.times = times
        self.patches_seen = 0

    async def intercept_service(self, continuation: Any, details: Any) -> Any:
        if details.method.endswith("/PatchArtifact") and self.times > 0:
            self.times -= 1
            backend = self.store[0].backend
            for artifact in backend.list_artifacts("ticket").artifacts:
                backend.patch_artifact(
                    artifact.id,
                    artifact.version,
                    json.dumps([{"op": "add", "path": "/other", "value": artifact.version}]),
                )
        if details.method.endswith("/PatchArtifact"):
            self.patches_seen += 1
        return await continuation(details)


class SlowStore(grpc.aio.ServerInterceptor):
    """A store that answers later than the sidecar's store deadline."""

    def __init__(self, delay: float) -> None:
        self.delay = delay

    async def intercept_service(self, continuation: Any, details: Any) -> Any:
        if details.method.endswith("/CreateArtifact"):
            import asyncio

            await asyncio.sleep(self.delay)
        return await continuation(details)


def test_used_id_is_success_already_applied(sidecar: RunningSidecar) -> None:
    first = _create(sidecar, sidecar.begin("r", checkpoint="c"), {"a": 1})
    again = _create(sidecar, sidecar.begin("r", checkpoint="c"), {"a": 1})
    assert (again.id, again.outcome) == (first.id, types_pb2.OUTCOME_ALREADY_APPLIED)


def test_value_already_there_is_success_skipped_with_no_patch_sent(sidecar: RunningSidecar) -> None:
    artifact = _create(sidecar, sidecar.begin(), {"a": 1})
    answer = sidecar.stub.Edit(
        pb.EditRequest(
            attempt_id=sidecar.begin(), artifact_id=artifact.id, path="/a", value_json="1"
        )
    )
    assert (answer.outcome, answer.version) == (types_pb2.OUTCOME_SKIPPED, 1)


@pytest.mark.parametrize(("conflicts", "succeeds"), [(3, True), (4, False)])
def test_version_conflict_rereads_three_times_within_the_attempt_then_retryable(
    make_config: MakeConfig, tmp_path: Path, conflicts: int, succeeds: bool
) -> None:
    holder: list[RunningStore] = []
    writer = ConflictingWriter(holder, conflicts)
    store = start_store(tmp_path / "store", interceptors=[writer])
    holder.append(store)
    sc = start_sidecar(make_config(tmp_path / "sidecar", store_target=store.target))
    try:
        artifact = _create(sc, sc.begin(), {"hot": 0})
        edit = pb.EditRequest(
            attempt_id=sc.begin(), artifact_id=artifact.id, path="/mine", value_json="1"
        )
        if succeeds:
            answer = sc.stub.Edit(edit)
            assert answer.outcome == types_pb2.OUTCOME_APPLIED
            assert writer.patches_seen == 4  # the first try and three re-reads
        else:
            got = _refused(sc.stub.Edit, edit)
            assert (got.code, got.reason, got.failure_class) == (
                grpc.StatusCode.ABORTED,
                "VERSION_CONFLICT",
                "RETRYABLE",
            )
            assert writer.patches_seen == 4
            stored = store.backend.get_artifact(artifact.id)
            assert "mine" not in json.loads(stored.data_json)
    finally:
        sc.stop()
        store.stop()


def test_bad_input_is_refused(sidecar: RunningSidecar) -> None:
    got = _refused(
        sidecar.stub.Create,
        pb.CreateRequest(attempt_id=sidecar.begin(), kind="ticket", data_json="{"),
    )
    assert (got.code, got.reason, got.failure_class, got.fields) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_ARGUMENT",
        "REFUSED",
        ["data_json"],
    )


# The sidecar says first what the reference store would refuse: a missing parent is
# PATCH_FAILED before the patch is sent (tests/integration/test_array_edits.py), data that
# is no object INVALID_ARGUMENT before anything is audited (test_bad_input.py). The store's
# own VALIDATION_FAILED and PATCH_FAILED are a fault's (tests/faults/test_store_faults.py)
# or a hostile store's (test_hostile_store.py).
@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("not_found", "NOT_FOUND"),
        ("patch_failed", "PATCH_FAILED"),
        ("validation", "INVALID_ARGUMENT"),
    ],
)
def test_not_found_validation_failed_patch_failed_are_refused(
    sidecar: RunningSidecar, case: str, reason: str
) -> None:
    attempt = sidecar.begin()
    if case == "not_found":
        request: Any = pb.EditRequest(
            attempt_id=attempt, artifact_id="art_missing", path="/a", value_json="1"
        )
        call = sidecar.stub.Edit
    elif case == "patch_failed":
        artifact = _create(sidecar, attempt, {"a": 1})
        request = pb.EditRequest(
            attempt_id=attempt, artifact_id=artifact.id, path="/no/such/parent", value_json="1"
        )
        call = sidecar.stub.Edit
    else:
        # The reference store keeps documents: an artifact's data is a JSON object.
        request = pb.CreateRequest(attempt_id=attempt, kind="ticket", data_json="[1, 2]")
        call = sidecar.stub.Create
    got = _refused(call, request)
    assert (got.reason, got.failure_class) == (reason, "REFUSED")


def test_forbidden_is_permanent(make_config: MakeConfig, tmp_path: Path) -> None:
    store = start_store(tmp_path / "store", token="s3cret")
    sc = start_sidecar(make_config(tmp_path / "sidecar", store_target=store.target))
    try:
        got = _refused(
            sc.stub.Create, pb.CreateRequest(attempt_id=sc.begin(), kind="k", data_json="{}")
        )
        assert (got.code, got.reason, got.failure_class) == (
            grpc.StatusCode.PERMISSION_DENIED,
            "FORBIDDEN",
            "PERMANENT",
        )
    finally:
        sc.stop()
        store.stop()


def test_other_invalid_state_is_permanent(sidecar: RunningSidecar) -> None:
    artifact = _create(sidecar, sidecar.begin(), {"a": 1})
    sidecar.store.ArchiveArtifact(spb.ArchiveArtifactRequest(artifact_id=artifact.id))
    got = _refused(
        sidecar.stub.Edit,
        pb.EditRequest(
            attempt_id=sidecar.begin(), artifact_id=artifact.id, path="/a", value_json="2"
        ),
    )
    assert (got.reason, got.failure_class) == ("INVALID_STATE", "PERMANENT")


def test_audit_persistence_failed_is_unknown_and_never_reaches_the_store(
    make_config: MakeConfig,
    tmp_path: Path,
) -> None:
    sc = start_sidecar(make_config(tmp_path / "data", audit_busy_timeout_ms=200))
    try:
        attempt = sc.begin()
        kept = _create(sc, attempt, {"before": True})
        with ledger_locked(sc.config):
            got = _refused(
                sc.stub.Create,
                pb.CreateRequest(attempt_id=attempt, kind="lost", data_json='{"during":1}'),
            )
            # Reads still answer while the ledger fails: they audit fail-soft.
            read = sc.stub.Read(pb.ReadRequest(attempt_id=attempt, artifact_id=kept.id))
        assert (got.code, got.reason, got.failure_class) == (
            grpc.StatusCode.INTERNAL,
            "AUDIT_PERSISTENCE_FAILED",
            "UNKNOWN",
        )
        assert json.loads(read.artifact.data_json) == {"before": True}
        assert sc.artifacts("lost") == []  # the store was never called
        assert not [
            e
            for e in sc.audit()
            if e.event.derived_id
            and e.event.outcome == "OUTCOME_APPLIED"
            and e.event.write_type == "create"
            and e.event.detail.get("kind") == "lost"
        ]
        # The ledger is back: the same write goes through with the id it would have had.
        again = sc.stub.Create(
            pb.CreateRequest(attempt_id=attempt, kind="lost", data_json='{"during":1}')
        )
        assert again.outcome == types_pb2.OUTCOME_APPLIED
        assert len(sc.artifacts("lost")) == 1
    finally:
        sc.stop()


def test_store_unavailable_is_retryable_and_health_says_not_serving(
    make_config: MakeConfig, tmp_path: Path
) -> None:
    store = start_store(tmp_path / "store")
    sc = start_sidecar(make_config(tmp_path / "sidecar", store_target=store.target))
    try:
        attempt = sc.begin()
        store.stop()
        got = _refused(
            sc.stub.Create, pb.CreateRequest(attempt_id=attempt, kind="k", data_json="{}")
        )
        assert (got.code, got.reason, got.failure_class) == (
            grpc.StatusCode.UNAVAILABLE,
            "STORE_UNAVAILABLE",
            "RETRYABLE",
        )
        deadline = time.monotonic() + 5
        while sc.health() != 2 and time.monotonic() < deadline:  # NOT_SERVING
            time.sleep(0.1)
        assert sc.health() == 2
    finally:
        sc.stop()


def test_store_deadline_is_retryable(make_config: MakeConfig, tmp_path: Path) -> None:
    store = start_store(tmp_path / "store", interceptors=[SlowStore(1.0)])
    sc = start_sidecar(
        make_config(tmp_path / "sidecar", store_target=store.target, store_timeout_seconds=0.3)
    )
    try:
        got = _refused(
            sc.stub.Create, pb.CreateRequest(attempt_id=sc.begin(), kind="k", data_json="{}")
        )
        assert (got.code, got.reason, got.failure_class) == (
            grpc.StatusCode.DEADLINE_EXCEEDED,
            "STORE_DEADLINE_EXCEEDED",
            "RETRYABLE",
        )
    finally:
        sc.stop()
        store.stop()


def test_unknown_attempt_is_retryable(sidecar: RunningSidecar) -> None:
    got = _refused(
        sidecar.stub.Create, pb.CreateRequest(attempt_id="att_nope", kind="k", data_json="{}")
    )
    assert (got.code, got.reason, got.failure_class) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "UNKNOWN_ATTEMPT",
        "RETRYABLE",
    )


def test_lease_expired_is_refused_before_acting(sidecar: RunningSidecar) -> None:
    deadline = timestamp_pb2.Timestamp()
    deadline.FromDatetime(
        datetime.now(UTC) + timedelta(seconds=2)
    )  # less than the 5 s store deadline
    attempt = sidecar.stub.BeginAttempt(
        pb.BeginAttemptRequest(run_id="r", rule="triage", checkpoint="c", lease_deadline=deadline)
    ).attempt_id
    got = _refused(
        sidecar.stub.Create, pb.CreateRequest(attempt_id=attempt, kind="leased", data_json="{}")
    )
    assert (got.reason, got.failure_class) == ("LEASE_EXPIRED", "RETRYABLE")
    assert sidecar.artifacts("leased") == []
    later = timestamp_pb2.Timestamp()
    later.FromDatetime(datetime.now(UTC) + timedelta(minutes=5))
    sidecar.stub.ExtendLease(pb.ExtendLeaseRequest(attempt_id=attempt, lease_deadline=later))
    answer = sidecar.stub.Create(
        pb.CreateRequest(attempt_id=attempt, kind="leased", data_json="{}")
    )
    assert answer.outcome == types_pb2.OUTCOME_APPLIED


def test_a_lease_that_ran_out_is_not_extended_and_its_attempt_writes_no_more(
    sidecar: RunningSidecar,
) -> None:
    deadline = timestamp_pb2.Timestamp()
    deadline.FromDatetime(datetime.now(UTC) + timedelta(seconds=0.5))
    attempt = sidecar.stub.BeginAttempt(
        pb.BeginAttemptRequest(run_id="r", rule="triage", checkpoint="c", lease_deadline=deadline)
    ).attempt_id
    time.sleep(0.8)  # the worker stalled past its lease: the queue may have redelivered
    later = timestamp_pb2.Timestamp()
    later.FromDatetime(datetime.now(UTC) + timedelta(minutes=5))
    got = _refused(
        sidecar.stub.ExtendLease, pb.ExtendLeaseRequest(attempt_id=attempt, lease_deadline=later)
    )
    assert (got.reason, got.failure_class) == ("LEASE_EXPIRED", "RETRYABLE")
    got = _refused(
        sidecar.stub.Create, pb.CreateRequest(attempt_id=attempt, kind="leased", data_json="{}")
    )
    assert got.reason == "LEASE_EXPIRED"
    assert sidecar.artifacts("leased") == []
    assert [e.event.rpc for e in sidecar.audit("r")] == ["BeginAttempt"]


def test_a_call_cancelled_by_its_deadline_releases_its_request_id(
    make_config: MakeConfig, tmp_path: Path
) -> None:
    store = start_store(tmp_path / "store", interceptors=[SlowStore(1.0)])
    sc = start_sidecar(make_config(tmp_path / "sidecar", store_target=store.target))
    try:
        request = pb.CreateRequest(attempt_id=sc.begin(), kind="k", data_json="{}", request_id="q")
        with pytest.raises(grpc.RpcError) as caught:
            sc.stub.Create(request, timeout=0.2)  # the caller gives up mid-write
        assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        # The transport retries the same call: it is answered, not left waiting.
        again = sc.stub.Create(request, timeout=10)
        assert again.outcome in (types_pb2.OUTCOME_APPLIED, types_pb2.OUTCOME_ALREADY_APPLIED)
        assert len(store.backend.list_artifacts("k").artifacts) == 1
    finally:
        sc.stop()
        store.stop()


def test_a_rule_the_operator_did_not_pin_is_forbidden(
    make_config: MakeConfig, tmp_path: Path
) -> None:
    sc = start_sidecar(make_config(tmp_path / "sidecar", rules=frozenset({"triage", "pager"})))
    try:
        assert sc.begin(run_id="run-pinned", rule="pager")
        got = _refused(
            sc.stub.BeginAttempt,
            pb.BeginAttemptRequest(run_id="run-foreign", rule="payroll", checkpoint="cp-0"),
        )
        assert (got.code, got.reason, got.failure_class) == (
            grpc.StatusCode.PERMISSION_DENIED,
            "FORBIDDEN",
            "PERMANENT",
        )
        # Refused before anything is audited: the foreign run left no trace.
        assert sc.audit("run-foreign") == []
    finally:
        sc.stop()
