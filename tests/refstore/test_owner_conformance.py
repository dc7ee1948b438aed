"""``actonce store check`` catches a store that ignores the principal: one that records no
owner and lets every rule reach every artifact and thread, as stores did before ownership.

The store is a real gRPC server: the reference store's servicer, with the principal dropped
from every call before the backend sees it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from actonce_api.store.v1 import artifact_store_pb2_grpc as pb_grpc

from sidecar.refstore.servicer import ArtifactStoreServicer
from sidecar.refstore.sqlite import SqliteStoreBackend
from tests.harness import Loop
from tests.server.processes import run_cli


class IgnoresPrincipals(ArtifactStoreServicer):
    """The reference store, deaf to principals: it records no owner and refuses nobody."""

    async def _call(
        self, context: Any, operation: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Any:
        kwargs.pop("principal", None)
        return await super()._call(context, operation, *args, **kwargs)


@pytest.fixture
def deaf_store(tmp_path: Path) -> Iterator[str]:
    loop = Loop()
    backend = SqliteStoreBackend(tmp_path / "store.db")

    async def build() -> tuple[grpc.aio.Server, int]:
        server = grpc.aio.server()
        pb_grpc.add_ArtifactStoreServiceServicer_to_server(IgnoresPrincipals(backend), server)
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


def test_a_store_that_ignores_the_principal_fails_the_owner_checks(deaf_store: str) -> None:
    done = run_cli("store", "check", "--target", deaf_store, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    failed = [line for line in done.stdout.splitlines() if line.startswith("  FAIL")]
    assert [line.split(":")[0].split()[-1] for line in failed] == [
        "owners/recorded", "owners/other-rule-refused", "owners/granted",
    ]  # fmt: skip
    assert "the created artifact's owner: expected" in failed[0]
    assert "GetArtifact by another rule: GetArtifact succeeded" in failed[1]
    held = [line.split()[1].rstrip(":") for line in done.stdout.splitlines()
            if line.startswith("  ok")]  # fmt: skip
    assert "owners/unowned-reachable" in held  # what stores did before ownership still holds
