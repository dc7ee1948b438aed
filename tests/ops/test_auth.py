"""The API token's pieces alone: the file followed as it rotates, the header, the exemptions."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sidecar.ops import auth
from sidecar.ops.security import SecuritySettingError


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def rotate(path: Path, token: str) -> None:
    """As the kubelet updates a Secret: a new file swapped in whole."""
    fresh = path.with_suffix(".new")
    fresh.write_text(token + "\n")
    os.replace(fresh, path)


def test_the_token_is_read_without_its_newline_and_compared_whole(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("s3cret\n")
    token = auth.TokenFile(path)
    assert token.matches(b"s3cret")
    for wrong in (b"s3cre", b"s3cret ", b"S3CRET", b"", None):
        assert not token.matches(wrong)
    assert "s3cret" not in repr(token)


@pytest.mark.parametrize("content", ["", "\n", "two words", "t\x01k", "tökén"])
def test_a_file_that_holds_no_usable_token_stops_start_up(tmp_path: Path, content: str) -> None:
    path = tmp_path / "token"
    path.write_text(content)
    with pytest.raises(SecuritySettingError, match="API token file"):
        auth.TokenFile(path)


def test_a_missing_file_stops_start_up(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        auth.TokenFile(tmp_path / "nothing")


def test_a_rotated_file_is_taken_at_once_and_the_old_token_ends_after_the_overlap(
    tmp_path: Path,
) -> None:
    path, clock = tmp_path / "token", Clock()
    path.write_text("old-token")
    token = auth.TokenFile(path, clock=clock)
    rotate(path, "new-token")
    # A caller that already holds the new token is let in before the next periodic look.
    assert token.matches(b"new-token")
    clock.now += auth.ROTATION_OVERLAP_SECONDS - 1
    assert token.matches(b"old-token")
    clock.now += 2
    assert not token.matches(b"old-token")
    assert token.matches(b"new-token")


def test_callers_of_the_old_token_alone_see_the_rotation_within_a_second(tmp_path: Path) -> None:
    path, clock = tmp_path / "token", Clock()
    path.write_text("old-token")
    token = auth.TokenFile(path, clock=clock)
    rotate(path, "new-token")
    assert token.matches(b"old-token")  # not looked at yet: the file is read at most once a second
    clock.now += auth.RECHECK_SECONDS
    assert token.matches(b"old-token")  # seen now: the overlap begins
    clock.now += auth.ROTATION_OVERLAP_SECONDS
    assert not token.matches(b"old-token")


def test_a_file_caught_mid_update_keeps_the_last_token(tmp_path: Path) -> None:
    path, clock = tmp_path / "token", Clock()
    path.write_text("the-token")
    token = auth.TokenFile(path, clock=clock)
    path.unlink()
    clock.now += auth.RECHECK_SECONDS
    assert token.matches(b"the-token")
    path.write_text("")
    clock.now += auth.RECHECK_SECONDS
    assert token.matches(b"the-token")
    assert not token.matches(b"")


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (["Bearer abc"], b"abc"),
        (["bearer abc"], b"abc"),
        ([b"Bearer abc"], b"abc"),
        ([], None),
        (["Basic abc"], None),
        (["Bearer"], None),
        (["Bearer "], None),
        (["abc"], None),
        # Two credentials: which one a proxy added cannot be told.
        (["Bearer abc", "Bearer abc"], None),
    ],
)
def test_the_bearer_credential(values: list[str | bytes], expected: bytes | None) -> None:
    assert auth.bearer(values) == expected


def test_exemptions_name_health_and_reflection_or_none() -> None:
    assert auth.parse_exempt("health,reflection") == {"health", "reflection"}
    assert auth.parse_exempt(" reflection ") == {"reflection"}
    assert auth.parse_exempt("none") == frozenset()
    for bad in ("", "all", "health,none", "grpc.health.v1.Health"):
        with pytest.raises(ValueError):
            auth.parse_exempt(bad)
    assert auth.exempt_services({"health"}) == {"grpc.health.v1.Health"}
    # By default health alone: reflection maps the API for whoever has no token.
    assert auth.exempt_services(auth.DEFAULT_EXEMPT) == {"grpc.health.v1.Health"}
    assert auth.exempt_services({"reflection"}) == {
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
    }


def test_a_capability_has_one_spelling(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("s3cret-token\n")
    capabilities = auth.Capabilities(auth.TokenFile(path))
    issued = capabilities.issue("att_1")
    assert capabilities.holder(issued.encode()) == "att_1"
    form, attempt, mac = issued.split(".")
    for spelled in (f"{mac[:4]}!!{mac[4:]}", f"{mac}=", f"{mac[:4]}={mac[4:]}"):
        assert capabilities.holder(f"{form}.{attempt}.{spelled}".encode()) is None, spelled
    assert capabilities.holder(f"{form}.att_2.{mac}".encode()) is None
