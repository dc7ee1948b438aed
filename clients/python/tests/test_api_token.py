"""The API token against a real sidecar started with --api-token-file: every RPC refuses a
call without it and takes one with it; the client finds the token in its options or its
environment, and follows a file that changes."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import SEND_RULE

from actonce_api.v1 import run_actions_pb2 as pb
from actonce_client import (
    ActonceError,
    Attempt,
    Client,
    Effect,
    FailureClass,
    InvalidSetting,
    Outcome,
)
from actonce_client.aio import AsyncClient
from actonce_client.auth import REREAD_SECONDS, ApiToken
from actonce_client.testing import LocalSidecar

TOKEN = "client-t0ken-4c1f"
RPCS = {m.name for m in pb.DESCRIPTOR.services_by_name["RunActionsService"].methods}


@pytest.fixture(scope="module")
def token_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("token") / "api.token"
    path.write_text(TOKEN + "\n")
    return path


@pytest.fixture(scope="module")
def guarded(token_file: Path) -> Iterator[LocalSidecar]:
    args = ["--api-token-file", str(token_file)]
    with LocalSidecar(send_allowlist=[SEND_RULE], args=args) as sidecar:
        yield sidecar


@pytest.fixture(autouse=True)
def no_token_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACTONCE_API_TOKEN_FILE", raising=False)
    monkeypatch.delenv("ACTONCE_API_TOKEN", raising=False)


def _run() -> str:
    return f"run-{uuid.uuid4()}"


Call = Callable[[Client, Attempt], Any]


def every_rpc(client: Client) -> tuple[Attempt, dict[str, Call]]:
    """An attempt with what each call needs, and one call of every RPC through the client."""
    attempt = client.begin(_run(), SEND_RULE, checkpoint="cp")
    ticket = attempt.create("ticket", {"n": 1})
    thread = attempt.create_thread("incident")
    step = attempt.begin_step("charge", Effect.NON_IDEMPOTENT_WRITE, {"amount": 1})
    unused = attempt.begin_step("page", Effect.NON_IDEMPOTENT_WRITE, {"who": "ops"})
    lease = datetime.now(UTC) + timedelta(hours=1)
    calls: dict[str, Call] = {
        "BeginAttempt": lambda c, _a: c.begin(_run(), SEND_RULE),
        "Create": lambda _c, a: a.create("ticket", {"n": 2}),
        "Edit": lambda _c, a: a.edit(ticket.id, "/status", "open"),
        "Notice": lambda _c, a: a.notice(thread.id, "filed"),
        "CreateThread": lambda _c, a: a.create_thread("another"),
        "Send": lambda _c, a: a.send(thread.id, "please look"),
        "Read": lambda _c, a: a.read_artifact(ticket.id),
        "BeginStep": lambda _c, a: a.begin_step("refund", Effect.IDEMPOTENT_WRITE, {}),
        "EndStep": lambda _c, a: a.end_step(step.id, {"charged": True}),
        "AbortStep": lambda _c, a: a.abort_step(unused.id, "never called"),
        "ExtendLease": lambda _c, a: a.extend_lease(lease),
        "EndAttempt": lambda _c, a: a.end(),
    }
    return attempt, calls


def test_every_rpc_refuses_a_call_without_the_token_and_takes_it_with_it(
    guarded: LocalSidecar, token_file: Path
) -> None:
    with Client(guarded.target, api_token_file=token_file) as client:
        attempt, calls = every_rpc(client)
        assert set(calls) == RPCS, "a new RPC needs its call here"
        without: list[dict[str, Any]] = [{}, {"api_token": "not-the-token"}]
        for wrong in without:
            with Client(guarded.target, **wrong) as other:
                theirs = Attempt(
                    other,
                    attempt.id,
                    run_id=attempt.run_id,
                    rule=attempt.rule,
                    checkpoint=attempt.checkpoint,
                )
                for rpc, call in calls.items():
                    with pytest.raises(ActonceError) as refused:
                        call(other, theirs)
                    error = refused.value
                    assert (error.reason, error.failure_class) == (
                        "UNAUTHENTICATED",
                        FailureClass.PERMANENT,
                    ), rpc
        # Nothing of those landed: with the token each call is the first of its kind.
        results = {rpc: call(client, attempt) for rpc, call in calls.items()}
        assert results["Create"].outcome is Outcome.APPLIED
        assert results["EndStep"] is Outcome.APPLIED
        assert results["EndAttempt"].applied == 10  # 4 made first, then 6 writes and steps


@pytest.mark.parametrize(
    "how", ["api_token", "api_token_file", "ACTONCE_API_TOKEN_FILE", "ACTONCE_API_TOKEN"]
)
def test_the_token_comes_from_an_option_or_the_environment(
    guarded: LocalSidecar, token_file: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    options: dict[str, Any] = {}
    if how == "api_token":
        options[how] = TOKEN
    elif how == "api_token_file":
        options[how] = token_file
    else:
        monkeypatch.setenv(how, str(token_file) if how.endswith("_FILE") else TOKEN)
    with Client(guarded.target, **options) as client:
        assert client.begin(_run(), SEND_RULE).id


def test_an_option_wins_over_the_environment(
    guarded: LocalSidecar, token_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACTONCE_API_TOKEN", "from-the-environment")
    with Client(guarded.target, api_token=TOKEN) as client:
        assert client.begin(_run(), SEND_RULE).id
    # The file variable wins over the value variable: one Secret for the agent and its sidecar.
    monkeypatch.setenv("ACTONCE_API_TOKEN_FILE", str(token_file))
    with Client(guarded.target) as client:
        assert client.begin(_run(), SEND_RULE).id


def test_a_token_file_is_followed_as_it_changes(tmp_path: Path) -> None:
    now = [0.0]
    path = tmp_path / "token"
    path.write_text("first\n")
    token = ApiToken(path=path, clock=lambda: now[0])
    fresh = tmp_path / "token.new"
    fresh.write_text("second\n")
    os.replace(fresh, path)
    assert token.value() == "first"  # read at most once a second
    now[0] += REREAD_SECONDS
    assert token.value() == "second"
    path.unlink()
    now[0] += REREAD_SECONDS
    assert token.value() == "second"  # caught mid-update: the last token stays
    assert "second" not in repr(token)


@pytest.mark.parametrize("content", ["", "\n", "two words"])
def test_a_token_file_without_a_usable_token_is_refused_at_once(
    tmp_path: Path, content: str
) -> None:
    path = tmp_path / "token"
    path.write_text(content)
    with pytest.raises(InvalidSetting, match="API token"):
        Client("127.0.0.1:1", api_token_file=path)
    with pytest.raises(InvalidSetting, match="api_token_file: the API token file"):
        Client("127.0.0.1:1", api_token_file=tmp_path / "missing")


def test_the_asyncio_client_sends_the_token_as_the_blocking_one_does(
    guarded: LocalSidecar, token_file: Path
) -> None:
    async def run() -> None:
        async with AsyncClient(guarded.target) as bare:
            with pytest.raises(ActonceError) as refused:
                await bare.begin(_run(), SEND_RULE)
            assert refused.value.reason == "UNAUTHENTICATED"
        async with AsyncClient(guarded.target, api_token_file=token_file) as client:
            attempt = await client.begin(_run(), SEND_RULE)
            assert (await attempt.create("ticket", {"n": 1})).outcome is Outcome.APPLIED
            assert (await attempt.end()).applied == 1
        with Client(guarded.target, api_token=TOKEN) as blocking:
            async with AsyncClient.like(blocking) as like:
                assert (await like.begin(_run(), SEND_RULE)).id

    asyncio.run(run())
