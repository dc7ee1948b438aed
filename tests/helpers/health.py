"""A server's grpc.health.v1 answers, and the one loop that waits for the answer wanted."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Collection
from typing import Any

import grpc
from grpc_health.v1 import health_pb2

HEALTH_CHECK = "/grpc.health.v1.Health/Check"
# Every answer a server gives when it is up at all, serving or not.
ANY_ANSWER = frozenset(health_pb2.HealthCheckResponse.ServingStatus.keys())


class HealthStub:
    """grpc.health.v1 ``Check`` over a blocking channel, typed.

    grpc's health package ships a generated HealthStub whose type stubs name no methods;
    this is the one call tests and the load test make of it.
    """

    def __init__(self, channel: grpc.Channel) -> None:
        self.Check = channel.unary_unary(
            HEALTH_CHECK,
            request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
            response_deserializer=health_pb2.HealthCheckResponse.FromString,
        )


class AsyncHealthStub:
    """:class:`HealthStub` over an asyncio channel."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.Check = channel.unary_unary(
            HEALTH_CHECK,
            request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
            response_deserializer=health_pb2.HealthCheckResponse.FromString,
        )


class NeverAnswered(RuntimeError):
    """The server exited, or did not give the answer waited for in time."""


def health_answer(target: str, service: str = "", timeout: float = 2.0) -> str:
    """The health service's answer at ``target`` by name (SERVING, NOT_SERVING, ...), or
    ``error:CODE`` when the call fails."""
    with grpc.insecure_channel(target) as channel:
        try:
            answer = HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout
            )
        except grpc.RpcError as error:
            return f"error:{error.code().name}"
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status))


def wait_for_health(
    target: str,
    wanted: str | Collection[str] = "SERVING",
    *,
    process: subprocess.Popen[Any] | None = None,
    service: str = "",
    timeout: float = 30.0,
) -> str:
    """Ask until the health service at ``target`` answers ``wanted`` (one answer, or any of
    several); the answer. NeverAnswered when ``process`` exits first or time runs out."""
    accepted = {wanted} if isinstance(wanted, str) else set(wanted)
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise NeverAnswered(f"{target}: the server exited with {process.returncode}")
        last = health_answer(target, service, timeout=1.0)
        if last in accepted:
            return last
        time.sleep(0.05)
    raise NeverAnswered(f"{target} answered {last}, never {' or '.join(sorted(accepted))}")


def wait_serving(
    target: str, process: subprocess.Popen[Any] | None = None, timeout: float = 30.0
) -> None:
    """Wait until the server at ``target`` answers SERVING."""
    wait_for_health(target, process=process, timeout=timeout)
