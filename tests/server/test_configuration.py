"""Configuration as an operator meets it: flags, ACTONCE_* variables, and one-line refusals."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sidecar.cli import build_parser, config_from
from sidecar.config.commands import SERVE as SERVE_SETTINGS
from sidecar.config.commands import STORE as STORE_SETTINGS
from sidecar.config.reading import given
from tests.harness import free_port
from tests.helpers.env import scrubbed_env
from tests.helpers.health import wait_serving
from tests.server.processes import run_cli, start_cli, start_server, wait_for_status
from tests.server.scrape import scrape, value


def assert_one_line_refusal(done: subprocess.CompletedProcess[str], *fragments: str) -> None:
    """Exit code 2 and exactly one line on stderr, naming what is wrong; no traceback."""
    assert done.returncode == 2, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("actonce: error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def test_serve_help_lists_every_flag_with_its_variable() -> None:
    done = run_cli("serve", "--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())  # argparse wraps lines anywhere
    for flag, setting in SERVE_SETTINGS.items():
        assert flag in text, flag
        assert f"[env {setting.env}]" in text, setting.env
    for flag in (
        "--metrics-listen",
        "--health-listen",
        "--store-tls-ca",
        "--store-tls-cert",
        "--store-tls-key",
        "--store-token-file",
        "--grace-period",
    ):
        assert flag in SERVE_SETTINGS


def test_every_store_flag_has_a_variable_too() -> None:
    done = run_cli("store", "--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    for flag, setting in STORE_SETTINGS.items():
        assert flag in text and f"[env {setting.env}]" in text, flag
    assert "--token-file" in STORE_SETTINGS


def test_every_variable_is_named_actonce_and_unique_to_its_flag() -> None:
    envs = [setting.env for setting in SERVE_SETTINGS.values()]
    assert all(env.startswith("ACTONCE_") for env in envs)
    assert len(envs) == len(set(envs))


@pytest.mark.parametrize(
    ("env", "fragments"),
    [
        ({"ACTONCE_LISTNE": "127.0.0.1:1"}, ["unknown setting ACTONCE_LISTNE"]),
        # A client-side name misspelt is still a typo.
        ({"ACTONCE_TARGT": "127.0.0.1:1"}, ["unknown setting ACTONCE_TARGT"]),
        ({"ACTONCE_GRACE_PERIOD": "soon"}, ["ACTONCE_GRACE_PERIOD", "soon"]),
        ({"ACTONCE_GRACE_PERIOD": "-1"}, ["ACTONCE_GRACE_PERIOD", "greater than 0"]),
        ({"ACTONCE_METRICS_LISTEN": "9464"}, ["ACTONCE_METRICS_LISTEN", "HOST:PORT"]),
        ({"ACTONCE_METRICS_LISTEN": "unix:/tmp/m.sock"}, ["ACTONCE_METRICS_LISTEN"]),
        ({"ACTONCE_HEALTH_LISTEN": "localhost:99999"}, ["ACTONCE_HEALTH_LISTEN"]),
        ({"ACTONCE_LOG_LEVEL": "loud"}, ["ACTONCE_LOG_LEVEL", "expected one of"]),
        ({"ACTONCE_ID_SCHEME": "4"}, ["ACTONCE_ID_SCHEME", "expected 1, 2 or 3"]),
        ({"ACTONCE_STORE_TOKEN_FILE": "/nonexistent/token"}, ["/nonexistent/token", "no such"]),
        ({"ACTONCE_RULES": " , "}, ["ACTONCE_RULES", "names no rule"]),
    ],
)
def test_a_bad_variable_stops_start_up_with_one_line(
    env: dict[str, str], fragments: list[str]
) -> None:
    assert_one_line_refusal(run_cli("serve", env=env), *fragments)


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--bogus"], ["unrecognized arguments: --bogus", "--help"]),
        (["--listen"], ["--listen", "expected one argument"]),
        (["--listen", "nowhere"], ["--listen", "HOST:PORT"]),
        (
            ["--store-tls-ca", "/nonexistent/ca.pem", "--store-target", "127.0.0.1:1"],
            ["--store-tls-ca", "/nonexistent/ca.pem"],
        ),
    ],
)
def test_a_bad_flag_stops_start_up_with_one_line(args: list[str], fragments: list[str]) -> None:
    assert_one_line_refusal(run_cli("serve", *args), *fragments)


def test_a_missing_subcommand_is_one_line_too() -> None:
    assert_one_line_refusal(run_cli(), "required")


def test_upstream_security_needs_an_external_store(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t0ken")
    assert_one_line_refusal(
        run_cli("serve", "--store-token-file", str(token)),
        "--store-token-file",
        "--store-target",
    )


def test_a_client_certificate_needs_its_key(tmp_path: Path) -> None:
    cert = tmp_path / "client.crt"
    cert.write_text("not checked before the pairing")
    assert_one_line_refusal(
        run_cli("serve", "--store-target", "127.0.0.1:1", "--store-tls-cert", str(cert)),
        "--store-tls-cert",
        "--store-tls-key",
    )


def test_an_empty_token_file_is_refused_at_start(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("\n")
    done = run_cli(
        "serve",
        "--store-target",
        "127.0.0.1:1",
        "--store-token-file",
        str(token),
        "--data-dir",
        str(tmp_path / "data"),
    )
    assert_one_line_refusal(done, str(token), "empty")


def test_a_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_cli(
            "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", str(tmp_path / "data")
        )
    assert_one_line_refusal(done, "cannot start", f"127.0.0.1:{port}")


def test_a_flag_wins_over_its_variable(tmp_path: Path) -> None:
    # Both are malformed-or-wrong in the environment; the flags are what it runs with.
    api, probes = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    served = start_server(
        tmp_path,
        "serve",
        api,
        "--health-listen",
        probes,
        "--grace-period",
        "1",
        env={
            "ACTONCE_LISTEN": "nowhere",
            "ACTONCE_GRACE_PERIOD": "soon",
            "ACTONCE_HEALTH_LISTEN": "127.0.0.1:1",
        },
    )
    try:
        wait_for_status(probes, "SERVING", served=served)
        wait_for_status(api, "SERVING", served=served)
        served.process.send_signal(signal.SIGTERM)
        assert served.process.wait(15) == 0
    finally:
        served.stop()


def test_variables_configure_what_no_flag_names(tmp_path: Path) -> None:
    api, metrics = f"127.0.0.1:{free_port()}", free_port()
    served = start_cli(
        tmp_path / "sidecar.log",
        "serve",
        env={
            "ACTONCE_LISTEN": api,
            "ACTONCE_DATA_DIR": str(tmp_path / "data"),
            "ACTONCE_METRICS_LISTEN": f"127.0.0.1:{metrics}",
            "ACTONCE_LOG_FORMAT": "json",
        },
    )
    try:
        wait_for_status(api, "SERVING", served=served)
        assert (tmp_path / "data" / "audit.db").exists()
        assert value(scrape(metrics), "actonce_draining") == 0
    finally:
        served.stop()


def test_a_second_sidecar_on_a_port_a_sidecar_holds_is_refused(tmp_path: Path) -> None:
    # grpc's default SO_REUSEPORT would let the second bind and take half the calls.
    api = f"127.0.0.1:{free_port()}"
    first = start_server(tmp_path, "serve", api, data="one")
    try:
        wait_for_status(api, "SERVING", served=first)
        second = run_cli("serve", "--listen", api, "--data-dir", str(tmp_path / "two"))
        assert_one_line_refusal(second, "cannot start", api, "in use")
    finally:
        first.stop()


def test_a_taken_metrics_port_is_one_line_naming_it(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_cli(
            "serve",
            "--listen",
            f"127.0.0.1:{free_port()}",
            "--data-dir",
            str(tmp_path / "d"),
            "--metrics-listen",
            f"127.0.0.1:{port}",
        )
    assert_one_line_refusal(done, "metrics", f"127.0.0.1:{port}", "in use")


@pytest.mark.parametrize("how", ["flag", "env"])
def test_a_malformed_dsn_is_refused_without_printing_its_password(how: str) -> None:
    dsn = "mysql://actonce:hunter2@ledger-db/audit"
    done = (
        run_cli("serve", "--audit-dsn", dsn)
        if how == "flag"
        else run_cli("serve", env={"ACTONCE_AUDIT_DSN": dsn})
    )
    assert_one_line_refusal(done, "AUDIT_DSN" if how == "env" else "--audit-dsn", "postgresql")
    assert "hunter2" not in done.stderr + done.stdout


def test_the_store_refuses_half_a_tls_setting_in_one_line(tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_text("not read before the pairing is checked")
    assert_one_line_refusal(
        run_cli("store", "--tls-client-ca", str(ca), "--data-dir", str(tmp_path / "s")),
        "--tls-client-ca",
        "--tls-cert",
    )
    assert_one_line_refusal(
        run_cli("store", "--tls-cert", str(ca), "--data-dir", str(tmp_path / "s")),
        "--tls-cert",
        "--tls-key",
    )


def test_rules_pin_what_the_sidecar_serves_and_unset_serves_any(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def rules(*argv: str) -> frozenset[str] | None:
        args = build_parser().parse_args(["serve", *argv])
        return config_from(given(args, SERVE_SETTINGS)).rules

    monkeypatch.delenv("ACTONCE_RULES", raising=False)
    assert rules() is None
    monkeypatch.setenv("ACTONCE_RULES", "triage, pager")
    assert rules() == frozenset({"triage", "pager"})
    assert rules("--rules", "billing") == frozenset({"billing"})


def test_a_sidecar_and_its_agent_share_one_env_file(tmp_path: Path) -> None:
    # What the docs' agent reads beside what the sidecar does: serve starts with both.
    port = free_port()
    env = {**scrubbed_env(), "ACTONCE_LISTEN": f"127.0.0.1:{port}",
           "ACTONCE_DATA_DIR": str(tmp_path / "data"), "ACTONCE_TARGET": f"127.0.0.1:{port}",
           "ACTONCE_API_TOKEN": "the agent's copy", "ACTONCE_BIN": "actonce"}  # fmt: skip
    with (tmp_path / "serve.log").open("wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "sidecar.cli", "serve"], env=env,
                                   stdout=log, stderr=log)  # fmt: skip
    try:
        wait_serving(f"127.0.0.1:{port}", process)
    finally:
        process.kill()
        process.wait(10)
