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
from grpc_reflection.v1alpha import reflection_pb2
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from tests.harness import sidecar_config, start_sidecar, start_store

# Current grpcurl, Postman and buf curl ask for v1 first; older tools, ghz among
# them, for v1alpha. Their messages are the same on the wire.
VERSIONS = ("grpc.reflection.v1", "grpc.reflection.v1alpha")


def ask(
    target: str, request: reflection_pb2.ServerReflectionRequest, version: str
) -> reflection_pb2.ServerReflectionResponse:
    with grpc.insecure_channel(target) as channel:
        call = channel.stream_stream(
            f"/{version}.ServerReflection/ServerReflectionInfo",
            request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
            response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
        )
        (answer,) = list(call(iter([request]), timeout=10))
    return answer


def file_containing(target: str, symbol: str, version: str = VERSIONS[0]) -> list[str] | int:
    """The files reflection sends for ``symbol``, or its error code."""
    request = reflection_pb2.ServerReflectionRequest(file_containing_symbol=symbol)
    answer = ask(target, request, version)
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
        answers = [file_containing(f"127.0.0.1:{sidecar.port}", symbol, v) for v in VERSIONS]
    finally:
        sidecar.stop()
    for files in answers:
        assert isinstance(files, list) and files[0] == file


def test_both_reflection_versions_list_the_services(tmp_path: Path) -> None:
    sidecar = start_sidecar(sidecar_config(tmp_path))
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    try:
        listed = [
            {
                s.name
                for s in ask(f"127.0.0.1:{sidecar.port}", request, v).list_services_response.service
            }
            for v in VERSIONS
        ]
    finally:
        sidecar.stop()
    for names in listed:
        assert {"actonce.v1.RunActionsService", "grpc.health.v1.Health"} <= names
        assert {f"{v}.ServerReflection" for v in VERSIONS} <= names


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
        symbol = "actonce.store.v1.ArtifactStoreService.PostMessage"
        answers = [file_containing(store.target, symbol, v) for v in VERSIONS]
    finally:
        store.stop()
    for files in answers:
        assert isinstance(files, list) and files[0] == "actonce/store/v1/artifact_store.proto"


def _comments(target: str, symbol: str) -> list[str]:
    """The comments of the file that holds ``symbol``, as a reflection client receives it:
    grpcio-reflection's own client, over the wire, as grpcurl's ``describe`` asks."""
    with grpc.insecure_channel(target) as channel:
        database = ProtoReflectionDescriptorDatabase(channel)
        file = database.FindFileContainingSymbol(symbol)
    return [
        line.strip()
        for location in file.source_code_info.location
        for line in (location.leading_comments + location.trailing_comments).splitlines()
    ]


def test_a_reflection_client_gets_the_protos_comments(tmp_path: Path) -> None:
    """The comment of a service, an RPC, a message and a field, as the protos have them,
    from the sidecar and from the store."""
    sidecar = start_sidecar(sidecar_config(tmp_path / "sidecar"))
    store = start_store(tmp_path / "store")
    try:
        api = _comments(f"127.0.0.1:{sidecar.port}", "actonce.v1.RunActionsService.Notice")
        stored = _comments(store.target, "actonce.store.v1.PatchArtifactRequest")
    finally:
        sidecar.stop()
        store.stop()
    assert 'Errors carry google.rpc.ErrorInfo (domain "actonce") with a reason and' in api
    assert 'Notice posts a message of kind "notice" to a thread: it starts and' in api
    assert "NoticeRequest posts a notice to a thread." in api
    assert "The version the patch was computed against; VERSION_CONFLICT otherwise." in stored


def test_only_our_files_come_from_the_documented_set() -> None:
    from sidecar.ops import reflection

    documented = reflection.documented_files()
    protos = Path(__file__).resolve().parents[2] / "protos"
    assert set(documented) == {str(p.relative_to(protos)) for p in protos.rglob("*.proto")}
    assert all(f.HasField("source_code_info") for f in documented.values())
