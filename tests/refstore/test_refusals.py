"""The refusal table on the store's wire: each code's status code and ErrorInfo, without a
server."""

from __future__ import annotations

import grpc
import pytest
from google.rpc import error_details_pb2

from sidecar.refstore.wire import grpc_status_for, status_proto_for
from sidecar.store_contract import ARCHIVED, ID_USED, RefusalCode, StoreRefusal, status_code_for
from sidecar.store_contract import STORE_DOMAIN as DOMAIN


@pytest.mark.parametrize(
    ("code", "states", "expected"),
    [
        (RefusalCode.NOT_FOUND, (), grpc.StatusCode.NOT_FOUND),
        (RefusalCode.VERSION_CONFLICT, (), grpc.StatusCode.ABORTED),
        (RefusalCode.VALIDATION_FAILED, (), grpc.StatusCode.INVALID_ARGUMENT),
        (RefusalCode.PATCH_FAILED, (), grpc.StatusCode.FAILED_PRECONDITION),
        (RefusalCode.FORBIDDEN, (), grpc.StatusCode.PERMISSION_DENIED),
        (RefusalCode.INVALID_STATE, (ID_USED,), grpc.StatusCode.ALREADY_EXISTS),
        (RefusalCode.INVALID_STATE, (ARCHIVED,), grpc.StatusCode.FAILED_PRECONDITION),
        (RefusalCode.INVALID_STATE, (ID_USED, ARCHIVED), grpc.StatusCode.FAILED_PRECONDITION),
    ],
)
def test_each_refusal_has_its_status_code(
    code: RefusalCode, states: tuple[str, ...], expected: grpc.StatusCode
) -> None:
    refusal = StoreRefusal(code, "why", states=states)
    assert grpc.StatusCode[status_code_for(refusal)] is expected
    assert status_proto_for(refusal).code == expected.value[0]


def test_the_status_carries_error_info_with_sorted_states() -> None:
    refusal = StoreRefusal("INVALID_STATE", "refused", states=[ID_USED, ARCHIVED])
    status = status_proto_for(refusal)
    assert status.code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
    assert status.message == "refused"
    assert len(status.details) == 1
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    assert (info.reason, info.domain) == ("INVALID_STATE", DOMAIN)
    assert dict(info.metadata) == {"states": "ARCHIVED,ID_USED"}

    wire = grpc_status_for(refusal)
    assert wire.code == grpc.StatusCode.FAILED_PRECONDITION
    assert wire.details == "refused"


def test_other_codes_carry_no_states() -> None:
    status = status_proto_for(StoreRefusal(RefusalCode.PATCH_FAILED, "no parent"))
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    assert info.reason == "PATCH_FAILED"
    assert dict(info.metadata) == {}


def test_states_belong_to_invalid_state_only() -> None:
    with pytest.raises(ValueError):
        StoreRefusal(RefusalCode.INVALID_STATE, "which state?")
    with pytest.raises(ValueError):
        StoreRefusal(RefusalCode.NOT_FOUND, "missing", states={ARCHIVED})
    with pytest.raises(ValueError):
        StoreRefusal("NOT_A_CODE", "what?")


def test_codes_compare_as_their_contract_strings() -> None:
    refusal = StoreRefusal("VERSION_CONFLICT", "stale")
    assert refusal.code == "VERSION_CONFLICT"
    assert refusal.code is RefusalCode.VERSION_CONFLICT
    assert str(refusal) == "VERSION_CONFLICT: stale"
