"""The store client is one method, and everything that stands in it implements that alone.

The transports, the middleware and the core's fakes are all StoreClients; besides ``call``,
a transport has only ``close``, its life, which the assembly that made it owns.
"""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from sidecar.assembly.instruments import TimedStore
from sidecar.assembly.traces import TracedStore
from sidecar.upstream import base
from sidecar.upstream.base import StoreClient
from sidecar.upstream.grpc import GrpcStoreClient
from sidecar.upstream.inprocess import InProcessStoreClient
from tests.core.fakes import MemoryStore, OneCommitStore


def _public_methods(kind: type) -> set[str]:
    return {
        name
        for name, member in inspect.getmembers(kind, inspect.isfunction)
        if not name.startswith("_")
    }


def test_the_store_client_is_one_method() -> None:
    assert _public_methods(StoreClient) == {"call"}


@pytest.mark.parametrize(
    ("kind", "life"),
    [
        (GrpcStoreClient, {"close"}),
        (InProcessStoreClient, {"close"}),
        (TimedStore, set()),
        (TracedStore, set()),
        (MemoryStore, {"seed_artifact", "ids", "holdings"}),  # a test's look inside
        (OneCommitStore, {"seed_artifact", "ids", "holdings"}),
    ],
)
def test_each_store_client_implements_call_and_nothing_else(kind: type, life: set[str]) -> None:
    assert _public_methods(kind) == {"call", *life}
    assert inspect.iscoroutinefunction(inspect.getattr_static(kind, "call"))


def test_every_call_of_the_contract_is_data_with_its_names() -> None:
    calls = [
        value
        for value in vars(base).values()
        if isinstance(value, type)
        and issubclass(value, base.StoreCall)
        and value is not base.StoreCall
    ]
    assert {call.__name__ for call in calls} == {
        "CreateArtifact", "GetArtifact", "PatchArtifact", "ProposeCreate", "ProposePatch",
        "CreateThread", "PostMessage", "ListMessages", "OneCommit", "ThreeCommits", "GetOwner",
    }  # fmt: skip
    for call in calls:
        assert dataclasses.is_dataclass(call) and call.operation
