"""Server reflection answers for services and for their methods' full names.

ghz asks for the file that holds ``package.Service.Method`` before its first call; the
sidecar and the reference store must both answer, or no tool can call them without a
proto file.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from tests.harness import sidecar_config, start_sidecar, start_store


def file_containing(target: str, symbol: str) -> list[str] | int:
    """The files reflection sends for ``symbol``, or its error code."""
    with grpc.insecure_channel(target) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(file_containing_symbol=symbol)
        (answer,) = list(stub.ServerReflectionInfo(iter([request]), timeout=10))
    if answer.HasField("error_response"):
        return int(answer.error_response.error_code)
    names = []
    for raw in answer.file_descriptor_response.file_descriptor_proto:
        proto = descriptor_pb2.FileDescriptorProto()
        proto.ParseFromString(raw)
        names.append(proto.name)
    return names


@pytest.mark.parametrize(
    ("symbol", "file"),
    [
        ("actonce.v1.RunActionsService", "actonce/v1/run_actions.proto"),
        ("actonce.v1.RunActionsService.Notice", "actonce/v1/run_actions.proto"),
        ("actonce.v1.NoticeRequest", "actonce/v1/run_actions.proto"),
        ("grpc.health.v1.Health.Check", "grpc_health/v1/health.proto"),
    ],
)
def test_the_sidecar_answers_for_services_methods_and_messages(
    tmp_path: Path, symbol: str, file: str
) -> None:
    sidecar = start_sidecar(sidecar_config(tmp_path))
    try:
        files = file_containing(f"127.0.0.1:{sidecar.port}", symbol)
    finally:
        sidecar.stop()
    assert isinstance(files, list) and files[0] == file


def test_an_unknown_method_is_not_found(tmp_path: Path) -> None:
    sidecar = start_sidecar(sidecar_config(tmp_path))
    try:
        for symbol in ("actonce.v1.RunActionsService.Nope", "nope.Nope.Nope", "Nope"):
            assert file_containing(f"127.0.0.1:{sidecar.port}", symbol) == 5  # NOT_FOUND
    finally:
        sidecar.stop()


def test_the_store_answers_for_its_methods(tmp_path: Path) -> None:
    store = start_store(tmp_path)
    try:
        files = file_containing(store.target, "actonce.store.v1.ArtifactStoreService.PostMessage")
    finally:
        store.stop()
    assert isinstance(files, list) and files[0] == "actonce/store/v1/artifact_store.proto"
