"""The generated code: complete, served, and within the versions pyproject.toml allows."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from actonce_api.store.v1 import artifact_store_pb2
from actonce_api.v1 import run_actions_pb2
from packaging.specifiers import SpecifierSet

from sidecar.fronts.grpc.servicer import RunActionsServicer
from sidecar.refstore.servicer import ArtifactStoreServicer

ROOT = Path(__file__).resolve().parents[1]
GEN = ROOT / "clients" / "python" / "src" / "actonce_api"


def _requirement(name: str) -> SpecifierSet:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for dep in deps:
        match = re.fullmatch(rf"{re.escape(name)}\s*([<>=!~].*)", dep)
        if match:
            return SpecifierSet(match.group(1))
    raise AssertionError(f"{name} is not a dependency")


def test_every_rpc_has_a_servicer_method() -> None:
    for descriptor, servicer in [
        (run_actions_pb2.DESCRIPTOR.services_by_name["RunActionsService"], RunActionsServicer),
        (
            artifact_store_pb2.DESCRIPTOR.services_by_name["ArtifactStoreService"],
            ArtifactStoreServicer,
        ),
    ]:
        missing = [m.name for m in descriptor.methods if m.name not in vars(servicer)]
        assert missing == [], f"{descriptor.full_name} lacks {missing}"


def test_generated_code_needs_no_newer_protobuf_or_grpcio_than_pyproject_allows() -> None:
    protobuf_spec = _requirement("protobuf")
    grpcio_spec = _requirement("grpcio")
    lowest_protobuf = min(s.version for s in protobuf_spec if s.operator == ">=")
    lowest_grpcio = min(s.version for s in grpcio_spec if s.operator == ">=")
    for path in GEN.rglob("*_pb2.py"):
        made = re.search(r"# Protobuf Python Version: ([\d.]+)", path.read_text())
        assert made, path
        assert _tuple(made.group(1)) <= _tuple(lowest_protobuf), (path, made.group(1))
    for path in GEN.rglob("*_pb2_grpc.py"):
        made = re.search(r"GRPC_GENERATED_VERSION = '([\d.]+)'", path.read_text())
        assert made, path
        assert _tuple(made.group(1)) <= _tuple(lowest_grpcio), (path, made.group(1))


def _tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))
