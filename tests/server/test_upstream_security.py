"""TLS, mutual TLS and the bearer token between a real sidecar and a real reference store.

The certificates are made here (tests/server/pki.py); the reference store serves TLS with
sidecar.ops.security.server_credentials, in this process or as `actonce store`.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import structlog
from actonce_api.store.v1 import artifact_store_pb2 as spb
from actonce_api.store.v1 import artifact_store_pb2_grpc as spb_grpc
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import types_pb2

from sidecar.ops.security import server_credentials
from sidecar.refstore.server import create_store_server
from sidecar.refstore.sqlite import SqliteStoreBackend
from sidecar.upstream.grpc import connect_store
from tests.harness import (
    Loop,
    RunningSidecar,
    free_port,
    refusal,
    sidecar_config,
    start_sidecar,
    start_store,
)
from tests.server.pki import Pki, make_pki
from tests.server.processes import Served, run_cli, start_cli, wait_for_status

TOKEN = "s3cr3t-token-0123456789"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@dataclass
class TlsStore:
    target: str
    backend: SqliteStoreBackend


@pytest.fixture
def tls_store(tmp_path: Path, pki: Pki, request: pytest.FixtureRequest) -> Iterator[TlsStore]:
    """A reference store on TLS; parametrize indirectly with True to require client certs."""
    mutual = bool(getattr(request, "param", False))
    loop = Loop()
    backend = SqliteStoreBackend(tmp_path / "store.db")

    async def build() -> tuple[grpc.aio.Server, int]:
        credentials = server_credentials(
            pki.server_cert, pki.server_key, pki.ca if mutual else None
        )
        server, port = await create_store_server(backend, credentials=credentials)
        await server.start()
        return server, port

    server, port = loop.run(build())
    try:
        # The certificate names localhost and 127.0.0.1; either verifies.
        yield TlsStore(f"localhost:{port}", backend)
    finally:
        loop.run(server.stop(0))
        backend.close()
        loop.close()


def create(sc: RunningSidecar) -> Any:
    return sc.stub.Create(
        pb.CreateRequest(attempt_id=sc.begin(), kind="ticket", data_json=json.dumps({"a": 1}))
    )


def sidecar_to(tmp_path: Path, target: str, **settings: Any) -> RunningSidecar:
    return start_sidecar(sidecar_config(tmp_path / "sidecar", store_target=target, **settings))


def token_file(tmp_path: Path, text: str = TOKEN + "\n") -> Path:
    path = tmp_path / "store-token"
    path.write_text(text)
    path.chmod(0o600)
    return path


def test_tls_to_the_store_carries_writes(tmp_path: Path, pki: Pki, tls_store: TlsStore) -> None:
    sc = sidecar_to(tmp_path, tls_store.target, store_tls_ca=pki.ca)
    try:
        answer = create(sc)
        assert answer.outcome == types_pb2.OUTCOME_APPLIED
        assert tls_store.backend.get_artifact(answer.id).kind == "ticket"
        assert sc.health() == 1  # SERVING
    finally:
        sc.stop()


def test_a_store_certificate_no_trusted_ca_signed_is_unavailable(
    tmp_path: Path, pki: Pki, tls_store: TlsStore
) -> None:
    sc = sidecar_to(tmp_path, tls_store.target, store_tls_ca=pki.stranger_ca)
    try:
        with pytest.raises(grpc.RpcError) as caught:
            create(sc)
        got = refusal(caught.value)
        assert (got.reason, got.failure_class) == ("STORE_UNAVAILABLE", "RETRYABLE")
        assert sc.health() == 2  # NOT_SERVING
        assert tls_store.backend.list_artifacts("ticket").artifacts == ()
    finally:
        sc.stop()


def test_plaintext_to_a_tls_store_does_not_get_through(tmp_path: Path, tls_store: TlsStore) -> None:
    sc = sidecar_to(tmp_path, tls_store.target)
    try:
        with pytest.raises(grpc.RpcError) as caught:
            create(sc)
        assert refusal(caught.value).reason == "STORE_UNAVAILABLE"
    finally:
        sc.stop()


@pytest.mark.parametrize("tls_store", [True], indirect=True)
def test_mutual_tls_lets_in_the_client_the_ca_signed(
    tmp_path: Path, pki: Pki, tls_store: TlsStore
) -> None:
    sc = sidecar_to(
        tmp_path,
        tls_store.target,
        store_tls_ca=pki.ca,
        store_tls_cert=pki.client_cert,
        store_tls_key=pki.client_key,
    )
    try:
        assert create(sc).outcome == types_pb2.OUTCOME_APPLIED
    finally:
        sc.stop()


@pytest.mark.parametrize("tls_store", [True], indirect=True)
@pytest.mark.parametrize("client", ["none", "stranger"])
def test_mutual_tls_keeps_out_a_client_without_a_certificate_the_ca_signed(
    tmp_path: Path, pki: Pki, tls_store: TlsStore, client: str
) -> None:
    pair = (
        {"store_tls_cert": pki.stranger_client_cert, "store_tls_key": pki.stranger_client_key}
        if client == "stranger"
        else {}
    )
    sc = sidecar_to(tmp_path, tls_store.target, store_tls_ca=pki.ca, **pair)
    try:
        with pytest.raises(grpc.RpcError) as caught:
            create(sc)
        assert refusal(caught.value).reason == "STORE_UNAVAILABLE"
        assert tls_store.backend.list_artifacts("ticket").artifacts == ()
    finally:
        sc.stop()


def test_the_token_from_its_file_gets_writes_in(tmp_path: Path) -> None:
    store = start_store(tmp_path / "store", token=TOKEN)
    sc = sidecar_to(tmp_path, store.target, store_token_file=token_file(tmp_path))
    try:
        assert create(sc).outcome == types_pb2.OUTCOME_APPLIED
        assert sc.health() == 1
    finally:
        sc.stop()
        store.stop()


@pytest.mark.parametrize("presented", [None, "not-the-token"])
def test_without_the_right_token_the_store_answers_forbidden(
    tmp_path: Path, presented: str | None
) -> None:
    store = start_store(tmp_path / "store", token=TOKEN)
    settings = {} if presented is None else {"store_token_file": token_file(tmp_path, presented)}
    sc = sidecar_to(tmp_path, store.target, **settings)
    try:
        with pytest.raises(grpc.RpcError) as caught:
            create(sc)
        got = refusal(caught.value)
        assert (got.code, got.reason, got.failure_class) == (
            grpc.StatusCode.PERMISSION_DENIED,
            "FORBIDDEN",
            "PERMANENT",
        )
        # Every write would be refused: the sidecar is not ready.
        assert sc.health() == 2
        assert store.backend.list_artifacts("ticket").artifacts == ()
    finally:
        sc.stop()
        store.stop()


def test_the_token_appears_in_no_log_line(tmp_path: Path) -> None:
    store = start_store(tmp_path / "store", token="wrong-" + TOKEN)
    with structlog.testing.capture_logs() as logs:
        sc = sidecar_to(tmp_path, store.target, store_token_file=token_file(tmp_path))
        try:
            with pytest.raises(grpc.RpcError):
                create(sc)  # refused: the log speaks of it, and must not quote the token
        finally:
            sc.stop()
            store.stop()
    assert logs, "nothing was logged"
    assert TOKEN not in repr(logs)


def test_the_token_is_never_a_flag_value() -> None:
    done = run_cli("serve", "--store-token", TOKEN)
    assert done.returncode == 2
    assert TOKEN not in done.stdout


def test_the_store_command_checks_the_token_from_its_file(tmp_path: Path) -> None:
    listen = f"127.0.0.1:{free_port()}"
    path = token_file(tmp_path)
    served = start_cli(
        tmp_path / "store.log",
        "store",
        "--listen",
        listen,
        "--data-dir",
        str(tmp_path / "store"),
        "--token-file",
        str(path),
        "--log-format",
        "json",
    )
    try:
        wait_for_status(listen, "SERVING", served=served)
        with grpc.insecure_channel(listen) as channel:
            stub = spb_grpc.ArtifactStoreServiceStub(channel)
            request = spb.GetArtifactRequest(artifact_id="missing")
            with pytest.raises(grpc.RpcError) as without:
                stub.GetArtifact(request)
            assert without.value.code() == grpc.StatusCode.PERMISSION_DENIED
            with pytest.raises(grpc.RpcError) as with_token:
                stub.GetArtifact(request, metadata=(("authorization", f"Bearer {TOKEN}"),))
            # Past the token check: the store looked and found nothing.
            assert with_token.value.code() == grpc.StatusCode.NOT_FOUND

        sc = sidecar_to(tmp_path, listen, store_token_file=path)
        try:
            assert create(sc).outcome == types_pb2.OUTCOME_APPLIED
        finally:
            sc.stop()
        served.process.send_signal(signal.SIGTERM)
        assert served.process.wait(15) == 0
        assert TOKEN not in served.log()
    finally:
        served.stop()


@pytest.mark.parametrize(
    ("target", "warned"),
    [("store.example.com:50052", True), ("127.0.0.1:50052", False), ("unix:/run/s.sock", False)],
)
def test_a_token_over_plaintext_beyond_this_machine_is_warned_of(
    tmp_path: Path, target: str, warned: bool
) -> None:
    async def connect_and_close() -> None:
        # A channel connects on its first call; none is made, so nothing leaves the machine.
        client = connect_store(target, token_file=token_file(tmp_path))
        await client.close()

    with structlog.testing.capture_logs() as logs:
        asyncio.run(connect_and_close())
    assert any(line["event"] == "store_token_without_tls" for line in logs) == warned


def test_the_store_command_serves_mutual_tls_and_checks_the_token(tmp_path: Path, pki: Pki) -> None:
    port = free_port()
    path = token_file(tmp_path)
    served = start_cli(
        tmp_path / "store.log",
        "store",
        "--listen",
        f"127.0.0.1:{port}",
        "--data-dir",
        str(tmp_path / "store"),
        "--tls-cert",
        str(pki.server_cert),
        "--tls-key",
        str(pki.server_key),
        "--tls-client-ca",
        str(pki.ca),
        "--token-file",
        str(path),
        "--log-format",
        "json",
    )
    target = f"localhost:{port}"
    pair = {"store_tls_cert": pki.client_cert, "store_tls_key": pki.client_key}
    try:
        trusted = sidecar_to(
            tmp_path / "a", target, store_tls_ca=pki.ca, store_token_file=path, **pair
        )
        try:
            wait_until(lambda: trusted.health() == 1, served)
            assert create(trusted).outcome == types_pb2.OUTCOME_APPLIED
        finally:
            trusted.stop()
        # The right certificate without the token, and the token without a certificate.
        for settings, reason in (
            ({"store_tls_ca": pki.ca, **pair}, "FORBIDDEN"),
            ({"store_tls_ca": pki.ca, "store_token_file": path}, "STORE_UNAVAILABLE"),
        ):
            refused = sidecar_to(tmp_path / "b", target, **settings)
            try:
                with pytest.raises(grpc.RpcError) as caught:
                    create(refused)
                assert refusal(caught.value).reason == reason
                assert refused.health() == 2
            finally:
                refused.stop()
        served.process.send_signal(signal.SIGTERM)
        assert served.process.wait(15) == 0
        assert '"tls": true' in served.log()
    finally:
        served.stop()


def wait_until(ready: Callable[[], bool], served: Served, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert served.process.poll() is None, served.log()[-2000:]
        if ready():
            return
        time.sleep(0.1)
    raise AssertionError(f"never ready: {served.log()[-2000:]}")
