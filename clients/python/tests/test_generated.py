"""The committed stubs against the runtimes this package declares.

Generated code refuses to import on a grpcio or protobuf older than the tools
that made it; a lower bound in pyproject.toml below that would install a
client that cannot start.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

PACKAGE = Path(__file__).resolve().parents[1]
GENERATED = PACKAGE / "src" / "actonce_api"


def _lower_bound(name: str) -> Version:
    pyproject = tomllib.loads((PACKAGE / "pyproject.toml").read_text())
    for line in pyproject["project"]["dependencies"]:
        requirement = Requirement(line)
        if requirement.name == name:
            (bound,) = [s.version for s in requirement.specifier if s.operator == ">="]
            return Version(bound)
    raise AssertionError(f"{name} is not a dependency")


@pytest.mark.parametrize("module", sorted(GENERATED.rglob("*_pb2_grpc.py")), ids=lambda p: p.name)
def test_grpcio_bound_admits_the_generated_code(module: Path) -> None:
    made_by = re.search(r"GRPC_GENERATED_VERSION = '([\d.]+)'", module.read_text())
    assert made_by, "no GRPC_GENERATED_VERSION"
    assert _lower_bound("grpcio") >= Version(made_by[1])


@pytest.mark.parametrize("module", sorted(GENERATED.rglob("*_pb2.py")), ids=lambda p: p.name)
def test_protobuf_bound_admits_the_generated_code(module: Path) -> None:
    made_by = re.search(
        r"ValidateProtobufRuntimeVersion\(\s*\S+,\s*(\d+),\s*(\d+),\s*(\d+),", module.read_text()
    )
    assert made_by, "no ValidateProtobufRuntimeVersion"
    assert _lower_bound("protobuf") >= Version(".".join(made_by.groups()))


def test_every_rpc_has_a_stub_method() -> None:
    from actonce_api.v1 import run_actions_pb2 as pb
    from actonce_client.client import Attempt, Client

    rpcs = pb.DESCRIPTOR.services_by_name["RunActionsService"].methods_by_name
    helpers = {
        "BeginAttempt": Client.begin, "Create": Attempt.create, "Edit": Attempt.edit,
        "Notice": Attempt.notice, "CreateThread": Attempt.create_thread, "Send": Attempt.send,
        "Read": Attempt.read_artifact, "EndAttempt": Attempt.end,
        "ExtendLease": Attempt.extend_lease, "BeginStep": Attempt.begin_step,
        "EndStep": Attempt.end_step, "AbortStep": Attempt.abort_step,
    }  # fmt: skip
    assert set(rpcs) == set(helpers), "an RPC the helper does not cover, or one that is gone"
