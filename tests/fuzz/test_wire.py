"""Requests that do not parse: a string field that is not UTF-8, a corrupt message.

grpc refuses to deserialize them and, left alone, answers UNKNOWN with no details. The
sidecar parses requests itself and answers INVALID_ARGUMENT with ErrorInfo and a BadRequest
naming the field, like every other bad input; nothing reaches the ledger or the store.
"""

from __future__ import annotations

import grpc
import pytest
from google.protobuf.descriptor import FieldDescriptor

from sidecar._gen.actonce.v1 import run_actions_pb2 as pb
from tests.harness import RunningSidecar, refusal

SERVICE = pb.DESCRIPTOR.services_by_name["RunActionsService"]
NOT_UTF8 = b"\xff\xfe\xed\xa0\x80"  # a stray byte, then an encoded surrogate


def _field(number: int, payload: bytes) -> bytes:
    # A length-delimited field on the wire: key, length, bytes (both varints fit one byte).
    return bytes([number << 3 | 2, len(payload)]) + payload


def _raw_call(sidecar: RunningSidecar, rpc: str, body: bytes) -> grpc.RpcError:
    call = sidecar.channel.unary_unary(f"/{SERVICE.full_name}/{rpc}")
    with pytest.raises(grpc.RpcError) as caught:
        call(body, timeout=10)
    return caught.value


@pytest.mark.parametrize("rpc", [m.name for m in SERVICE.methods])
def test_a_string_field_that_is_not_utf8_is_invalid_argument_naming_it(
    sidecar: RunningSidecar, rpc: str
) -> None:
    attempt = sidecar.begin("run-wire")
    before = len(sidecar.audit())
    request_type = SERVICE.methods_by_name[rpc].input_type
    strings = [f for f in request_type.fields if f.type == FieldDescriptor.TYPE_STRING]
    assert strings
    for field in strings:
        valid = getattr(pb, request_type.name)()
        if "attempt_id" in request_type.fields_by_name and field.name != "attempt_id":
            valid.attempt_id = attempt
        error = _raw_call(sidecar, rpc, valid.SerializeToString() + _field(field.number, NOT_UTF8))
        got = refusal(error)
        assert (got.code, got.reason, got.domain, got.failure_class) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_ARGUMENT",
            "actonce",
            "REFUSED",
        ), (rpc, field.name)
        assert got.fields == [field.name]
    assert len(sidecar.audit()) == before
    assert sidecar.health() == 1  # SERVING


@pytest.mark.parametrize(
    "body", [b"\xff\xff\xff", b"\x0a\x05ab", b"\x0b", b"\x12\xff\xff\xff\xff\x0f"]
)
def test_a_corrupt_message_is_invalid_argument(sidecar: RunningSidecar, body: bytes) -> None:
    before = len(sidecar.audit())
    got = refusal(_raw_call(sidecar, "Create", body))
    assert (got.code, got.reason, got.failure_class) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_ARGUMENT",
        "REFUSED",
    )
    assert got.fields == ["request"]
    assert len(sidecar.audit()) == before
    assert sidecar.health() == 1
