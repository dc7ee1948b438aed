"""The store contract's refusal vocabulary, spelled here and nowhere else.

`protos/actonce/store/v1/artifact_store.proto` says it: a store refuses with a gRPC status
whose `google.rpc.ErrorInfo` is in domain "store.actonce" and whose reason is one of the
codes below; an INVALID_STATE names in metadata["states"] every state that refused the
write, and a refusal whose only state is ID_USED means the write was already made.

Every module that speaks of a store refusal imports the words from here: the reference store
that gives them (`sidecar.refstore.refusals`), the client that reads them
(`sidecar.upstream.grpc`), the rules that class them (`sidecar.rules.refusals`) and the error
tree that answers the agent with them (`sidecar.errors`).
"""

from __future__ import annotations

import enum

import grpc

__all__ = ["ARCHIVED", "ID_USED", "STATUS_CODES", "STORE_DOMAIN", "RefusalCode"]

STORE_DOMAIN = "store.actonce"


class RefusalCode(enum.StrEnum):
    """The contract's refusal codes; each is also the ErrorInfo reason."""

    NOT_FOUND = "NOT_FOUND"
    VERSION_CONFLICT = "VERSION_CONFLICT"
    VALIDATION_FAILED = "VALIDATION_FAILED"
    PATCH_FAILED = "PATCH_FAILED"
    FORBIDDEN = "FORBIDDEN"
    INVALID_STATE = "INVALID_STATE"


# States of an INVALID_STATE refusal. The contract leaves the set open (PROPOSAL_CLOSED, ...);
# these are the ones the reference store reports and the sidecar acts on.
ID_USED = "ID_USED"
ARCHIVED = "ARCHIVED"

# The status code a refusal travels with, on the store's wire and from the sidecar to the
# agent alike. The store sends INVALID_STATE whose only state is ID_USED as ALREADY_EXISTS
# (sidecar.refstore.refusals); the sidecar never answers with one, since it counts as done.
STATUS_CODES: dict[str, grpc.StatusCode] = {
    RefusalCode.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    RefusalCode.VERSION_CONFLICT: grpc.StatusCode.ABORTED,
    RefusalCode.VALIDATION_FAILED: grpc.StatusCode.INVALID_ARGUMENT,
    RefusalCode.PATCH_FAILED: grpc.StatusCode.FAILED_PRECONDITION,
    RefusalCode.FORBIDDEN: grpc.StatusCode.PERMISSION_DENIED,
    RefusalCode.INVALID_STATE: grpc.StatusCode.FAILED_PRECONDITION,
}
