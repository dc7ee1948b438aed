"""What one caller may take from the sidecar's gRPC server, through real gRPC and HTTP/2.

Message sizes through a gRPC client; the stream cap, keepalive and idle connections as an
HTTP/2 client meets them (h2 frames over a plain socket), since no gRPC client shows the
server's SETTINGS or its GOAWAY. Times are scaled down for the tests through the module's
values, which the server's options are built from when it is.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.settings
import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from grpc_status import rpc_status

from sidecar.ops import limits
from sidecar.rules.canonical import MAX_JSON_BYTES
from tests.harness import RunningSidecar, refusal, sidecar_config, start_sidecar


@pytest.fixture
def running(tmp_path: Path) -> Iterator[RunningSidecar]:
    sidecar = start_sidecar(sidecar_config(tmp_path / "data"))
    try:
        yield sidecar
    finally:
        sidecar.stop()


def create_of_size(attempt_id: str, size: int) -> pb.CreateRequest:
    """A Create whose message is exactly ``size`` bytes."""
    request = pb.CreateRequest(attempt_id=attempt_id, kind="k", data_json="")
    filler = size - request.ByteSize()
    while True:
        request.data_json = json_of(filler)
        if request.ByteSize() == size:
            return request
        filler += size - request.ByteSize()


def json_of(size: int) -> str:
    """A JSON object of ``size`` bytes."""
    return '{"a":"' + "x" * (size - 8) + '"}'


def test_a_request_past_the_limit_is_refused_with_error_info_and_changes_nothing(
    running: RunningSidecar,
) -> None:
    attempt = running.begin()
    begun = running.audit()
    for size in (limits.MAX_REQUEST_BYTES + 1, 20 << 20):
        with pytest.raises(grpc.RpcError) as refused:
            running.stub.Create(create_of_size(attempt, size))
        answer = refusal(refused.value)
        assert (answer.code, answer.reason, answer.failure_class) == (
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "REQUEST_TOO_LARGE",
            "REFUSED",
        )
        assert str(limits.MAX_REQUEST_BYTES) in answer.message
    # At the limit the request is parsed, and its field gets its own refusal.
    with pytest.raises(grpc.RpcError) as refused:
        running.stub.Create(create_of_size(attempt, limits.MAX_REQUEST_BYTES))
    answer = refusal(refused.value)
    assert (answer.reason, answer.fields) == ("INVALID_ARGUMENT", ["data_json"])
    assert running.audit() == begun
    assert running.artifacts("k") == []
    # The largest field the limits allow goes through.
    largest = pb.CreateRequest(attempt_id=attempt, kind="k", data_json=json_of(MAX_JSON_BYTES))
    assert running.stub.Create(largest).outcome == 1


def test_past_grpcs_own_bound_the_transport_answers_alone(running: RunningSidecar) -> None:
    # What the sidecar's rules never see: grpc refuses it before any interceptor runs.
    attempt = running.begin()
    with pytest.raises(grpc.RpcError) as refused:
        running.stub.Create(create_of_size(attempt, limits.TRANSPORT_MAX_MESSAGE_BYTES + 1))
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert rpc_status.from_call(refused.value) is None  # type: ignore[arg-type]
    assert running.artifacts("k") == []


class Http2:
    """An HTTP/2 client connection to a gRPC server, frame by frame."""

    def __init__(self, port: int) -> None:
        self.socket = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.connection.initiate_connection()
        self.flush()

    def flush(self) -> None:
        self.socket.sendall(self.connection.data_to_send())

    def events(self, seconds: float) -> list[h2.events.Event]:
        """What the server sends within ``seconds`` (or until it closes)."""
        got: list[h2.events.Event] = []
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self.socket.settimeout(left)
            try:
                data = self.socket.recv(65536)
            except TimeoutError:
                break
            if not data:
                break
            got += self.connection.receive_data(data)
            self.flush()  # SETTINGS and PING acknowledgements
            if any(isinstance(e, h2.events.ConnectionTerminated) for e in got):
                break
        return got

    def ping(self, count: int = 1) -> None:
        for n in range(count):
            self.connection.ping(n.to_bytes(8, "big"))
        self.flush()

    def close(self) -> None:
        self.socket.close()


def goaway(events: list[h2.events.Event]) -> h2.events.ConnectionTerminated | None:
    found = [e for e in events if isinstance(e, h2.events.ConnectionTerminated)]
    return found[0] if found else None


def test_the_server_caps_concurrent_streams_on_a_connection(running: RunningSidecar) -> None:
    client = Http2(running.port)
    try:
        settings = [e for e in client.events(1) if isinstance(e, h2.events.RemoteSettingsChanged)]
        assert settings, "the server sent no SETTINGS"
        changed = settings[0].changed_settings
        cap = changed[h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS].new_value
        assert cap == limits.MAX_CONCURRENT_STREAMS
    finally:
        client.close()


def test_pings_within_the_policy_are_answered_and_a_flood_gets_goaway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "MIN_PING_INTERVAL_MS", 300)
    sidecar = start_sidecar(sidecar_config(tmp_path / "data"))
    client = Http2(sidecar.port)
    try:
        client.events(0.2)
        # An agent idle between runs, pinging as often as the policy allows: kept.
        for _ in range(4):
            time.sleep(0.35)
            client.ping()
            events = client.events(0.05)
            assert goaway(events) is None
            assert any(isinstance(e, h2.events.PingAckReceived) for e in events)
        # More often than that, past the strikes allowed: sent away.
        client.ping(limits.MAX_PING_STRIKES + 2)
        terminated = goaway(client.events(2))
        assert terminated is not None, "a ping flood was not sent away"
        assert terminated.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
        assert terminated.additional_data == b"too_many_pings"
    finally:
        client.close()
        sidecar.stop()


def test_an_idle_connection_is_pinged_and_then_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "KEEPALIVE_TIME_MS", 200)
    monkeypatch.setattr(limits, "MAX_CONNECTION_IDLE_MS", 1500)
    sidecar = start_sidecar(sidecar_config(tmp_path / "data"))
    client = Http2(sidecar.port)
    try:
        sidecar.begin("run-before")
        events = client.events(5)
        # The server looked for a peer that vanished, then let the idle connection go.
        assert any(isinstance(e, h2.events.PingReceived) for e in events)
        terminated = goaway(events)
        assert terminated is not None, "an idle connection was kept"
        assert terminated.additional_data == b"connection idle"
        # A gRPC channel idle as long connects again for its next call.
        assert sidecar.begin("run-after")
    finally:
        client.close()
        sidecar.stop()
