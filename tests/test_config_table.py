"""A setting of the sidecar is one field of Config: its flag, variable, parser, default and
help come from that field alone, and so does the value the sidecar is given."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from sidecar.cli import build_parser, config_from
from sidecar.config import Config, settings_of, values
from sidecar.config.commands import SERVE, known_variables
from sidecar.config.reading import ConfigError, add_settings, given
from sidecar.config.setting import setting


def _serve(*argv: str) -> Config:
    return config_from(given(build_parser().parse_args(["serve", *argv]), SERVE))


def test_every_field_of_config_but_the_poll_interval_is_a_setting() -> None:
    declared = {s.dest for s in settings_of(Config) if s.file_of is None}
    fields = {field.name for field in dataclasses.fields(Config)}
    assert fields - declared == {"health_interval_seconds"}
    flags = [s.flag for s in SERVE.values()]
    envs = [s.env for s in SERVE.values()]
    assert len(flags) == len(set(flags)) and len(envs) == len(set(envs))
    assert set(envs) <= known_variables()


def test_a_setting_not_given_keeps_the_fields_default(monkeypatch: pytest.MonkeyPatch) -> None:
    for s in SERVE.values():
        monkeypatch.delenv(s.env, raising=False)
    assert _serve() == Config()


def test_a_flag_and_a_variable_reach_their_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACTONCE_GRACE_PERIOD", "3.5")
    upstreams = ["--mcp-upstream", "a=http://x/mcp", "--mcp-upstream", "b=http://y/mcp"]
    config = _serve("--store-timeout", "7", "--mcp-listen", "127.0.0.1:1", *upstreams)
    assert config.store_timeout_seconds == 7.0
    assert config.grace_seconds == 3.5
    assert config.mcp_upstreams == {"a": "http://x/mcp", "b": "http://y/mcp"}


def test_a_dsn_read_from_its_file_is_the_dsn_and_both_are_refused(tmp_path: Path) -> None:
    secret = tmp_path / "dsn"
    secret.write_text("postgresql://u:p@h/db\n")
    assert _serve("--audit-dsn-file", str(secret)).audit_dsn == "postgresql://u:p@h/db"
    with pytest.raises(ConfigError, match="--audit-dsn and --audit-dsn-file both name a DSN"):
        _serve("--audit-dsn-file", str(secret), "--audit-dsn", "postgresql://h/db")


def test_a_new_setting_is_one_field(monkeypatch: pytest.MonkeyPatch) -> None:
    @dataclasses.dataclass
    class WithAKnob(Config):
        knob: int = setting("--knob", "ACTONCE_KNOB", values.positive_int, "a knob", 3)

    table = {s.flag: s for s in settings_of(WithAKnob)}
    parser = argparse.ArgumentParser()
    add_settings(parser, table)
    assert "a knob (default 3) [env ACTONCE_KNOB]" in " ".join(parser.format_help().split())
    assert WithAKnob(**given(parser.parse_args([]), table)).knob == 3
    monkeypatch.setenv("ACTONCE_KNOB", "5")
    assert WithAKnob(**given(parser.parse_args([]), table)).knob == 5
    assert WithAKnob(**given(parser.parse_args(["--knob", "8"]), table)).knob == 8
    with pytest.raises(ConfigError, match="--knob='0' is not valid: must be greater than 0"):
        given(parser.parse_args(["--knob", "0"]), table)


@pytest.mark.parametrize("text", ["nan", "inf", "NaN", "Infinity"])
def test_a_number_of_seconds_is_finite(text: str) -> None:
    with pytest.raises(
        ConfigError, match=f"--store-timeout='{text}' is not valid: must be a number"
    ):
        _serve("--store-timeout", text)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--store-target", "127.0.0.1:1", "--store-dsn", "postgresql://h/s"],
         "--store-target and --store-dsn name two places: give one"),
        (["--audit-db", "/tmp/a.db", "--audit-dsn", "postgresql://h/a"],
         "--audit-db and --audit-dsn name two places: give one"),
    ],
)  # fmt: skip
def test_two_settings_of_which_one_would_be_ignored_are_refused(
    argv: list[str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        _serve(*argv)
