"""The MCP front refuses what a browser on another site, or a stranger, sends: on every route.

A page on any site can make a browser send requests to 127.0.0.1, and a name its own DNS
points at 127.0.0.1 (DNS rebinding) makes them same-origin. Such a request must not begin
an attempt of a run an agent is running (it would fence the agent's attempt), nor end one.
Real sidecars, real uvicorn, requests written byte for byte over sockets.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import types_pb2

from sidecar.fronts.mcp.app import McpFront, McpListener
from sidecar.ops.http_guard import parse_allowed_hosts
from sidecar.ops.http_server import ServingLimits
from tests.harness import RunningSidecar, free_port, sidecar_config, spawn_sidecar, start_sidecar
from tests.helpers.http import Answer, call, exchange, parse_answer, raw_request
from tests.server.processes import run_cli

JSON = ("Content-Type", "application/json")
HARDENING = {
    "content-security-policy": "default-src 'none'; frame-ancestors 'none'",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "cache-control": "no-store",
    "referrer-policy": "no-referrer",
}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[RunningSidecar]:
    running = start_sidecar(sidecar_config(tmp_path / "data", mcp_listen="127.0.0.1:0"))
    try:
        yield running
    finally:
        running.stop()


def mcp_port(served: RunningSidecar) -> int:
    return served.sidecar.mcp_port


def begin_body(run_id: str, rule: str = "triage") -> bytes:
    return json.dumps({"run_id": run_id, "rule": rule, "checkpoint": "cp-0"}).encode()


def attempts_of(served: RunningSidecar, run_id: str) -> list[str]:
    return [e.event.attempt_id for e in served.audit(run_id) if e.event.phase == "attempt_begin"]


REFUSAL = {"reason", "failure_class", "message"}
# On the MCP endpoint the refusal is a JSON-RPC error too (sidecar.fronts.mcp.refusals).
JSON_RPC = {"jsonrpc", "id", "error"}


def refused(answer: Answer, status: int, reason: str) -> None:
    assert answer.status == status, (answer.status, answer.body)
    assert answer.headers["content-type"] == "application/json"
    body = answer.json()
    assert body["reason"] == reason
    assert set(body) in (REFUSAL, REFUSAL | JSON_RPC)
    if "jsonrpc" in body:
        assert (body["id"], body["error"]["data"]["reason"]) == (None, reason)


ROUTES = [
    ("POST", "/attempts"),
    ("POST", "/attempts/att_x/end"),
    ("POST", "/mcp"),
    ("GET", "/mcp"),
    ("POST", "/mcp/attempts/att_x"),
    ("GET", "/readiness"),
    ("GET", "/no-such-route"),
]


def test_a_rebound_name_reaches_no_route(served: RunningSidecar) -> None:
    port = mcp_port(served)
    for method, path in ROUTES:
        for host in (
            f"attacker.example:{port}",
            "attacker.example",
            "127.0.0.1.nip.io",
            f"127.0.0.1:{port}@attacker.example",
            "[::1",
        ):
            answer = call(port, method, path, host=host, headers=[JSON], body=begin_body("r"))
            refused(answer, 421, "HOST_NOT_ALLOWED")
        # No Host at all: HTTP/1.1 requires one, and h11 refuses the request itself.
        assert call(port, method, path, host=None, headers=[JSON]).status == 400
    assert attempts_of(served, "r") == []
    # Loopback names, by any port, are the front's own.
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "LOCALHOST"):
        answer = call(port, "POST", "/attempts", host=host, headers=[JSON], body=begin_body("r"))
        assert answer.status == 200, answer.body


def test_a_page_on_another_site_cannot_begin_or_end_the_agents_attempts(
    served: RunningSidecar,
) -> None:
    port = mcp_port(served)
    agent = served.begin("run-pay", rule="payments")
    body = begin_body("run-pay", rule="payments")  # the run's own rule: a page can guess it
    # What a page can make a browser send without asking the server first (no preflight):
    # text/plain, a form's encodings, no type at all.
    for media_type in (
        "text/plain",
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ):
        answer = call(port, "POST", "/attempts", headers=[("Content-Type", media_type)], body=body)
        refused(answer, 415, "UNSUPPORTED_MEDIA_TYPE")
        answer = call(
            port, "POST", f"/attempts/{agent}/end", headers=[("Content-Type", media_type)]
        )
        refused(answer, 415, "UNSUPPORTED_MEDIA_TYPE")
    refused(call(port, "POST", "/attempts", body=body), 415, "UNSUPPORTED_MEDIA_TYPE")
    # JSON from a page of another origin, or of an opaque one (a sandboxed frame).
    for origin in (
        "http://evil.example",
        "https://evil.example:8765",
        "null",
        f"http://127.0.0.1.evil.example:{port}",
        "file://",
    ):
        for path in ("/attempts", f"/attempts/{agent}/end", "/mcp"):
            answer = call(port, "POST", path, headers=[JSON, ("Origin", origin)], body=body)
            refused(answer, 403, "ORIGIN_NOT_ALLOWED")
    # The same request through a rebound name.
    answer = call(port, "POST", "/attempts", host=f"evil.example:{port}", headers=[JSON], body=body)
    refused(answer, 421, "HOST_NOT_ALLOWED")

    # None of it began or ended anything: the agent's attempt goes on, unfenced.
    assert attempts_of(served, "run-pay") == [agent]
    created = served.stub.Create(pb.CreateRequest(attempt_id=agent, kind="charge", data_json="{}"))
    assert created.outcome == types_pb2.OUTCOME_APPLIED
    # A page on this host (a local tool's UI) may call it, as the harness does.
    local = call(
        port,
        "POST",
        "/attempts",
        headers=[JSON, ("Origin", "http://localhost:6274")],
        body=begin_body("other"),
    )
    assert local.status == 200, local.body
    ended = call(port, "POST", f"/attempts/{agent}/end", headers=[JSON])
    assert ended.status == 200 and ended.json()["applied"] == 1


def test_allowed_hosts_and_origins_widen_the_loopback_names(tmp_path: Path) -> None:
    config = sidecar_config(
        tmp_path / "data",
        mcp_listen="127.0.0.1:0",
        mcp_allowed_hosts=parse_allowed_hosts(
            "actonce.agents.svc,actonce.agents.svc.cluster.local:8765"
        ),
        mcp_allowed_origins=("https://ui.example",),
    )
    running = start_sidecar(config)
    try:
        port = running.sidecar.mcp_port
        for host in (
            f"actonce.agents.svc:{port}",
            "actonce.agents.svc",
            "actonce.agents.svc.cluster.local:8765",
        ):
            assert (
                call(
                    port, "POST", "/attempts", host=host, headers=[JSON], body=begin_body("r")
                ).status
                == 200
            )
        for host in ("actonce.agents.svc.cluster.local:9999", "agents.svc", f"svc:{port}"):
            refused(
                call(port, "POST", "/attempts", host=host, headers=[JSON]), 421, "HOST_NOT_ALLOWED"
            )
        for origin in (
            "https://ui.example",
            f"http://actonce.agents.svc:{port}",
            "https://actonce.agents.svc.cluster.local:8765",
        ):
            answer = call(
                port, "POST", "/attempts", headers=[JSON, ("Origin", origin)], body=begin_body("r")
            )
            assert answer.status == 200, (origin, answer.body)
        for origin in ("http://ui.example", "https://ui.example:444", "https://evil.example"):
            refused(
                call(port, "POST", "/attempts", headers=[JSON, ("Origin", origin)]),
                403,
                "ORIGIN_NOT_ALLOWED",
            )
    finally:
        running.stop()


def test_listening_beyond_loopback_needs_the_names_callers_use(tmp_path: Path) -> None:
    stopped = run_cli(
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        str(tmp_path / "d"),
        "--mcp-listen",
        "0.0.0.0:0",
    )
    assert stopped.returncode == 2
    assert len(stopped.stderr.splitlines()) == 1 and "--mcp-allowed-hosts" in stopped.stderr
    bad = run_cli("serve", "--mcp-listen", "127.0.0.1:0", "--mcp-allowed-origins", "evil.example")
    assert bad.returncode == 2 and "SCHEME://NAME" in bad.stderr
    # Named, it serves beyond loopback, and still answers to those names alone.
    port = free_port()
    sidecar = spawn_sidecar(
        sidecar_config(tmp_path / "data"),
        tmp_path / "serve.log",
        "--mcp-listen",
        f"0.0.0.0:{port}",
        "--mcp-allowed-hosts",
        "actonce.test",
    )
    try:
        answer = call(
            port,
            "POST",
            "/attempts",
            host=f"actonce.test:{port}",
            headers=[JSON],
            body=begin_body("r"),
        )
        assert answer.status == 200, answer.body
        refused(
            call(
                port,
                "POST",
                "/attempts",
                host=f"evil.example:{port}",
                headers=[JSON],
                body=begin_body("r"),
            ),
            421,
            "HOST_NOT_ALLOWED",
        )
        refused(
            call(
                port,
                "POST",
                "/attempts",
                host=f"actonce.test:{port}",
                headers=[("Content-Type", "text/plain")],
                body=begin_body("r"),
            ),
            415,
            "UNSUPPORTED_MEDIA_TYPE",
        )
    finally:
        sidecar.stop()


def test_bodies_past_the_limit_are_refused_before_they_are_read_whole(
    served: RunningSidecar,
) -> None:
    port = mcp_port(served)
    # A 32 MiB body announced, its first 64 KiB sent: the answer comes without the rest.
    # (Sending it all races the server's close: the kernel may reset the connection
    # over the unread bytes and drop the answer before the client reads it.)
    announced = ("Content-Length", str(32 << 20))
    start = b'{"run_id": "' + b"x" * (64 << 10)
    for path in ("/attempts", "/mcp", "/attempts/att_x/end"):
        head = raw_request(
            "POST", path, host=f"127.0.0.1:{port}", headers=[JSON, announced], length=False
        )
        refused(exchange(port, head + start), 413, "BODY_TOO_LARGE")
    # Without a Content-Length (chunked), the count stops it all the same.
    chunk = b"a" * (1 << 20)
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(4)) + b"0\r\n\r\n"
    data = (
        raw_request(
            "POST",
            "/attempts",
            host=f"127.0.0.1:{port}",
            headers=[JSON, ("Transfer-Encoding", "chunked")],
            length=False,
        )
        + chunked
    )
    refused(exchange(port, data), 413, "BODY_TOO_LARGE")
    # Under the limit, the route answers for itself.
    answer = call(port, "POST", "/attempts", headers=[JSON], body=b'"' + b"x" * (1 << 20) + b'"')
    assert answer.status == 400 and "must be a JSON object" in answer.json()["message"]
    assert attempts_of(served, "x") == []


def test_json_nested_past_the_limit_is_a_clear_400_and_no_traceback(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "serve.log"
    sidecar = spawn_sidecar(
        sidecar_config(tmp_path / "data"), log, "--mcp-listen", f"127.0.0.1:{port}"
    )
    try:
        deep = b"[" * 50_000 + b"]" * 50_000
        for path in ("/attempts", "/mcp", "/mcp/attempts/att_x"):
            answer = call(
                port, "POST", path, headers=[JSON, ("Accept", "application/json")], body=deep
            )
            refused(answer, 400, "INVALID_ARGUMENT")
            assert "nests 50000 levels; the limit is 100" in answer.json()["message"]
        # Brackets inside strings do not nest; within the limit, the field's own limit
        # answers, as a tool result the model can act on.
        agent = json.loads(
            call(port, "POST", "/attempts", headers=[JSON], body=begin_body("r-deep")).body
        )["attempt_id"]
        data = b"[" * 90 + b'"' + b"[" * 500 + b'"' + b"]" * 90
        tool_call = (
            b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": '
            b'{"name": "create", "arguments": {"kind": "k", "data": ' + data + b"}}}"
        )
        headers = [
            JSON,
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", "2025-06-18"),
            ("actonce-attempt-id", agent),
        ]
        answer = call(port, "POST", "/mcp", headers=headers, body=tool_call)
        assert answer.status == 200, answer.body
        result = answer.json()["result"]
        assert (
            result["isError"]
            and "data nests 90 levels; the limit is 64" in (result["structuredContent"]["message"])
        )
        # What once made a 500 with a traceback: a document deep enough for json.loads's
        # recursion, but within the body limit.
        assert call(port, "POST", "/attempts", headers=[JSON], body=deep[:1] * 3000).status == 400
    finally:
        sidecar.stop()
    lines = log.read_text().splitlines()
    assert lines and all(json.loads(line) for line in lines)  # every line JSON
    assert "Traceback" not in log.read_text()


def test_every_answer_carries_the_hardening_headers(served: RunningSidecar) -> None:
    port = mcp_port(served)
    agent = served.begin("run-h")
    answers = [
        call(port, "POST", "/attempts", headers=[JSON], body=begin_body("run-h2")),  # 200
        call(port, "POST", f"/attempts/{agent}/end", headers=[JSON]),  # 200
        call(port, "POST", "/attempts/att_nope/end", headers=[JSON]),  # 404 of the route
        call(port, "POST", "/attempts", headers=[("Content-Type", "text/plain")]),  # 415
        call(port, "GET", "/", host="evil.example"),  # 421
        call(port, "GET", "/nothing-here"),  # 404 of the router
        call(
            port,
            "POST",
            "/mcp",
            headers=[
                JSON,
                ("Accept", "application/json, text/event-stream"),
                ("MCP-Protocol-Version", "2025-06-18"),
            ],
            body=b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}',
        ),
    ]
    assert [a.status for a in answers] == [200, 200, 404, 415, 421, 404, 200]
    for answer in answers:
        assert {k: answer.headers.get(k) for k in HARDENING} == HARDENING
        assert "server" not in answer.headers


# -- half-sent requests, and the connection cap ------------------------------------------

LIMITS = ServingLimits(header_seconds=1.0, read_seconds=2.5, max_connections=40)


@pytest.fixture
def tight(served: RunningSidecar) -> Iterator[int]:
    """The front over the same sidecar on a second listener, with short deadlines."""
    listener = McpListener(McpFront(served.sidecar.actions), "127.0.0.1:0", LIMITS)
    served.loop.run(listener.start())
    try:
        yield listener.port
    finally:
        served.loop.run(listener.stop())


def cut_within(sock: socket.socket, seconds: float) -> tuple[float, bytes]:
    """How long until the server closed ``sock``, and what it said before."""
    began = time.monotonic()
    sock.settimeout(seconds)
    said = bytearray()
    while True:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            raise AssertionError(f"still open after {seconds} s") from None
        except ConnectionResetError:
            break
        if not chunk:
            break
        said += chunk
    return time.monotonic() - began, bytes(said)


def test_half_sent_requests_are_cut_and_whole_ones_are_not(tight: int) -> None:
    host = f"127.0.0.1:{tight}"
    head = raw_request("POST", "/attempts", host=host, headers=[JSON], body=b"x" * 100)
    kinds = {
        "nothing": b"",
        "half a head": head[:30],
        "a head, no blank line": head[: head.index(b"\r\n\r\n")],
        "a head and part of the body": head[:-60],
    }
    opened = []
    for kind, data in kinds.items():
        for _ in range(30 // len(kinds) + 1):
            sock = socket.create_connection(("127.0.0.1", tight))
            sock.sendall(data)
            opened.append((kind, sock))
    # A client trickling its head a byte at a time gets no more time than a silent one.
    trickle = socket.create_connection(("127.0.0.1", tight))
    began = time.monotonic()
    with pytest.raises((BrokenPipeError, ConnectionResetError)):
        for byte in head:
            trickle.sendall(bytes([byte]))
            time.sleep(0.1)
    assert time.monotonic() - began < LIMITS.header_seconds + 1.5
    try:
        for kind, sock in opened:
            _waited, said = cut_within(sock, LIMITS.read_seconds + 3)
            answer = parse_answer(said)
            assert answer.status == 408 and answer.json()["reason"] == "REQUEST_TIMEOUT", kind
            part = "body" if kind == "a head and part of the body" else "head"
            assert f"request's {part} did not arrive" in answer.json()["message"], kind
    finally:
        for _, sock in opened:
            sock.close()
        trickle.close()
    # A whole request, however slowly its answer comes, is never cut; nor is a
    # connection kept alive between requests that then sends one at once.
    with socket.create_connection(("127.0.0.1", tight)) as sock:
        keep = head.replace(b"Connection: close\r\n", b"")
        for _ in range(2):
            sock.sendall(keep.replace(b"x" * 100, begin_body("r-slow").ljust(100)))
            time.sleep(LIMITS.header_seconds + 0.3)
        sock.sendall(head.replace(b"x" * 100, begin_body("r-slow").ljust(100)))
        answers = cut_within(sock, 10)[1]
    assert answers.count(b"HTTP/1.1 200 OK") == 3, answers


def test_past_the_connection_cap_a_request_is_answered_503(tight: int) -> None:
    held = [socket.create_connection(("127.0.0.1", tight)) for _ in range(LIMITS.max_connections)]
    try:
        for sock in held:
            sock.sendall(b"GET / HT")
        time.sleep(0.2)
        answer = call(tight, "POST", "/attempts", headers=[JSON], body=begin_body("r"))
        assert answer.status == 503
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.3)
    assert call(tight, "POST", "/attempts", headers=[JSON], body=begin_body("r")).status == 200


def test_no_route_holds_a_connection_open(served: RunningSidecar) -> None:
    # The SDK would open a stream on GET that is never closed; a stateless front has
    # nothing to push on it.
    began = time.monotonic()
    answer = call(mcp_port(served), "GET", "/mcp", headers=[("Accept", "text/event-stream")])
    assert (answer.status, answer.headers["allow"]) == (405, "POST")
    assert time.monotonic() - began < 2
