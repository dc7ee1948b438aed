"""The agent API beyond loopback, with real ``actonce serve`` processes and real TLS clients.

Listening beyond loopback without the API token is refused at start-up, as is a token that
would travel in clear (unless ``--insecure-listen true`` says the network protects it).
With ``--tls-cert`` and ``--tls-key`` the API serves TLS only; with ``--tls-client-ca``
only clients that CA signed get in. The certificates are made by the test (tests.server.pki).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc

from tests.harness import free_port
from tests.server.pki import Pki, make_pki
from tests.server.processes import Served, run_cli, start_server, wait_for_status
from tests.server.test_api_token import GOOD, assert_unauthenticated, token_file
from tests.server.test_configuration import assert_one_line_refusal

BEGIN = pb.BeginAttemptRequest(run_id="run-tls", rule="triage", checkpoint="cp")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _read(path: Path) -> bytes:
    return path.read_bytes()


def test_beyond_loopback_without_the_token_is_refused(tmp_path: Path) -> None:
    data = ["--data-dir", str(tmp_path / "d")]
    for listen in ("0.0.0.0:0", "[::]:0", "10.1.2.3:50051", "sidecar.example:50051"):
        refused = run_cli("serve", "--listen", listen, *data)
        assert_one_line_refusal(refused, f"--listen {listen}", "not loopback", "--api-token-file")
    # As a variable too.
    refused = run_cli("serve", *data, env={"ACTONCE_LISTEN": "0.0.0.0:0"})
    assert_one_line_refusal(refused, "--api-token-file")


def test_beyond_loopback_with_the_token_in_clear_is_refused(tmp_path: Path, pki: Pki) -> None:
    token = ["--api-token-file", str(token_file(tmp_path))]
    data = ["--data-dir", str(tmp_path / "d")]
    refused = run_cli("serve", "--listen", "0.0.0.0:0", *token, *data)
    assert_one_line_refusal(refused, "no TLS", "--tls-cert", "--insecure-listen true")
    cert, key, ca = str(pki.server_cert), str(pki.server_key), str(pki.ca)
    for flags, fragment in [
        (["--tls-cert", cert], "--tls-cert and --tls-key go together"),
        (["--tls-key", key], "--tls-cert and --tls-key go together"),
        (["--tls-client-ca", ca], "--tls-client-ca needs --tls-cert"),
        (["--insecure-listen", "yes"], "--insecure-listen='yes' is not valid"),
        (["--tls-cert", str(tmp_path / "none.crt"), "--tls-key", key], "no such file"),
    ]:
        assert_one_line_refusal(run_cli("serve", *flags, *token, *data), fragment)


def _serve(tmp_path: Path, *flags: str) -> tuple[Served, int]:
    """``actonce serve`` on every address with the token and ``flags``, SERVING."""
    port, probes = free_port(), f"127.0.0.1:{free_port()}"
    served = start_server(
        tmp_path,
        "serve",
        f"0.0.0.0:{port}",
        "--api-token-file",
        str(token_file(tmp_path)),
        "--health-listen",
        probes,
        *flags,
    )
    wait_for_status(probes, "SERVING", served=served)
    return served, port


@pytest.fixture
def stopped() -> Iterator[list[Served]]:
    started: list[Served] = []
    yield started
    for served in started:
        served.stop()


def _begin(channel: grpc.Channel) -> str:
    stub = pb_grpc.RunActionsServiceStub(channel)
    return str(stub.BeginAttempt(BEGIN, metadata=GOOD, timeout=10).attempt_id)


def _fails_to_connect(channel: grpc.Channel) -> None:
    with pytest.raises(grpc.RpcError) as failed:
        pb_grpc.RunActionsServiceStub(channel).BeginAttempt(BEGIN, metadata=GOOD, timeout=5)
    assert failed.value.code() is grpc.StatusCode.UNAVAILABLE, failed.value


def test_the_agent_api_serves_tls(tmp_path: Path, pki: Pki, stopped: list[Served]) -> None:
    served, port = _serve(
        tmp_path, "--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)
    )
    stopped.append(served)
    trusting = grpc.ssl_channel_credentials(root_certificates=_read(pki.ca))
    with grpc.secure_channel(f"127.0.0.1:{port}", trusting) as channel:
        assert _begin(channel)
        # TLS does not stand in for the token.
        with pytest.raises(grpc.RpcError) as refused:
            pb_grpc.RunActionsServiceStub(channel).BeginAttempt(BEGIN, timeout=10)
        assert_unauthenticated(refused.value, "BeginAttempt over TLS without the token")
    # Plaintext is not served, and a client that trusts another CA does not connect.
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        _fails_to_connect(channel)
    stranger = grpc.ssl_channel_credentials(root_certificates=_read(pki.stranger_ca))
    with grpc.secure_channel(f"127.0.0.1:{port}", stranger) as channel:
        _fails_to_connect(channel)


def test_mutual_tls_lets_in_only_the_clients_its_ca_signed(
    tmp_path: Path, pki: Pki, stopped: list[Served]
) -> None:
    served, port = _serve(
        tmp_path,
        "--tls-cert",
        str(pki.server_cert),
        "--tls-key",
        str(pki.server_key),
        "--tls-client-ca",
        str(pki.ca),
    )
    stopped.append(served)
    target = f"127.0.0.1:{port}"
    ours = grpc.ssl_channel_credentials(
        root_certificates=_read(pki.ca),
        private_key=_read(pki.client_key),
        certificate_chain=_read(pki.client_cert),
    )
    with grpc.secure_channel(target, ours) as channel:
        assert _begin(channel)
    without_a_certificate = grpc.ssl_channel_credentials(root_certificates=_read(pki.ca))
    strangers = grpc.ssl_channel_credentials(
        root_certificates=_read(pki.ca),
        private_key=_read(pki.stranger_client_key),
        certificate_chain=_read(pki.stranger_client_cert),
    )
    for credentials in (without_a_certificate, strangers):
        with grpc.secure_channel(target, credentials) as channel:
            _fails_to_connect(channel)


def test_insecure_listen_says_the_network_protects_the_token(
    tmp_path: Path, stopped: list[Served]
) -> None:
    served, port = _serve(tmp_path, "--insecure-listen", "true")
    stopped.append(served)
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        assert _begin(channel)
