"""What a caller without the API token can make the sidecar keep or tell, over real gRPC.

Nothing: a refused call of a made-up method adds no metric series (its name is the caller's
choice, and every label value is kept for the life of the process), reflection needs the
token, and health answers a status and nothing beyond it.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2

from tests.harness import RunningSidecar, sidecar_config, start_sidecar
from tests.server.scrape import scrape, value
from tests.server.test_api_token import GOOD, assert_unauthenticated, token_file

REFUSALS = "actonce_refusals_total"


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[RunningSidecar]:
    running = start_sidecar(
        sidecar_config(
            tmp_path / "data", api_token_file=token_file(tmp_path), metrics_listen="127.0.0.1:0"
        )
    )
    try:
        yield running
    finally:
        running.stop()


def _metrics_port(running: RunningSidecar) -> int:
    endpoint = running.sidecar.metrics_endpoint
    assert endpoint is not None
    return endpoint.port


def _refusal_series(running: RunningSidecar) -> dict[str, float]:
    """The refusals' series by their rpc label."""
    return {
        dict(labels)["rpc"]: count
        for (name, labels), count in scrape(_metrics_port(running)).items()
        if name == REFUSALS
    }


def test_refused_calls_of_made_up_methods_add_no_series(guarded: RunningSidecar) -> None:
    raw: Any = guarded.channel  # raw bytes in and out, which grpc's stubs do not type
    made_up = 300
    for i in range(made_up):
        # Names as an attacker makes them: long, each new, some under the API's own service.
        service = "actonce.v1.RunActionsService" if i % 2 else f"x{secrets.token_hex(8)}.S"
        method = f"/{service}/{secrets.token_hex(512)}"
        with pytest.raises(grpc.RpcError) as refused:
            raw.unary_unary(method)(b"", timeout=5)
        assert_unauthenticated(refused.value, method[:40])
    with pytest.raises(grpc.RpcError) as refused:
        raw.unary_unary("/actonce.v1.RunActionsService/BeginAttempt")(b"", timeout=5)
    assert_unauthenticated(refused.value, "BeginAttempt")
    series = _refusal_series(guarded)
    # One series for every made-up name, and the served method under its own name.
    assert series == {"unknown": made_up, "BeginAttempt": 1}
    samples = scrape(_metrics_port(guarded))
    labels = {"reason": "UNAUTHENTICATED", "failure_class": "PERMANENT"}
    assert value(samples, REFUSALS, rpc="unknown", **labels) == made_up


def _reflection(channel: grpc.Channel, metadata: tuple[tuple[str, str], ...]) -> list[str]:
    stub: Any = channel.stream_stream(
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    asked = reflection_pb2.ServerReflectionRequest(list_services="")
    answers = list(stub(iter([asked]), metadata=metadata, timeout=5))
    return [service.name for service in answers[0].list_services_response.service]


def test_reflection_needs_the_token_and_health_tells_only_the_status(
    guarded: RunningSidecar,
) -> None:
    with pytest.raises(grpc.RpcError) as refused:
        _reflection(guarded.channel, ())
    assert_unauthenticated(refused.value, "reflection without the token")
    assert "actonce.v1.RunActionsService" in _reflection(guarded.channel, GOOD)
    # Health, for the probes, without the token: a status, no other field, no metadata.
    check: Any = guarded.channel.unary_unary(
        "/grpc.health.v1.Health/Check",
        request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
        response_deserializer=health_pb2.HealthCheckResponse.FromString,
    )
    answer, call = check.with_call(health_pb2.HealthCheckRequest(service=""), timeout=5)
    assert answer.status in (
        health_pb2.HealthCheckResponse.SERVING,
        health_pb2.HealthCheckResponse.NOT_SERVING,
    )
    assert [field.name for field, _ in answer.ListFields()] == ["status"]
    assert not call.trailing_metadata()
    # Nor does it list what the server serves.
    listing: Any = guarded.channel.unary_unary("/grpc.health.v1.Health/List")
    with pytest.raises(grpc.RpcError) as unlisted:
        listing(b"", timeout=5)  # an empty HealthListRequest
    assert unlisted.value.code() in (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.UNAUTHENTICATED)
    # An unknown service's status is NOT_FOUND, with no word of what is served instead.
    with pytest.raises(grpc.RpcError) as unknown:
        check(health_pb2.HealthCheckRequest(service="actonce.v1.Nothing"), timeout=5)
    assert unknown.value.code() is grpc.StatusCode.NOT_FOUND
    assert not unknown.value.details()
