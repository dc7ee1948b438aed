"""One real sidecar for the whole session, and a client of it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from actonce_client import Client
from actonce_client.testing import LocalSidecar

SEND_RULE = "allowed-sender"


@pytest.fixture(scope="session")
def sidecar() -> Iterator[LocalSidecar]:
    with LocalSidecar(send_allowlist=[SEND_RULE]) as sidecar:
        yield sidecar


@pytest.fixture(scope="session")
def target(sidecar: LocalSidecar) -> str:
    return sidecar.target


@pytest.fixture
def client(target: str) -> Iterator[Client]:
    with Client(target) as client:
        yield client
