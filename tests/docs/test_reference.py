"""The reference pages are the code's own word, naming every setting, flag, metric, error reason and API element the code has, each found here
by a road of its own (the parsers, a live sidecar's /metrics, the source's reasons, the
protos), not by the generator's."""

from __future__ import annotations

import argparse
import contextlib
import re
import urllib.request
from pathlib import Path

import grpc

from sidecar import errors
from sidecar.cli import build_parser
from sidecar.config import commands
from tests.docs.pages import ROOT
from tests.docs.pages import reference_page as page
from tests.harness import free_port, sidecar_config, start_sidecar


def test_every_setting_of_every_command_is_in_the_settings_reference() -> None:
    text = page("settings.md")
    tables = (commands.SERVE, commands.CONSOLE, commands.STORE, commands.CHECK, commands.AUDIT)
    for table in tables:
        for flag, setting in table.items():
            assert f"`{flag}`" in text and f"`{setting.env}`" in text, flag
    for variable in commands.known_variables():
        assert f"`{variable}`" in text, variable


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += _parsers(sub)
    return found


def test_every_command_and_flag_is_in_the_cli_reference() -> None:
    text = page("cli.md")
    for parser in _parsers(build_parser()):
        assert f"`{parser.prog}`" in text, parser.prog
        for action in parser._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert re.search(rf"`{re.escape(option)}[ `,]", text), (parser.prog, option)


def test_every_metric_a_live_sidecar_serves_is_in_the_metrics_reference(tmp_path: Path) -> None:
    port = free_port()
    running = start_sidecar(sidecar_config(tmp_path, metrics_listen=f"127.0.0.1:{port}"))
    try:
        # One write and one refusal, so that the labelled families have a sample to show.
        from actonce_api.v1 import run_actions_pb2 as pb

        attempt = running.begin()
        running.stub.Create(pb.CreateRequest(attempt_id=attempt, kind="t", data_json="{}"))
        with contextlib.suppress(grpc.RpcError):
            running.stub.Create(pb.CreateRequest(attempt_id=attempt, kind="t", data_json="["))
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            scraped = answer.read().decode()
    finally:
        running.stop()
    families = set(re.findall(r"^# TYPE (actonce_\w+) (\w+)$", scraped, re.M))
    assert len(families) > 10, scraped[:500]
    text = page("metrics.md")
    for name, kind in families:
        shown = name + "_total" if kind == "counter" and not name.endswith("_total") else name
        assert f"`{shown}` | {kind} |" in text, shown


def _reasons_in_source() -> set[str]:
    found: set[str] = set()
    for source in (ROOT / "sidecar").rglob("*.py"):
        text = source.read_text()
        found |= set(re.findall(r'^\s+reason = "([A-Z_]+)"$', text, re.M))
        found |= set(re.findall(r'\bRefusal\(\s*\d+,\s*"([A-Z_]+)"', text))
        found |= set(re.findall(r'\brefusal_body\(\s*"([A-Z_]+)"', text))
    return found


def test_every_error_reason_is_in_the_errors_reference() -> None:
    text = page("errors.md")
    reasons = _reasons_in_source()
    assert {"UNKNOWN_ATTEMPT", "HOST_NOT_ALLOWED", "REQUEST_TIMEOUT"} <= reasons
    for reason in reasons:
        assert f"`{reason}`" in text, reason
    for klass in errors.FailureClass:
        assert f"`{klass.value}`" in text, klass


def test_every_rpc_message_and_enum_of_the_protos_is_in_the_api_reference() -> None:
    text = page("api.md")
    declared: set[str] = set()
    for proto in (ROOT / "protos" / "actonce").rglob("*.proto"):
        source = proto.read_text()
        declared |= set(re.findall(r"^\s*(?:service|message|enum) (\w+)", source, re.M))
        declared |= set(re.findall(r"^\s*rpc (\w+)\(", source, re.M))
    assert "RunActionsService" in declared and "BeginAttempt" in declared
    for name in declared:
        assert re.search(rf"^#+ {name}$|`{name}`", text, re.M), name
