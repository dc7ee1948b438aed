"""The API token over real gRPC and real HTTP: every method and route refuses a call without
it, but the configured exemptions, and a refused call changes nothing.

The methods come from the running server's own reflection and the routes from the MCP
front's own table, so that an RPC or a route added later is checked without a change here.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc
from google.protobuf import descriptor_pool
from google.protobuf.descriptor import MethodDescriptor
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)
from starlette.routing import Route

from sidecar.ops import auth
from tests.harness import RunningSidecar, free_port, refusal, sidecar_config, start_sidecar
from tests.server.processes import run_cli, start_server, wait_for_status
from tests.server.scrape import scrape, value
from tests.server.test_configuration import assert_one_line_refusal

TOKEN = "api-t0ken-5b2e"
GOOD = (("authorization", f"Bearer {TOKEN}"),)
# What a caller may send instead of the token: each is refused the same way.
WITHOUT = {
    "missing": (),
    "wrong": (("authorization", "Bearer not-the-token"),),
    "a prefix": (("authorization", f"Bearer {TOKEN[:-1]}"),),
    "not bearer": (("authorization", f"Basic {TOKEN}"),),
    "twice": (("authorization", f"Bearer {TOKEN}"), ("authorization", "Bearer other")),
}


def token_file(tmp_path: Path, token: str = TOKEN) -> Path:
    path = tmp_path / "api.token"
    path.write_text(token + "\n")
    return path


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[RunningSidecar]:
    running = start_sidecar(
        sidecar_config(
            tmp_path / "data",
            api_token_file=token_file(tmp_path),
            mcp_listen="127.0.0.1:0",
            metrics_listen="127.0.0.1:0",
        )
    )
    try:
        yield running
    finally:
        running.stop()


Method = tuple[str, MethodDescriptor]  # the service's name, and the method


def served_methods(channel: grpc.Channel) -> list[Method]:
    """Every method of every service the server lists through its reflection."""
    database = ProtoReflectionDescriptorDatabase(channel)
    pool = descriptor_pool.DescriptorPool(database)
    methods: list[Method] = []
    for name in database.get_services():
        try:
            service = pool.FindServiceByName(name)
        except KeyError:
            # Reflection v1 is served as v1alpha's twin (sidecar.ops.reflection), whose
            # file is the one the server has.
            service = pool.FindServiceByName(name.replace(".v1.", ".v1alpha."))
        methods.extend((name, method) for method in service.methods)
    return methods


def call(
    channel: grpc.Channel, served: Method, metadata: tuple[tuple[str, str], ...]
) -> grpc.RpcError | None:
    """One call of a method with an empty request; its error, None when it answered."""
    service, method = served
    path = f"/{service}/{method.name}"
    raw: Any = channel  # raw bytes in and out, which grpc's stubs do not type
    kind = (method.client_streaming, method.server_streaming)
    try:
        if kind == (False, False):
            raw.unary_unary(path)(b"", metadata=metadata, timeout=5)
        elif kind == (False, True):
            next(iter(raw.unary_stream(path)(b"", metadata=metadata, timeout=1)), None)
        elif kind == (True, False):
            raw.stream_unary(path)(iter([b""]), metadata=metadata, timeout=5)
        else:
            list(raw.stream_stream(path)(iter([b""]), metadata=metadata, timeout=5))
    except grpc.RpcError as error:
        return error
    return None


def assert_unauthenticated(error: grpc.RpcError | None, what: str) -> None:
    assert error is not None, f"{what} answered without the token"
    refused = refusal(error)
    assert (refused.code, refused.reason, refused.domain, refused.failure_class) == (
        grpc.StatusCode.UNAUTHENTICATED,
        "UNAUTHENTICATED",
        "actonce",
        "PERMANENT",
    ), what


def test_every_method_but_health_refuses_a_call_without_the_token(
    guarded: RunningSidecar,
) -> None:
    methods = served_methods(_with_token(guarded))  # reflection needs the token too
    exempt = auth.exempt_services(auth.DEFAULT_EXEMPT)
    assert exempt == {"grpc.health.v1.Health"}
    assert {service for service, _m in methods} == {
        "actonce.v1.RunActionsService",
        *exempt,
        *auth.exempt_services({"reflection"}),
    }
    api = pb.DESCRIPTOR.services_by_name["RunActionsService"]
    guarded_methods = [(s, m) for s, m in methods if s not in exempt]
    assert [m.name for s, m in guarded_methods if s == api.full_name] == [
        m.name for m in api.methods
    ]
    for served in guarded_methods:
        name = served[1].name
        for how, metadata in WITHOUT.items():
            assert_unauthenticated(call(guarded.channel, served, metadata), f"{name} {how}")
        answered = call(guarded.channel, served, GOOD)
        assert answered is None or answered.code() != grpc.StatusCode.UNAUTHENTICATED, name
    for served in methods:
        if served[0] in exempt:
            error = call(guarded.channel, served, ())
            assert error is None or error.code() != grpc.StatusCode.UNAUTHENTICATED, served
    assert guarded.health() == 1  # SERVING, asked without a token


def test_a_wrong_token_and_a_missing_one_are_told_apart(guarded: RunningSidecar) -> None:
    stub = pb_grpc.RunActionsServiceStub(guarded.channel)
    request = pb.BeginAttemptRequest(run_id="run-told", rule="triage")
    messages = {}
    for how, metadata in WITHOUT.items():
        with pytest.raises(grpc.RpcError) as caught:
            stub.BeginAttempt(request, metadata=metadata, timeout=5)
        assert_unauthenticated(caught.value, how)
        messages[how] = refusal(caught.value).message
    # Sent no usable Bearer token: send one. Sent one that is not the sidecar's: fix it.
    assert messages["missing"] == messages["not bearer"] == messages["twice"] == auth.MESSAGE
    assert messages["wrong"] == messages["a prefix"] == auth.WRONG_TOKEN
    assert "not this sidecar's" in auth.WRONG_TOKEN and "--api-token-file" in auth.WRONG_TOKEN


@pytest.mark.parametrize("exempt", [frozenset(), frozenset({"health"})])
def test_the_exemptions_are_what_is_configured(tmp_path: Path, exempt: frozenset[str]) -> None:
    running = start_sidecar(
        sidecar_config(
            tmp_path / "data", api_token_file=token_file(tmp_path), api_token_exempt=exempt
        )
    )
    try:
        methods = served_methods(_with_token(running))
        assert len({service for service, _m in methods}) == 4
        for served in methods:
            error = call(running.channel, served, ())
            if served[0] in auth.exempt_services(exempt):
                assert error is None or error.code() != grpc.StatusCode.UNAUTHENTICATED
            else:
                assert_unauthenticated(error, served[1].name)
    finally:
        running.stop()


def _with_token(running: RunningSidecar) -> grpc.Channel:
    """A channel to ``running`` whose every call carries the token."""

    class Token(grpc.AuthMetadataPlugin):
        def __call__(
            self, context: grpc.AuthMetadataContext, callback: grpc.AuthMetadataPluginCallback
        ) -> None:
            callback(GOOD, None)

    credentials = grpc.composite_channel_credentials(
        grpc.local_channel_credentials(), grpc.metadata_call_credentials(Token())
    )
    return grpc.secure_channel(f"127.0.0.1:{running.port}", credentials)


def test_a_call_without_the_token_changes_nothing(guarded: RunningSidecar) -> None:
    wrong = WITHOUT["wrong"]
    with pytest.raises(grpc.RpcError) as refused:
        guarded.stub.BeginAttempt(
            pb.BeginAttemptRequest(run_id="run-7", rule="triage", checkpoint="cp"), metadata=wrong
        )
    assert_unauthenticated(refused.value, "BeginAttempt")
    assert guarded.audit() == []
    attempt = guarded.stub.BeginAttempt(
        pb.BeginAttemptRequest(run_id="run-7", rule="triage", checkpoint="cp"), metadata=GOOD
    ).attempt_id
    begun = guarded.audit()
    # Every write, step and ending, and a newer attempt of the same run, refused.
    for method, request in [
        (guarded.stub.Create, pb.CreateRequest(attempt_id=attempt, kind="k", data_json="{}")),
        (guarded.stub.CreateThread, pb.CreateThreadRequest(attempt_id=attempt, title="t")),
        (
            guarded.stub.BeginStep,
            pb.BeginStepRequest(attempt_id=attempt, tool="charge", args_json="{}"),
        ),
        (guarded.stub.EndAttempt, pb.EndAttemptRequest(attempt_id=attempt)),
        (
            guarded.stub.BeginAttempt,
            pb.BeginAttemptRequest(run_id="run-7", rule="triage", checkpoint="cp"),
        ),
    ]:
        with pytest.raises(grpc.RpcError) as refused:
            method(request, metadata=wrong)
        assert_unauthenticated(refused.value, str(method))
    assert guarded.audit() == begun
    assert guarded.artifacts("k") == []
    # The attempt is neither ended nor fenced: it goes on with the token.
    created = guarded.stub.Create(
        pb.CreateRequest(attempt_id=attempt, kind="k", data_json="{}"), metadata=GOOD
    )
    assert created.outcome == 1  # OUTCOME_APPLIED
    assert len(guarded.artifacts("k")) == 1
    metrics = scrape(guarded.sidecar.metrics_endpoint.port)  # type: ignore[union-attr]
    assert (
        value(
            metrics,
            "actonce_refusals_total",
            rpc="Create",
            reason="UNAUTHENTICATED",
            failure_class="PERMANENT",
        )
        == 1
    )


def test_a_token_rotated_in_place_is_taken_without_a_restart(tmp_path: Path) -> None:
    path = token_file(tmp_path, "first-token")
    running = start_sidecar(sidecar_config(tmp_path / "data", api_token_file=path))
    try:
        request = pb.BeginAttemptRequest(run_id="r", rule="triage", checkpoint="cp")
        running.stub.BeginAttempt(request, metadata=(("authorization", "Bearer first-token"),))
        fresh = tmp_path / "api.token.new"
        fresh.write_text("second-token\n")
        os.replace(fresh, path)  # as the kubelet swaps a Secret's files
        running.stub.BeginAttempt(request, metadata=(("authorization", "Bearer second-token"),))
        with pytest.raises(grpc.RpcError) as refused:
            running.stub.BeginAttempt(request, metadata=(("authorization", "Bearer third"),))
        assert_unauthenticated(refused.value, "BeginAttempt")
    finally:
        running.stop()


# -- the MCP front -----------------------------------------------------------------------


def http(
    method: str, url: str, *, token: str | None = None, body: Any = None, timeout: float = 10
) -> tuple[int, dict[str, str], bytes]:
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def mcp_routes(running: RunningSidecar) -> list[tuple[str, str]]:
    """(method, path) of every route of the MCP front, its parameters filled in."""
    assert running.sidecar.mcp is not None
    app: Any = running.sidecar.mcp.server.config.app
    found: list[tuple[str, str]] = []
    for route in app.routes:
        assert isinstance(route, Route)
        path = route.path
        for name in route.param_convertors:
            path = path.replace("{" + name + "}", "att_0000")
        for method in sorted((route.methods or {"GET", "POST", "DELETE"}) - {"HEAD"}):
            found.append((method, path))
    return found


def test_every_route_of_the_mcp_front_refuses_a_call_without_the_token(
    guarded: RunningSidecar,
) -> None:
    base = f"http://127.0.0.1:{guarded.sidecar.mcp_port}"
    routes = mcp_routes(guarded)
    assert {path for _method, path in routes} >= {
        "/mcp",
        "/mcp/attempts/att_0000",
        "/attempts",
        "/attempts/att_0000/end",
    }
    for method, path in routes:
        for token in (None, "not-the-token", TOKEN[:-1]):
            status, headers, body = http(method, base + path, token=token, body={})
            assert status == 401, (method, path, token, status)
            answer = json.loads(body)
            # No token is told to send one; another token, that it is not this sidecar's.
            assert {k: answer[k] for k in ("reason", "failure_class", "message")} == {
                "reason": "UNAUTHENTICATED",
                "failure_class": "PERMANENT",
                "message": auth.MESSAGE if token is None else auth.WRONG_TOKEN,
            }
            # On the MCP endpoint the same refusal is a JSON-RPC error too (refusals.py).
            assert ("jsonrpc" in answer) is path.startswith("/mcp"), path
            assert headers["www-authenticate"].startswith("Bearer")
        try:
            status, _headers, _body = http(method, base + path, token=TOKEN, body={}, timeout=2)
        except TimeoutError:  # let in: a GET of /mcp is a stream the server holds open
            status = 0
        assert status != 401, (method, path)


def test_the_mcp_front_without_the_token_begins_ends_and_writes_nothing(
    guarded: RunningSidecar,
) -> None:
    base = f"http://127.0.0.1:{guarded.sidecar.mcp_port}"
    run = {"run_id": "run-9", "rule": "triage", "checkpoint": "cp"}
    assert http("POST", base + "/attempts", token="nope", body=run)[0] == 401
    assert guarded.audit() == []
    status, _headers, body = http("POST", base + "/attempts", token=TOKEN, body=run)
    assert status == 200
    attempt = json.loads(body)["attempt_id"]
    begun = guarded.audit()
    call_tool = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "create", "arguments": {"kind": "k", "data": {"a": 1}}},
    }
    assert http("POST", f"{base}/mcp/attempts/{attempt}", token="nope", body=call_tool)[0] == 401
    assert http("POST", f"{base}/attempts/{attempt}/end", body={})[0] == 401
    assert guarded.audit() == begun
    assert guarded.artifacts("k") == []
    status, _headers, body = http("POST", f"{base}/attempts/{attempt}/end", token=TOKEN, body={})
    assert status == 200 and json.loads(body)["applied"] == 0


# -- the command -------------------------------------------------------------------------


def test_serve_takes_the_token_file_and_a_clients_token_variable_beside_it(
    tmp_path: Path,
) -> None:
    listen = f"127.0.0.1:{free_port()}"
    env = {"ACTONCE_API_TOKEN_FILE": str(token_file(tmp_path)), "ACTONCE_API_TOKEN": TOKEN}
    served = start_server(tmp_path, "serve", listen, env=env)
    try:
        wait_for_status(listen, "SERVING", served=served)
        with grpc.insecure_channel(listen) as channel:
            stub: Any = channel.unary_unary("/actonce.v1.RunActionsService/BeginAttempt")
            with pytest.raises(grpc.RpcError) as refused:
                stub(b"", timeout=5)
            assert_unauthenticated(refused.value, "BeginAttempt")
    finally:
        served.stop()


@pytest.mark.parametrize(
    ("content", "args", "fragments"),
    [
        ("\n", [], ["API token file", "empty"]),
        ("two words\n", [], ["API token file", "whitespace"]),
        (TOKEN, ["--api-token-exempt", "everything"], ["--api-token-exempt", "none"]),
    ],
)
def test_a_token_setting_that_cannot_be_used_stops_start_up_in_one_line(
    tmp_path: Path, content: str, args: list[str], fragments: list[str]
) -> None:
    path = tmp_path / "api.token"
    path.write_text(content)
    done = run_cli("serve", "--api-token-file", str(path), "--data-dir", str(tmp_path), *args)
    assert_one_line_refusal(done, *fragments)


def test_exemptions_need_a_token_to_be_exempt_from() -> None:
    assert_one_line_refusal(
        run_cli("serve", "--api-token-exempt", "health"), "--api-token-exempt", "--api-token-file"
    )
