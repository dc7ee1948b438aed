"""An external store's refusal is untrusted: its code is bounded before the ledger, logs and
metrics see it.

The store here is the real reference store with a hostile front: for an artifact of kind
``hostile`` it answers a hand-made status whose ErrorInfo carries whatever code the request's
data names, as a buggy or malicious store could.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from sidecar import store_contract as refusals
from sidecar.store_contract import STORE_DOMAIN
from tests.conftest import MakeConfig
from tests.harness import RunningSidecar, refusal, start_sidecar, start_store
from tests.server.scrape import scrape
from tests.server.test_metrics import metrics_port


class HostileRefusals(grpc.aio.ServerInterceptor):
    """CreateArtifact of kind "hostile" is refused with the code, states and message its
    data names; every other call reaches the real store."""

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], details: Any
    ) -> Any:
        handler = await continuation(details)
        if not details.method.endswith("/CreateArtifact"):
            return handler
        inner = handler.unary_unary

        async def behaviour(request: Any, context: Any) -> Any:
            if request.kind != "hostile":
                return await inner(request, context)
            said = json.loads(request.data_json)
            info = error_details_pb2.ErrorInfo(
                reason=said["code"], domain=STORE_DOMAIN, metadata={"states": said["states"]}
            )
            packed = any_pb2.Any()
            packed.Pack(info)
            status = status_pb2.Status(
                code=grpc.StatusCode.FAILED_PRECONDITION.value[0],
                message=said["message"],
                details=[packed],
            )
            await context.abort_with_status(rpc_status.to_status(status))

        return grpc.unary_unary_rpc_method_handler(
            behaviour,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


@pytest.fixture
def hostile(make_config: MakeConfig, tmp_path: Path) -> Iterator[RunningSidecar]:
    store = start_store(tmp_path / "store", interceptors=[HostileRefusals()])
    sidecar = start_sidecar(
        make_config(tmp_path / "sidecar", store_target=store.target, metrics_listen="127.0.0.1:0")
    )
    try:
        yield sidecar
    finally:
        sidecar.stop()
        store.stop()


def _hostile(
    sc: RunningSidecar, attempt: str, code: str, states: str = "", message: str = "no"
) -> Any:
    data = json.dumps({"code": code, "states": states, "message": message})
    with pytest.raises(grpc.RpcError) as caught:
        sc.stub.Create(pb.CreateRequest(attempt_id=attempt, kind="hostile", data_json=data))
    return refusal(caught.value)


def test_a_code_with_a_nul_fails_no_unrelated_write_of_its_batch(hostile: RunningSidecar) -> None:
    failures: list[str] = []
    made: list[str] = []

    def unrelated(worker: int) -> None:
        attempt = hostile.begin(f"bystander-{worker}")
        for n in range(15):
            try:
                answer = hostile.stub.Create(
                    pb.CreateRequest(
                        attempt_id=attempt,
                        kind="ticket",
                        data_json=json.dumps({"w": worker, "n": n}),
                    )
                )
                made.append(answer.id)
            except grpc.RpcError as error:
                failures.append(refusal(error).reason)

    threads = [threading.Thread(target=unrelated, args=(w,)) for w in range(6)]
    for thread in threads:
        thread.start()
    attempt = hostile.begin("hostile-run")
    answers = [
        _hostile(hostile, attempt, f"BAD\0CODE{n}", states="ID_USED\0", message="a\0b\nc")
        for n in range(10)
    ]
    for thread in threads:
        thread.join(60)
    assert failures == []
    assert len(made) == 90
    for got in answers:
        assert (got.reason, got.failure_class) == (
            refusals.STORE_REFUSAL_UNRECOGNIZED,
            "PERMANENT",
        )
        assert got.metadata["states"] == refusals.STATE_UNRECOGNIZED
        assert "\0" not in got.message and "\n" not in got.message
    # Each refusal is in the ledger, with the bounded code as its reason.
    recorded = [
        e.event.reason
        for e in hostile.audit("hostile-run")
        if e.event.phase == "outcome" and e.event.reason
    ]
    assert recorded == [refusals.STORE_REFUSAL_UNRECOGNIZED] * 10


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_many_distinct_codes_do_not_grow_the_metrics_labels_beyond_a_bound(
    hostile: RunningSidecar,
) -> None:
    attempt = hostile.begin("inventive")
    invented = [f"INVENTED_CODE_{n}" for n in range(60)]
    malformed = ["lower_case", "X" * 65, "SPACE CODE", "ÜMLAUT", "", "1_DIGIT_FIRST"]
    reasons = {_hostile(hostile, attempt, code).reason for code in invented + malformed}
    bound = refusals.MAX_OTHER_CODES + 1
    assert refusals.STORE_REFUSAL_UNRECOGNIZED in reasons
    assert len(reasons) <= bound
    # A code already passed on stays itself; a known code is never bounded away.
    assert _hostile(hostile, attempt, "VALIDATION_FAILED").reason == "VALIDATION_FAILED"

    samples = scrape(metrics_port(hostile))
    labels = {
        dict(sample_labels)["reason"]
        for (name, sample_labels) in samples
        if name == "actonce_refusals_total" and dict(sample_labels)["rpc"] == "Create"
    }
    results = {
        dict(sample_labels)["result"]
        for (name, sample_labels) in samples
        if name == "actonce_store_call_seconds_count"
    }
    assert len(labels) <= bound + 1  # and VALIDATION_FAILED
    assert len(results) <= bound + 2  # and ok, VALIDATION_FAILED


def test_one_store_that_uses_up_its_codes_leaves_another_sidecars_store_its_own(
    hostile: RunningSidecar, make_config: MakeConfig, tmp_path: Path
) -> None:
    # Two sidecars in one process (as in the tests, or an embedding program): the bound is
    # on what each one's store has said, not on the process.
    attempt = hostile.begin("inventive")
    for n in range(refusals.MAX_OTHER_CODES + 4):
        _hostile(hostile, attempt, f"INVENTED_CODE_{n}")
    assert _hostile(hostile, attempt, "ONE_MORE_CODE").reason == refusals.STORE_REFUSAL_UNRECOGNIZED
    store = start_store(tmp_path / "other-store", interceptors=[HostileRefusals()])
    other = start_sidecar(make_config(tmp_path / "other", store_target=store.target))
    try:
        fresh = other.begin("inventive")
        assert _hostile(other, fresh, "ONE_MORE_CODE").reason == "ONE_MORE_CODE"
    finally:
        other.stop()
        store.stop()


def test_a_used_id_beside_a_malformed_state_is_no_used_id_alone(hostile: RunningSidecar) -> None:
    got = _hostile(hostile, hostile.begin("states"), "INVALID_STATE", states="ID_USED,bad state")
    # Not taken for done (ALREADY_APPLIED): the store said more than that the id is used.
    assert (got.reason, got.failure_class) == ("INVALID_STATE", "PERMANENT")
    assert set(got.metadata["states"].split(",")) == {"ID_USED", refusals.STATE_UNRECOGNIZED}
