"""``actonce store check``: the reference store keeps the contract on both of its databases,
and a store that answers a used id with a new artifact is caught.

The stores are real servers: ``actonce store`` as an operator starts it (SQLite, or
PostgreSQL through ``--store-dsn``), and a broken store that is a real gRPC server too,
the reference store's servicer with one lie in it.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from actonce_api.store.v1 import artifact_store_pb2 as pb
from actonce_api.store.v1 import artifact_store_pb2_grpc as pb_grpc

from sidecar import conformance
from sidecar.refstore.servicer import ArtifactStoreServicer
from sidecar.refstore.sqlite import SqliteStoreBackend
from sidecar.store_contract import RefusalCode
from tests.harness import Loop, free_port
from tests.helpers import postgres as pg
from tests.server.processes import run_cli, start_server, wait_for_status

TOKEN = "conformance-token-5e1f"


@pytest.fixture(params=["sqlite", "postgres"])
def reference_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """``actonce store`` on one of its databases, with a token; its target."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    flags = ["--token-file", str(token_file)]
    dsn = None
    if request.param == "postgres":
        dsn = pg.fresh_database("conformance")
        flags += ["--store-dsn", dsn]
    target = f"127.0.0.1:{free_port()}"
    served = start_server(tmp_path, "store", target, *flags)
    try:
        wait_for_status(target, "SERVING", served=served)
        yield target
    finally:
        served.stop()
        if dsn is not None:
            pg.drop_database(dsn)


def test_the_reference_store_keeps_the_contract(reference_store: str, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    done = run_cli(
        "store", "check", "--target", reference_store, "--token-file", str(token_file),
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line.split() for line in done.stdout.splitlines() if line.startswith("  ")]
    assert {line[0] for line in lines} == {"ok"}, done.stdout
    assert [line[1].rstrip(":") for line in lines] == [name for name, _ in conformance.CHECKS]
    assert f"{len(conformance.CHECKS)} held, 0 failed, 0 skipped" in done.stdout


class AnswersAUsedIdWithANewArtifact(ArtifactStoreServicer):
    """The reference store, but CreateArtifact of a used id overwrites it and answers as if
    it had made it: the one lie that would make a retried write land twice."""

    def __init__(self, backend: SqliteStoreBackend) -> None:
        super().__init__(backend)
        self.backend = backend
        self.made: dict[str, Any] = {}

    async def CreateArtifact(self, request: pb.CreateArtifactRequest, context: Any) -> Any:
        if request.artifact_id in self.made:
            artifact = pb.StoredArtifact(
                id=request.artifact_id, kind=request.kind, version=1,
                data_json=request.data_json,
            )  # fmt: skip
            return pb.CreateArtifactResponse(artifact=artifact)
        answer = await super().CreateArtifact(request, context)
        self.made[request.artifact_id] = answer
        return answer


@pytest.fixture
def broken_store(tmp_path: Path) -> Iterator[str]:
    loop = Loop()
    backend = SqliteStoreBackend(tmp_path / "store.db")

    async def build() -> tuple[grpc.aio.Server, int]:
        server = grpc.aio.server()
        pb_grpc.add_ArtifactStoreServiceServicer_to_server(
            AnswersAUsedIdWithANewArtifact(backend), server
        )
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        return server, port

    server, port = loop.run(build())
    try:
        yield f"127.0.0.1:{port}"
    finally:
        loop.run(server.stop(None))
        loop.close()
        backend.close()


def test_a_store_that_answers_a_used_id_with_a_new_artifact_fails(broken_store: str) -> None:
    done = run_cli("store", "check", "--target", broken_store, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    failed = [line for line in done.stdout.splitlines() if line.startswith("  FAIL")]
    # Racing, the lie lands more than once (how many times is the threads' luck).
    assert [line.split(":")[0] for line in failed] == ["  FAIL  ids/artifact", "  FAIL  ids/race"]
    assert (
        failed[0] == "  FAIL  ids/artifact: CreateArtifact succeeded where the contract refuses it"
    )
    assert re.fullmatch(
        r"  FAIL  ids/race: [2-8] of 8 creates racing for one id succeeded, not 1", failed[1]
    )
    assert "the store BREAKS the contract" in done.stdout


def test_the_kit_says_what_it_saw_when_a_refusal_is_wrong() -> None:
    """A refusal with the right reason but the wrong status code, states or domain is named."""
    answer = conformance.Answer(
        grpc.StatusCode.FAILED_PRECONDITION, "INVALID_STATE", "store.actonce",
        frozenset({"ID_USED"}), "",
    )  # fmt: skip
    with pytest.raises(conformance.Broken) as caught:
        conformance.expect(answer, RefusalCode.INVALID_STATE, {"ID_USED"})
    assert str(caught.value) == (
        "expected ALREADY_EXISTS, reason 'INVALID_STATE', domain 'store.actonce', states ID_USED;"
        " got FAILED_PRECONDITION, reason 'INVALID_STATE', domain 'store.actonce', states ID_USED"
    )


def test_a_store_that_cannot_be_reached_exits_2() -> None:
    done = run_cli("store", "check", "--target", f"127.0.0.1:{free_port()}", "--timeout", "1")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("actonce: error: the store at 127.0.0.1:"), done.stderr


def test_check_needs_a_target() -> None:
    done = run_cli("store", "check")
    assert (done.returncode, done.stderr.strip()) == (
        2,
        "actonce: error: store check needs --target HOST:PORT (or ACTONCE_STORE_TARGET)",
    )


def test_every_check_runs_against_the_embedded_servicer_in_process(tmp_path: Path) -> None:
    """The same kit as a library: run_checks on a channel, its output one line a check."""
    loop = Loop()
    backend = SqliteStoreBackend(tmp_path / "store.db")

    async def build() -> tuple[grpc.aio.Server, int]:
        server = grpc.aio.server()
        pb_grpc.add_ArtifactStoreServiceServicer_to_server(ArtifactStoreServicer(backend), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        return server, port

    server, port = loop.run(build())
    try:
        out = io.StringIO()
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            held = conformance.run_checks(conformance.Store(channel, (), 10.0), out)
        assert held == 0, out.getvalue()
        assert "  SKIP  refusals/forbidden: no token given" in out.getvalue()
    finally:
        loop.run(server.stop(None))
        loop.close()
        backend.close()
