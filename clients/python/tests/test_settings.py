"""The client's own settings, refused when it is made, with what to write instead: a target
written as a URL, no target at all, an API token file that is not there. Each is the
client's InvalidSetting (an ActonceError, PERMANENT) naming the setting as it was given."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from actonce_client import ActonceError, Client, FailureClass, InvalidSetting, Outcome
from actonce_client.aio import AsyncClient


@pytest.fixture(autouse=True)
def no_settings_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ACTONCE_TARGET", "ACTONCE_API_TOKEN_FILE", "ACTONCE_API_TOKEN"):
        monkeypatch.delenv(name, raising=False)


def refused(error: ActonceError, setting: str) -> str:
    assert isinstance(error, InvalidSetting)
    assert (error.code, error.reason, error.failure_class) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_ARGUMENT",
        FailureClass.PERMANENT,
    )
    assert error.permanent and not error.retryable
    assert error.setting == setting and [v.field for v in error.violations] == [setting]
    return error.message


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:50051", "https://127.0.0.1:50051/", "grpc://127.0.0.1:50051"]
)
def test_a_target_written_as_a_url_is_refused_at_once_saying_to_write_host_port(
    url: str,
) -> None:
    with pytest.raises(ActonceError) as caught:
        Client(url)
    message = refused(caught.value, "target")
    assert "HOST:PORT (127.0.0.1:50051)" in message and url in message

    async def made() -> None:
        AsyncClient(url)

    with pytest.raises(InvalidSetting):
        asyncio.run(made())


def test_the_target_comes_from_actonce_target_when_none_is_given(
    monkeypatch: pytest.MonkeyPatch, target: str
) -> None:
    monkeypatch.setenv("ACTONCE_TARGET", target)
    with Client() as client:
        assert client.target == target
        attempt = client.begin("run-target-from-env", "triage")
        assert attempt.create("ticket", {"n": 1}).outcome is Outcome.APPLIED
    # The one given wins over the environment's.
    monkeypatch.setenv("ACTONCE_TARGET", "http://127.0.0.1:1")
    with Client(target) as client:
        assert client.target == target
    with pytest.raises(InvalidSetting) as caught:
        Client()
    assert "is a URL" in refused(caught.value, "ACTONCE_TARGET")


def test_no_target_and_no_actonce_target_names_the_variable() -> None:
    with pytest.raises(InvalidSetting) as caught:
        Client()
    assert "HOST:PORT" in refused(caught.value, "ACTONCE_TARGET")


def test_a_missing_token_file_is_an_invalid_setting_naming_where_it_was_given(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    missing = tmp_path / "api.token"
    with pytest.raises(InvalidSetting) as caught:
        Client("127.0.0.1:1", api_token_file=missing)
    message = refused(caught.value, "api_token_file")
    assert str(missing) in message and "No such file" in message
    monkeypatch.setenv("ACTONCE_API_TOKEN_FILE", str(missing))
    with pytest.raises(InvalidSetting) as caught:
        Client("127.0.0.1:1")
    assert str(missing) in refused(caught.value, "ACTONCE_API_TOKEN_FILE")
