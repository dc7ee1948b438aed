"""A stand-in sidecar that answers the hand-made statuses of docs/status-cases.json.

    python clients/testkit/status_sidecar.py

It listens on a free loopback port and prints its target ("127.0.0.1:PORT") on
the first line of stdout once it serves; it stops when its stdin closes, so a
test that dies cannot leave it behind. BeginAttempt answers an attempt; a Create
whose ``kind`` names a case gets that case's answer, sent for real: the status
code and message, and the ``grpc-status-details-bin`` trailer exactly as the
file holds it (malformed ones included), or a response carrying the case's
outcome number, known or not. Every client's tests use it to check that they
give the case's typed result. It stands in for the transport and for a sidecar
newer or stranger than this one, not for the sidecar's rules.
"""

from __future__ import annotations

import base64
import json
import sys
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

CASES = Path(__file__).resolve().parents[2] / "docs" / "status-cases.json"
SERVICE = "actonce.v1.RunActionsService"


# The answers are written as protobuf wire bytes by hand, so that an outcome
# number no generated code knows can be sent as it is.
def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _string_field(number: int, value: str) -> bytes:
    data = value.encode("utf-8")
    return _varint_bytes(number << 3 | 2) + _varint_bytes(len(data)) + data


def _varint_field(number: int, value: int) -> bytes:
    return _varint_bytes(number << 3) + _varint_bytes(value)


def _kind(request: bytes) -> str:
    """CreateRequest.kind (field 2), read without the generated code: any client's bytes."""
    pos = 0
    while pos < len(request):
        tag, pos = _varint(request, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            _, pos = _varint(request, pos)
        elif wire == 2:
            size, pos = _varint(request, pos)
            if number == 2:
                return request[pos : pos + size].decode("utf-8")
            pos += size
        else:
            raise ValueError(f"unexpected wire type {wire}")
    return ""


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _serve(cases: dict[str, dict[str, Any]]) -> grpc.Server:
    def begin_attempt(request: bytes, context: grpc.ServicerContext) -> bytes:
        return _string_field(1, "att_status_cases")

    def create(request: bytes, context: grpc.ServicerContext) -> bytes:
        kind = _kind(request)
        case = cases.get(kind)
        if case is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no status case named {kind!r}")
            return b""
        answer = case["answer"]
        if "outcome" in answer:
            return _string_field(1, "art_status_case") + _varint_field(2, answer["outcome"])
        if "details_bin" in answer:
            details = base64.b64decode(answer["details_bin"])
            context.set_trailing_metadata((("grpc-status-details-bin", details),))
        context.abort(grpc.StatusCode[answer["code"]], answer["message"])
        return b""  # abort raises; this is never sent

    def raw(handler: Any) -> grpc.RpcMethodHandler[bytes, bytes]:
        return grpc.unary_unary_rpc_method_handler(
            handler, request_deserializer=None, response_serializer=None
        )

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                SERVICE, {"BeginAttempt": raw(begin_attempt), "Create": raw(create)}
            ),
        )
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"127.0.0.1:{port}", flush=True)
    return server


def main() -> None:
    cases = {case["name"]: case for case in json.loads(CASES.read_text())["cases"]}
    server = _serve(cases)
    sys.stdin.read()  # until the test closes it, or dies
    server.stop(None)


if __name__ == "__main__":
    main()
