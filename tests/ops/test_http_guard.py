"""The HTTP guard's rules alone: which names and origins a front takes, and how deep JSON nests."""

from __future__ import annotations

import asyncio
import json
from collections.abc import MutableMapping
from typing import Any

import pytest

from sidecar.ops.http_guard import (
    RequestGuard,
    RequestPolicy,
    beyond_loopback_problem,
    depth_past,
    parse_allowed_hosts,
    parse_allowed_origins,
)

POLICY = RequestPolicy(
    hosts=parse_allowed_hosts("actonce.agents.svc, console.example:8443, [fd00::1]"),
    origins=parse_allowed_origins("https://ui.example, http://tool.example:3000"),
)


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("127.0.0.1:8765", True), ("127.0.0.1", True), ("LOCALHOST:1", True), ("[::1]:8765", True),
        ("actonce.agents.svc", True), ("actonce.agents.svc:80", True),
        ("console.example:8443", True), ("console.example", False), ("console.example:443", False),
        ("[fd00::1]:9", True), ("[fd00::2]", False),
        ("attacker.example", False), ("127.0.0.1.attacker.example", False), ("127.0.0.2", False),
        ("localhost.", False), ("127.0.0.1:0", False), ("127.0.0.1:99999", False),
        ("127.0.0.1:x", False), ("user@127.0.0.1", False), ("[::1", False), ("", False),
        ("a b", False), ("::1", False),
    ],
)  # fmt: skip
def test_hosts_are_the_loopback_names_and_the_configured_ones(host: str, allowed: bool) -> None:
    assert POLICY.host_allowed(host) is allowed


@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        ("http://127.0.0.1:8765", True), ("https://localhost", True), ("http://[::1]:6274", True),
        ("https://ui.example", True), ("https://ui.example:443", True), ("http://ui.example", False),
        ("http://tool.example:3000", True), ("http://tool.example", False),
        # The pages of an allowed host are its own.
        ("https://actonce.agents.svc", True), ("http://actonce.agents.svc:8765", True),
        ("https://console.example:8443", True), ("https://console.example", False),
        ("null", False), ("file://", False), ("http://evil.example", False),
        ("http://127.0.0.1:8765/path", False), ("ftp://127.0.0.1", False),
        ("http://user@127.0.0.1", False), ("http://127.0.0.1:bad", False), ("", False),
    ],
)  # fmt: skip
def test_origins_are_loopback_the_allowed_hosts_own_and_the_configured_ones(
    origin: str, allowed: bool
) -> None:
    assert POLICY.origin_allowed(origin) is allowed


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "names no host"), ("https://console.example", "no scheme"),
        ("console.example/path", "no scheme"), ("a@b", "no scheme"), ("host:0", "NAME or NAME:PORT"),
    ],
)  # fmt: skip
def test_an_allowed_host_is_a_name_and_maybe_a_port(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_allowed_hosts(text)


@pytest.mark.parametrize("text", ["", "ui.example", "https://ui.example/app", "null", "ws://x"])
def test_an_allowed_origin_is_a_scheme_a_name_and_maybe_a_port(text: str) -> None:
    with pytest.raises(ValueError):
        parse_allowed_origins(text)


def test_beyond_loopback_the_names_must_be_given() -> None:
    for listen in ("127.0.0.1:8765", "localhost:8765", "[::1]:8765"):
        assert beyond_loopback_problem(listen, (), "--mcp-allowed-hosts") is None
    problem = beyond_loopback_problem("0.0.0.0:8765", (), "--mcp-allowed-hosts")
    assert problem is not None and "--mcp-allowed-hosts" in problem
    hosts = parse_allowed_hosts("actonce.agents.svc")
    assert beyond_loopback_problem("0.0.0.0:8765", hosts, "--mcp-allowed-hosts") is None


@pytest.mark.parametrize(
    ("body", "depth"),
    [
        (b"", 0), (b"1", 0), (b"[]", 1), (b'{"a": [1, {"b": []}]}', 4),
        (b'"[[[[["', 0), (b'["\\"[[[", [1]]', 2), (b'["\\\\", [[1]]]', 3),
        (b'["\\\\\\"[[", [[1]]]', 3), (b'["a\\\\\\\\"', 1), (b'"\\u005c"[[', 2),
        (b"[" * 50_000, 50_000), (b"[" * 3 + b"]" * 3 + b"[]", 3),
    ],
)  # fmt: skip
def test_nesting_counts_brackets_outside_strings(body: bytes, depth: int) -> None:
    assert depth_past(body, depth) == 0
    assert depth == 0 or depth_past(body, depth - 1) == depth


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


def test_nesting_agrees_with_a_parser_on_documents_it_can_parse() -> None:
    doc: object = "x"
    for level in range(1, 60):
        doc = [doc, {"k": "[{\\"}] if level % 2 else {"k": doc, "s": ']}"'}
        text = json.dumps(doc).encode()
        depth = _depth(json.loads(text))
        assert (depth_past(text, depth), depth_past(text, depth - 1)) == (0, depth)


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ([(b"host", b"attacker.example"), (b"content-type", b"application/json")], 421),
        ([(b"host", b"127.0.0.1"), (b"origin", b"http://evil.example"),
          (b"content-type", b"application/json")], 403),
        ([(b"host", b"127.0.0.1"), (b"content-type", b"text/plain")], 415),
    ],
)  # fmt: skip
def test_a_request_refused_by_its_head_is_answered_once_its_body_is_read(
    headers: list[tuple[bytes, bytes]], status: int
) -> None:
    # Answered and closed over body bytes the server never read, a connection is reset,
    # and the reset drops the answer not yet sent: the client reads a status and then an
    # error. The guard takes the body first (bounded by the body limit, as any body).
    events: list[str] = []
    parts = [b'{"run_id": ', b'"r"}']

    async def receive() -> MutableMapping[str, Any]:
        events.append("read")
        chunk = parts.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(parts)}

    async def send(message: MutableMapping[str, Any]) -> None:
        events.append(str(message["type"]))
        if message["type"] == "http.response.start":
            assert message["status"] == status

    async def route(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("a refused request never reaches the route")

    guard = RequestGuard(route, RequestPolicy())
    scope = {"type": "http", "method": "POST", "path": "/attempts", "headers": headers}
    asyncio.run(guard(scope, receive, send))
    assert events == ["read", "read", "http.response.start", "http.response.body"]
