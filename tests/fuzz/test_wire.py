"""Requests that do not parse: a string field that is not UTF-8, a corrupt message.

grpc refuses to deserialize them and, left alone, answers UNKNOWN with no details. The
sidecar parses requests itself and answers INVALID_ARGUMENT with ErrorInfo and a BadRequest
naming the field, like every other bad input; nothing reaches the ledger or the store.
"""

from __future__ import annotations

import grpc
import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from google.protobuf.descriptor import FieldDescriptor

from tests.harness import RunningSidecar, refusal

SERVICE = pb.DESCRIPTOR.services_by_name["RunActionsService"]
NOT_UTF8 = b"\xff\xfe\xed\xa0\x80"  # a stray byte, then an encoded surrogate


def _field(number: int, payload: bytes) -> bytes:
    # A length-delimited field on the wire: key, length, bytes (both varints fit one byte).
    return bytes([number << 3 | 2, len(payload)]) + payload


def _raw_call(sidecar: RunningSidecar, rpc: str, body: bytes) -> grpc.RpcError:
    call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = sidecar.channel.unary_unary(
        f"/{SERVICE.full_name}/{rpc}"
    )
    with pytest.raises(grpc.RpcError) as caught:
        call(body, timeout=10)
    return caught.value


def test_a_string_field_that_is_not_utf8_is_invalid_argument_naming_it(
    sidecar: RunningSidecar,
) -> None:
    attempt = sidecar.begin("run-wire")
    before = len(sidecar.audit())
    fields = [(m.name, m.input_type, f) for m in SERVICE.methods for f in m.input_type.fields
              if f.type == FieldDescriptor.TYPE_STRING]  # fmt: skip
    assert {rpc for rpc, _, _ in fields} == {m.name for m in SERVICE.methods}
    for rpc, request_type, field in fields:
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


def test_a_corrupt_message_is_invalid_argument(sidecar: RunningSidecar) -> None:
    before = len(sidecar.audit())
    for body in (b"\xff\xff\xff", b"\x0a\x05ab", b"\x0b", b"\x12\xff\xff\xff\xff\x0f"):
        got = refusal(_raw_call(sidecar, "Create", body))
        assert (got.code, got.reason, got.failure_class, got.fields) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_ARGUMENT",
            "REFUSED",
            ["request"],
        ), body
    assert len(sidecar.audit()) == before
    assert sidecar.health() == 1
