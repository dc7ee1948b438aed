"""The MCP front's HTTP refusals reach the MCP SDK's own client as what they are: each is a
JSON-RPC error on the MCP endpoint, so the client shows the refusal's reason and words
instead of "Server returned an error response" (-32603)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from sidecar.fronts.mcp.refusals import REFUSED_CODE
from sidecar.ops import auth
from tests.harness import RunningSidecar, sidecar_config, start_sidecar

TOKEN = "mcp-t0ken-71ac"


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSidecar]:
    folder = tmp_path_factory.mktemp("refusals")
    token = folder / "api.token"
    token.write_text(TOKEN + "\n")
    running = start_sidecar(
        sidecar_config(folder / "data", api_token_file=token, mcp_listen="127.0.0.1:0")
    )
    try:
        yield running
    finally:
        running.stop()


def tools_or_error(served: RunningSidecar, headers: dict[str, str]) -> MCPError | list[str]:
    """The MCP SDK's client lists the tools with ``headers`` on every request (set last, so
    that a Content-Type here replaces the client's own): their names, or the error it
    raised."""
    url = f"http://127.0.0.1:{served.sidecar.mcp_port}/mcp"

    async def with_headers(request: httpx2.Request) -> None:
        request.headers.update(headers)

    async def run() -> list[str]:
        hooks = {"request": [with_headers]}
        async with (
            httpx2.AsyncClient(timeout=30, event_hooks=hooks) as http,
            Client(streamable_http_client(url, http_client=http), cache=None) as client,
        ):
            return [tool.name for tool in (await client.list_tools()).tools]

    try:
        return asyncio.run(run())
    except BaseException as raised:  # the client's task group wraps it in a group
        return _mcp_error(raised)


def _mcp_error(raised: BaseException) -> MCPError:
    if isinstance(raised, MCPError):
        return raised
    for inner in getattr(raised, "exceptions", ()):
        with contextlib.suppress(AssertionError):
            return _mcp_error(inner)
    raise AssertionError(f"no MCPError in {raised!r}") from raised


BEARER = {"authorization": f"Bearer {TOKEN}"}


@pytest.mark.parametrize(
    ("why", "headers", "reason", "words"),
    [
        ("401, no token", {}, "UNAUTHENTICATED (PERMANENT)", auth.MESSAGE),
        ("401, another token", {"authorization": "Bearer nope"}, "UNAUTHENTICATED", "not this"),
        ("421", {**BEARER, "host": "evil.example"}, "HOST_NOT_ALLOWED (PERMANENT)", "Host"),
        ("403", {**BEARER, "origin": "http://evil.example"}, "ORIGIN_NOT_ALLOWED", "origin"),
        ("415", {**BEARER, "content-type": "text/plain"}, "UNSUPPORTED_MEDIA_TYPE", "takes"),
    ],
)
def test_the_mcp_sdk_client_shows_why_the_front_refused_it(
    guarded: RunningSidecar, why: str, headers: dict[str, str], reason: str, words: str
) -> None:
    error = tools_or_error(guarded, headers)
    assert isinstance(error, MCPError), (why, error)
    assert error.error.code == REFUSED_CODE, why
    assert error.error.message.startswith(reason) and words in error.error.message, why
    assert isinstance(error.error.data, dict) and error.error.data["reason"] in reason


def test_with_the_token_the_same_client_is_served(guarded: RunningSidecar) -> None:
    served = tools_or_error(guarded, BEARER)
    assert isinstance(served, list) and "create" in served
