"""Random HTTP requests against both HTTP fronts, each a real ``actonce`` process under uvicorn.

Every request is drawn whole: method, path (the fronts' routes with random ids and query
strings, or anything), Host, Origin, Content-Type and other headers, and a body (nothing,
random bytes, JSON of any shape, JSON nested thousands deep, forms, JSON-RPC calls of the MCP
front's tools with random arguments, sizes around the body limit), sent byte for byte over a
socket. Whatever it is, the front answers, never with a 5xx (the connection cap is not
reached: one request at a time), and a refusal of the guard is its JSON error body. After
the examples, both processes still answer, and each wrote only JSON lines with no traceback.
On both ledger backends: PostgreSQL refuses what SQLite takes (a NUL in a text).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import grpc
import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sidecar import defaults
from tests.console.scenario import RUN, TOKEN, Console, make_ledger, start_console
from tests.harness import ServerProcess, free_port, sidecar_config, spawn_sidecar
from tests.helpers import postgres as pg
from tests.helpers.http import Answer, parse_answer

# The properties' knob (tests/fuzz/test_properties.py): an HTTP example costs a fifth of theirs.
EXAMPLES = 5 * int(os.environ.get("ACTONCE_FUZZ_EXAMPLES", "40"))
LIMIT = defaults.HTTP_MAX_BODY_BYTES


@dataclass
class Fronts:
    sidecar: ServerProcess
    mcp: int
    console: Console
    attempt: str
    step: str

    @property
    def console_port(self) -> int:
        return int(self.console.url.rsplit(":", 1)[1])


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def fronts(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Fronts]:
    tmp = tmp_path_factory.mktemp("http-fuzz")
    databases = (
        {"audit_dsn": pg.fresh_database("ledger"), "store_dsn": pg.fresh_database("store")}
        if request.param == "postgres"
        else {}
    )
    config = sidecar_config(tmp / "data", **databases)
    step = make_ledger(config, tmp)  # runs, a step in doubt: something for every page
    mcp = free_port()
    sidecar = spawn_sidecar(config, tmp / "serve.log", "--mcp-listen", f"127.0.0.1:{mcp}")
    console = start_console(config, tmp)
    try:
        with grpc.insecure_channel(sidecar.target) as channel:
            attempt = (
                pb_grpc.RunActionsServiceStub(channel)
                .BeginAttempt(
                    pb.BeginAttemptRequest(run_id="run-fuzz", rule="triage", checkpoint="c")
                )
                .attempt_id
            )
        yield Fronts(sidecar, mcp, console, attempt, step)
    finally:
        console.stop()
        sidecar.stop()
        for dsn in databases.values():
            pg.drop_database(dsn)


# -- strategies ---------------------------------------------------------------------------

header_text = st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"), max_size=40
)
header_names = st.text(
    st.sampled_from("abcdefghijklmnopqrstuvwxyz-_0123456789"), min_size=1, max_size=16
)
ids = st.one_of(
    st.sampled_from(["att_nope", "", "%00", "..", "a/b", "x" * 600]),
    st.text(max_size=20).map(lambda t: quote(t, safe="")),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=12,
)
deep = (
    st.integers(0, 5000)
    .map(lambda n: max(n, 1500) if n % 2 else n)
    .flatmap(
        lambda n: st.sampled_from([b"[" * n + b"]" * n, b'{"a":' * n + b"1" + b"}" * n, b"[" * n])
    )
)
sized = st.integers(LIMIT - 16, LIMIT + 16).map(lambda n: b'"' + b"a" * max(n - 2, 0) + b'"')


ARGUMENTS = [
    "kind",
    "data",
    "propose",
    "artifact_id",
    "path",
    "value",
    "thread_id",
    "text",
    "title",
]


def tool_calls(attempt: str) -> st.SearchStrategy[bytes]:
    """JSON-RPC messages, mostly calls of the front's tools with arguments of its tools'
    names and any values."""
    names = st.sampled_from(["create", "edit", "notice", "create_thread", "send", "read", "x"])
    arguments = st.dictionaries(st.sampled_from(ARGUMENTS), json_values, max_size=4)
    call = st.fixed_dictionaries(
        {
            "jsonrpc": st.just("2.0"),
            "id": st.integers(0, 99),
            "method": st.just("tools/call"),
            "params": st.fixed_dictionaries({"name": names, "arguments": arguments}),
        }
    )
    params = st.fixed_dictionaries({"name": names | st.text(max_size=8), "arguments": json_values})
    method = st.sampled_from(["tools/call", "tools/list", "initialize", "ping", "nope"])
    other = st.fixed_dictionaries(
        {
            "jsonrpc": st.just("2.0") | json_values,
            "id": st.integers() | st.text(max_size=4) | st.none(),
            "method": method,
            "params": params | json_values,
        }
    )
    messages = mostly(call, other | st.lists(other, max_size=3))
    return messages.map(lambda v: json.dumps(v).encode())


json_texts = json_values.map(lambda v: json.dumps(v).encode())
begins = st.fixed_dictionaries(
    {},
    optional={
        "run_id": st.text(max_size=8) | json_values,
        "rule": st.text(max_size=8) | json_values,
        "checkpoint": st.text(max_size=8) | json_values,
        "lease_deadline": st.sampled_from(
            ["2099-01-01T00:00:00Z", "2000-01-01T00:00:00Z", "2099-01-01T00:00:00", "tomorrow"]
        )
        | json_values,
    },
).map(lambda v: json.dumps(v).encode())


def bodies_of(route: str, fronts: Fronts) -> st.SearchStrategy[bytes]:
    """Bodies of the kind ``route`` takes, with random contents; one in four of them past
    a limit (nesting, size)."""
    if route in ("/pending/{id}/resolve", "/sign-in"):
        return forms
    if route.startswith("/mcp"):
        usual = tool_calls(fronts.attempt)
    elif route == "/attempts":
        usual = begins
    else:
        usual = st.just(b"") | json_texts
    return st.integers(0, 3).flatmap(lambda n: usual if n else deep | sized)


# A console form's fields, as its script posts them (JSON), now and then not as text.
form_fields = st.dictionaries(
    st.sampled_from(["token", "csrf", "decision", "by", "reason", "result_json", "x"]),
    st.text(max_size=20)
    | st.sampled_from(["ran", "did_not_run", "landed", TOKEN, "{}", "[" * 90])
    | json_values,
    max_size=6,
)
forms = form_fields.map(lambda fields: json.dumps(fields).encode())
# The same fields as a browser posts a plain form, which the console refuses.
encoded_forms = form_fields.map(
    lambda fields: "&".join(f"{quote(k)}={quote(str(v))}" for k, v in fields.items()).encode()
)


METHODS = ["GET", "POST", "PUT", "DELETE", "OPTIONS", "HEAD", "PATCH", "BREW"]


def mostly(usual: st.SearchStrategy[Any], other: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``usual`` four times in five, ``other`` otherwise."""
    return st.integers(0, 4).flatmap(lambda n: other if n == 0 else usual)


@dataclass
class Request:
    method: str
    path: str
    headers: list[tuple[str, str]]
    body: bytes
    chunked: bool

    def encode(self, default_host: str) -> bytes:
        lines = [f"{self.method} {self.path} HTTP/1.1"]
        named = {name.lower() for name, _ in self.headers}
        if "host" not in named:
            lines.append(f"Host: {default_host}")
        lines += [f"{name}: {value}" for name, value in self.headers]
        if self.chunked:
            lines.append("Transfer-Encoding: chunked")
            body = (
                b"%x\r\n%s\r\n0\r\n\r\n" % (len(self.body), self.body)
                if self.body
                else b"0\r\n\r\n"
            )
        else:
            lines.append(f"Content-Length: {len(self.body)}")
            body = self.body
        lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@st.composite
def requests(draw: st.DrawFn, front: str, fronts: Fronts) -> Request:
    port = fronts.mcp if front == "mcp" else fronts.console_port
    if front == "mcp":
        routes = ["/mcp", "/mcp/attempts/{id}", "/attempts", "/attempts/{id}/end", "/"]
        known = [fronts.attempt]
    else:
        routes = [
            "/",
            "/runs/{id}",
            "/pending",
            "/pending/{id}/resolve",
            "/sign-in",
            "/api/runs",
            "/api/runs/{id}",
            "/api/pending",
            "/api/status",
            "/static/{id}",
            "/static/console.css",
        ]
        known = [RUN, fronts.step]
    route = draw(st.sampled_from(routes))
    path = route.replace("{id}", draw(mostly(st.sampled_from(known), ids)))
    if draw(st.booleans()):
        query = draw(
            st.dictionaries(
                st.sampled_from(
                    ["after", "offset", "q", "rule", "since", "until", "outcome", "pending"]
                ),
                st.text(max_size=12)
                | st.integers(-(2**70), 2**70).map(str)
                | st.sampled_from(["9223372036854775808", "-9223372036854775809"])
                | st.sampled_from(
                    [
                        "9223372036854775808",
                        "-9223372036854775809",
                        "1e3",
                        "0x10",
                        "9" * 30,
                        "2026-13-45T99:99",
                        "-0",
                    ]
                ),
                max_size=4,
            )
        )
        path += "?" + "&".join(f"{k}={quote(v)}" for k, v in query.items())
    if draw(st.integers(0, 20)) == 0:
        path = (
            draw(st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=30)) or "/"
        )
    # Mostly what the front takes, so that bodies reach its routes; now and then anything.
    # Three in five well-formed, so that bodies reach the routes; the others vary anything.
    clean = draw(st.integers(0, 4)) < 3
    writes = front == "mcp" or route in ("/pending/{id}/resolve", "/sign-in")
    method = "POST" if writes else "GET"
    if not clean:
        method = draw(mostly(st.just(method), st.sampled_from(METHODS)))
    own = f"127.0.0.1:{port}"
    hosts = st.sampled_from(["", f"localhost:{port}", f"[::1]:{port}", "evil.example", "[::1"])
    origins = st.sampled_from(
        [f"http://127.0.0.1:{port}", "http://evil.example", "null", "file://"]
    )
    taken = "application/json"
    media_types = st.sampled_from(
        [
            "text/plain",
            "multipart/form-data; boundary=x",
            "application/json; charset=utf-8",
            "application/x+json",
            "application/x-www-form-urlencoded",
            "application/json",
        ]
    )
    headers: list[tuple[str, str]] = []
    fields = [("Host", own), ("Content-Type", taken)]
    if not clean:
        fields = [
            ("Host", draw(mostly(st.just(own), hosts | header_text))),
            ("Origin", draw(mostly(st.none(), origins | header_text))),
            ("Content-Type", draw(mostly(st.just(taken), st.none() | media_types | header_text))),
        ]
    for name, value in fields:
        if value:
            headers.append((name, value))
    if front == "mcp":
        accept = draw(mostly(st.just("application/json, text/event-stream"), header_text))
        headers.append(("Accept", accept))
        if draw(st.booleans()):
            headers.append(("actonce-attempt-id", draw(mostly(st.sampled_from(known), ids))))
        if draw(st.booleans()):
            version = draw(st.sampled_from(["2025-06-18", "2026-07-28"]) | header_text)
            headers.append(("MCP-Protocol-Version", version))
    else:
        bearer = draw(st.sampled_from([f"Bearer {TOKEN}", "Bearer x"]) | header_text)
        cookie = "actonce_console=" + draw(header_text)
        headers += [("Authorization", bearer), ("Cookie", cookie)][: draw(st.integers(0, 2))]
    headers += draw(st.lists(st.tuples(header_names, header_text), max_size=3))
    anything = st.one_of(
        st.just(b""), st.binary(max_size=200), json_texts, deep, sized, forms, encoded_forms
    )
    body = draw(bodies_of(route, fronts) if clean else mostly(bodies_of(route, fronts), anything))
    return Request(method, path, headers, body, draw(st.integers(0, 9)) == 0)


def exchange(port: int, request: Request) -> Answer:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        # Answered before the body was taken whole: the answer is still there to read.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(request.encode(f"127.0.0.1:{port}"))
        received = bytearray()
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            received += chunk
    return parse_answer(
        bytes(received), method=request.method if request.method == "HEAD" else "GET"
    )


def answered(answer: Answer) -> None:
    event(f"status {answer.status}")
    assert 100 <= answer.status < 500, (answer.status, answer.body[:500])
    if answer.headers.get("content-type") == "application/json" and answer.body:
        body = answer.json()
        if isinstance(body, dict) and "failure_class" in body:
            # The MCP endpoint's refusals are JSON-RPC errors too (sidecar.fronts.mcp.refusals).
            assert set(body) - {"jsonrpc", "id", "error"} == {"reason", "failure_class", "message"}


def only_json_lines(log: Path) -> None:
    text = log.read_text(errors="replace")
    assert "Traceback" not in text and "Exception in ASGI" not in text
    for line in text.splitlines():
        if line.strip():
            json.loads(line)  # each line one JSON object, nothing in plain text


FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)


@pytest.mark.parametrize("front", ["mcp", "console"])
@FUZZ
@given(data=st.data())
def test_random_requests_get_answers_never_a_5xx(
    fronts: Fronts, front: str, data: st.DataObject
) -> None:
    port = fronts.mcp if front == "mcp" else fronts.console_port
    answered(exchange(port, data.draw(requests(front, fronts))))


def test_the_fronts_answer_bytes_that_are_not_http(fronts: Fronts) -> None:
    garbage = [
        b"\x00\x01\x02\r\n\r\n",
        b"GET / HTTP/9.9\r\n\r\n",
        b"GET\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"GET / HTTP/1.1\r\n" + b"X-A: " + b"a" * 70_000 + b"\r\n\r\n",
        b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\nHost: a\r\n\r\n",
    ]
    for port in (fronts.mcp, fronts.console_port):
        for data in garbage:
            with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    sock.sendall(data)
                received = bytearray()
                while chunk := sock.recv(65536):
                    received += chunk
            assert received.startswith(b"HTTP/1.1 4"), (data[:40], bytes(received[:200]))


def test_after_it_all_both_fronts_serve_and_logged_json_lines_alone(fronts: Fronts) -> None:
    # Run after the tests above (pytest keeps a module's order): one sidecar and one console
    # took every request.
    status = Request("GET", "/api/status", [], b"", False)
    assert exchange(fronts.console_port, status).status == 200
    listed = Request(
        "POST",
        "/attempts",
        [("Content-Type", "application/json")],
        json.dumps({"run_id": "r", "rule": "t", "checkpoint": "c"}).encode(),
        False,
    )
    assert exchange(fronts.mcp, listed).status == 200
    only_json_lines(fronts.sidecar.log_path)
    only_json_lines(fronts.console.served.log_path)
