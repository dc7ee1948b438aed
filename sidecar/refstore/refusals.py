"""Refusals of the reference store, and how they travel over gRPC.

The store refuses a write or a read with one exception, carrying the contract's refusal code
(`sidecar.store_codes`, where the contract's words are spelled) as data rather than as a
subclass, so that the contract's one table decides the status code:

    Exception
    └── StoreRefusal(code, message, *, states)
          code: NOT_FOUND | VERSION_CONFLICT | VALIDATION_FAILED | PATCH_FAILED
                | FORBIDDEN | INVALID_STATE
          states: for INVALID_STATE only, every state that refused the write
                  (ID_USED, ARCHIVED, ...)

On the wire (see `protos/actonce/store/v1/artifact_store.proto`) a refusal is a gRPC status
whose details hold a `google.rpc.ErrorInfo`: reason = the code, domain = "store.actonce", and,
for INVALID_STATE, metadata["states"] = the states sorted and comma-joined. A caller counts a
refusal as "already done" only when ID_USED is its only state, which is why INVALID_STATE with
exactly {ID_USED} maps to ALREADY_EXISTS and every other INVALID_STATE to FAILED_PRECONDITION.
"""

from __future__ import annotations

from collections.abc import Iterable

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from sidecar.store_codes import ARCHIVED, ID_USED, STATUS_CODES, RefusalCode
from sidecar.store_codes import STORE_DOMAIN as DOMAIN

__all__ = [
    "ARCHIVED",
    "DOMAIN",
    "ID_USED",
    "RefusalCode",
    "StoreRefusal",
    "grpc_status_for",
    "status_code_for",
    "status_proto_for",
]


class StoreRefusal(Exception):
    """The store refused the call; nothing was changed."""

    code: RefusalCode
    message: str
    states: frozenset[str]

    def __init__(
        self, code: RefusalCode | str, message: str, *, states: Iterable[str] = ()
    ) -> None:
        code = RefusalCode(code)
        frozen = frozenset(states)
        # The caller decides "already done" from the states, so a state set on any other code,
        # or an INVALID_STATE without one, would be a lie on the wire: refuse to build it.
        if code is RefusalCode.INVALID_STATE and not frozen:
            raise ValueError("an INVALID_STATE refusal needs at least one state")
        if code is not RefusalCode.INVALID_STATE and frozen:
            raise ValueError(f"states are only for INVALID_STATE, not {code}")
        super().__init__(code, message, frozen)
        self.code = code
        self.message = message
        self.states = frozen

    def __str__(self) -> str:
        if self.states:
            return f"{self.code} [{','.join(sorted(self.states))}]: {self.message}"
        return f"{self.code}: {self.message}"

    def __repr__(self) -> str:
        return f"StoreRefusal({self.code!r}, {self.message!r}, states={sorted(self.states)!r})"


def status_code_for(refusal: StoreRefusal) -> grpc.StatusCode:
    """The gRPC status code a refusal travels with: the contract's table
    (`sidecar.store_codes`), but ALREADY_EXISTS for an INVALID_STATE whose only state is
    ID_USED."""
    if refusal.code is RefusalCode.INVALID_STATE and refusal.states == {ID_USED}:
        return grpc.StatusCode.ALREADY_EXISTS
    return STATUS_CODES[refusal.code]


def status_proto_for(refusal: StoreRefusal) -> status_pb2.Status:
    """The `google.rpc.Status` of a refusal, with its ErrorInfo detail."""
    metadata: dict[str, str] = {}
    if refusal.states:
        metadata["states"] = ",".join(sorted(refusal.states))
    info = error_details_pb2.ErrorInfo(reason=str(refusal.code), domain=DOMAIN, metadata=metadata)
    detail = any_pb2.Any()
    detail.Pack(info)
    code: int = status_code_for(refusal).value[0]
    return status_pb2.Status(code=code, message=refusal.message, details=[detail])


def grpc_status_for(refusal: StoreRefusal) -> grpc.Status:
    """The `grpc.Status` to abort a call with (`context.abort_with_status`)."""
    return rpc_status.to_status(status_proto_for(refusal))
