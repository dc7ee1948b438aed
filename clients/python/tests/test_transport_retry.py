"""The channel: every call has a deadline, and UNAVAILABLE is retried with the
same request_id.

The server here answers the first try of every Create with UNAVAILABLE, as a
draining sidecar does, and records what each call carried. It stands in for
the transport, not for the sidecar's rules, which the other tests check
against a real sidecar.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest

from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc
from actonce_api.v1 import types_pb2
from actonce_client import Client, Outcome


class DrainingFirst(pb_grpc.RunActionsServiceServicer):
    def __init__(self) -> None:
        self.tries: list[str] = []
        self.seconds_left: list[float | None] = []

    def BeginAttempt(
        self, request: pb.BeginAttemptRequest, context: grpc.ServicerContext
    ) -> pb.BeginAttemptResponse:
        self.seconds_left.append(context.time_remaining())
        return pb.BeginAttemptResponse(attempt_id="att_1")

    def Create(self, request: pb.CreateRequest, context: grpc.ServicerContext) -> pb.CreateResponse:
        self.seconds_left.append(context.time_remaining())
        self.tries.append(request.request_id)
        if len(self.tries) % 2 == 1:
            context.abort(grpc.StatusCode.UNAVAILABLE, "draining")
        return pb.CreateResponse(id="art_1", outcome=types_pb2.OUTCOME_APPLIED)


@pytest.fixture
def draining() -> Iterator[tuple[str, DrainingFirst]]:
    # A stand-in for two RPCs: the others answer UNIMPLEMENTED, as the generated base does.
    servicer = DrainingFirst()  # type: ignore[abstract]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_RunActionsServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}", servicer
    server.stop(None)


def test_unavailable_is_retried_with_the_same_request_id(
    draining: tuple[str, DrainingFirst],
) -> None:
    target, servicer = draining
    with Client(target) as client:
        attempt = client.begin("run-1", "rule")
        for _ in range(2):
            assert attempt.create("ticket", {"n": 1}).outcome is Outcome.APPLIED
    first, first_retry, second, second_retry = servicer.tries
    assert first == first_retry and second == second_retry
    assert first != second and first


def test_every_call_has_a_deadline(draining: tuple[str, DrainingFirst]) -> None:
    target, servicer = draining
    with Client(target, timeout=7.0) as client:
        client.begin("run-1", "rule").create("ticket", {"n": 1})
    # A call with no deadline shows the server about 2**63 ns; the grpc-timeout
    # header rounds up, hence a little slack above 7 s.
    assert len(servicer.seconds_left) == 3
    assert all(left is not None and 0 < left < 7.5 for left in servicer.seconds_left)
