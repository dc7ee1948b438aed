"""A call's refusal as the gRPC front's observers see it: its status code and its ErrorInfo.

The metrics and the spans both learn of a refusal at its abort, before the status is sent;
:class:`AbortWatchingContext` is that one hook, and the two readers below turn what an abort
carries into a status code and an ErrorInfo.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Never

import grpc
from google.rpc import error_details_pb2, status_pb2

from sidecar.fronts.grpc.interceptors import ForwardingContext, Metadata

# What an abort sends after its status: the trailing metadata, where the ErrorInfo rides.
Trailing = Metadata | None

_CODES_BY_NUMBER = {code.value[0]: code for code in grpc.StatusCode}


def status_code_of(code: grpc.StatusCode | int | None) -> grpc.StatusCode:
    """The status code of an answer; grpc.aio's context gives its number, not its enum."""
    if isinstance(code, grpc.StatusCode):
        return code
    if code is None:
        return grpc.StatusCode.UNKNOWN
    return _CODES_BY_NUMBER.get(int(code), grpc.StatusCode.UNKNOWN)


def error_info_of(
    trailing: grpc.aio.Metadata | Sequence[tuple[str, str | bytes]] | None,
) -> error_details_pb2.ErrorInfo:
    """The ErrorInfo carried by a call's rich status trailer; empty when there is none."""
    for key, value in trailing or ():
        if key != "grpc-status-details-bin" or not isinstance(value, bytes):
            continue
        status = status_pb2.Status.FromString(value)
        for detail in status.details:
            info = error_details_pb2.ErrorInfo()
            if detail.Unpack(info):
                return info
    return error_details_pb2.ErrorInfo()


class AbortWatchingContext(ForwardingContext):
    """The call's context, telling :meth:`refused` of each abort before its status is sent."""

    def refused(self, code: grpc.StatusCode, trailing: Trailing) -> None:
        """What an observer does with the refusal; nothing by default."""

    async def abort_with_status(self, status: grpc.Status) -> Never:
        self.refused(status_code_of(status.code), status.trailing_metadata)
        await super().abort_with_status(status)

    async def abort(
        self, code: grpc.StatusCode, details: str = "", trailing_metadata: Metadata = ()
    ) -> Never:
        self.refused(status_code_of(code), trailing_metadata)
        await super().abort(code, details, trailing_metadata)
