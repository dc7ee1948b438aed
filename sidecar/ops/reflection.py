"""Server reflection that also answers for a method's full name.

ghz (and other jhump/protoreflect clients) ask reflection for the file containing
``package.Service.Method``. grpcio-reflection passes the name to the descriptor pool,
and the upb pool that protobuf ships finds services and messages by name but not
methods, so every such call failed with NOT_FOUND and no tool could call an RPC
without a proto file. :func:`enable` wraps the pool so that a method's name finds
its service's file; every other lookup is the pool's own.

The descriptors compiled into the generated modules carry no source info, so a
reflection client saw none of the protos' comments. The generator writes the
descriptor set with it beside the modules (``actonce_api/descriptors.binpb``); the
pool here answers our files' descriptors from that set, comments included, and
every other file (health, reflection, well-known types) as the pool has it.

grpcio-reflection serves only ``grpc.reflection.v1alpha``, while current grpcurl,
Postman and ``buf curl`` ask for ``grpc.reflection.v1`` first. The two versions'
messages are the same fields with the same numbers, so the v1 service is the same
servicer registered under the v1 name: its bytes on the wire are v1's.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from importlib import resources
from typing import Any

import grpc
from google.protobuf import descriptor, descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection, reflection_pb2

SERVICE_NAME: str = reflection.SERVICE_NAME
# The stable version's name; its messages are v1alpha's, field for field.
SERVICE_NAME_V1 = "grpc.reflection.v1.ServerReflection"


@functools.cache
def documented_files() -> dict[str, descriptor_pb2.FileDescriptorProto]:
    """Our protos' file descriptors with their source info, by file name."""
    raw = resources.files("actonce_api").joinpath("descriptors.binpb").read_bytes()
    return {f.name: f for f in descriptor_pb2.FileDescriptorSet.FromString(raw).file}


class DocumentedFile:
    """A pool's file descriptor that copies itself, for reflection, with its comments."""

    def __init__(self, file: descriptor.FileDescriptor) -> None:
        self._file = file

    @property
    def name(self) -> str:
        return str(self._file.name)

    @property
    def dependencies(self) -> list[DocumentedFile]:
        return [DocumentedFile(dependency) for dependency in self._file.dependencies]

    def CopyToProto(self, proto: descriptor_pb2.FileDescriptorProto) -> None:
        documented = documented_files().get(self.name)
        if documented is None:
            self._file.CopyToProto(proto)
        else:
            proto.CopyFrom(documented)


class MethodAwarePool:
    """A descriptor pool whose ``FindFileContainingSymbol`` knows methods too, and whose
    files copy themselves with their comments."""

    def __init__(self, pool: descriptor_pool.DescriptorPool | None = None) -> None:
        self._pool = pool if pool is not None else descriptor_pool.Default()

    def FindFileContainingSymbol(self, name: str) -> DocumentedFile:
        try:
            found = self._pool.FindFileContainingSymbol(name)
        except KeyError:
            # Still KeyError (reflection's NOT_FOUND) when no method has this name either.
            found = self._pool.FindMethodByName(name).containing_service.file
        return DocumentedFile(found)

    def FindFileByName(self, name: str) -> DocumentedFile:
        return DocumentedFile(self._pool.FindFileByName(name))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)


def enable(server: grpc.aio.Server, service_names: Iterable[str]) -> None:
    """Serve reflection for ``service_names`` (reflection itself is added) on ``server``."""
    names = [*service_names, SERVICE_NAME_V1, SERVICE_NAME]
    servicer = reflection.aio.ReflectionServicer(names, pool=MethodAwarePool())
    handler = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    for name in (SERVICE_NAME_V1, SERVICE_NAME):
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(name, {"ServerReflectionInfo": handler}),)
        )
