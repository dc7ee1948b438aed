"""What every check stands on: the store under check, its refusals as the wire carries them,
and the two ways a check says what it saw break the contract.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from actonce_api.store.v1 import artifact_store_pb2 as pb
from actonce_api.store.v1 import artifact_store_pb2_grpc as pb_grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from sidecar.store_contract import (
    STORE_DOMAIN,
    Refusal,
    RefusalCode,
    status_code_for,
)

# Writers that race for one id in ids/race.
RACERS = 8


class Broken(Exception):
    """A check saw the store break the contract; the message says what it saw."""


@dataclass(frozen=True)
class Answer:
    """A refusal as the wire carries it."""

    code: grpc.StatusCode
    reason: str
    domain: str
    states: frozenset[str]
    message: str


class Store:
    """The store under check: its stub, the call metadata (the token), fresh ids."""

    def __init__(
        self, channel: grpc.Channel, metadata: Sequence[tuple[str, str]], timeout: float
    ) -> None:
        self.stub = pb_grpc.ArtifactStoreServiceStub(channel)
        self.metadata = tuple(metadata)
        self.timeout = timeout
        self.prefix = f"conformance-{secrets.token_hex(4)}"
        self._count = 0

    def id(self, what: str) -> str:
        self._count += 1
        return f"{self.prefix}-{what}-{self._count}"

    def call(
        self, rpc: str, request: Any, *, metadata: Sequence[tuple[str, str]] | None = None
    ) -> Any:
        """The answer of ``rpc``; a refusal or transport error raises grpc.RpcError."""
        method = getattr(self.stub, rpc)
        return method(
            request, timeout=self.timeout, metadata=self.metadata if metadata is None else metadata
        )

    def refused(self, rpc: str, request: Any, **kw: Any) -> Answer:
        """The refusal ``rpc`` answers with; Broken when it answers with success."""
        try:
            self.call(rpc, request, **kw)
        except grpc.RpcError as error:
            return answer_of(error)
        raise Broken(f"{rpc} succeeded where the contract refuses it")

    def artifact(self, artifact_id: str) -> pb.StoredArtifact:
        request = pb.GetArtifactRequest(artifact_id=artifact_id)
        artifact: pb.StoredArtifact = self.call("GetArtifact", request).artifact
        return artifact

    def new_artifact(self, data: Any, kind: str = "") -> pb.StoredArtifact:
        request = pb.CreateArtifactRequest(
            artifact_id=self.id("artifact"),
            kind=kind or f"{self.prefix}-kind",
            data_json=json.dumps(data),
        )
        artifact: pb.StoredArtifact = self.call("CreateArtifact", request).artifact
        return artifact

    def new_thread(self) -> str:
        thread_id = self.id("thread")
        self.call("CreateThread", pb.CreateThreadRequest(thread_id=thread_id, title="conformance"))
        return thread_id


def answer_of(error: grpc.RpcError) -> Answer:
    code: grpc.StatusCode = error.code()
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    reason = domain = ""
    states: frozenset[str] = frozenset()
    for detail in status.details if status is not None else ():
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            reason, domain = info.reason, info.domain
            states = frozenset(s for s in info.metadata.get("states", "").split(",") if s)
    return Answer(code, reason, domain, states, error.details() or "")


def expect(answer: Answer, reason: RefusalCode, states: set[str] | None = None) -> None:
    """The refusal is ``reason`` (with exactly ``states``), in the store's domain, with the
    status code the contract gives it."""
    wanted_states = frozenset(states or ())
    code = grpc.StatusCode[status_code_for(Refusal(reason, "", wanted_states))]
    said = f"{answer.code.name}, reason {answer.reason or '(none)'!r}"
    said += f", domain {answer.domain or '(none)'!r}"
    if answer.states:
        said += f", states {','.join(sorted(answer.states))}"
    wanted = f"{code.name}, reason {str(reason)!r}, domain {STORE_DOMAIN!r}"
    if wanted_states:
        wanted += f", states {','.join(sorted(wanted_states))}"
    if (answer.code, answer.reason, answer.domain, answer.states) != (
        code,
        str(reason),
        STORE_DOMAIN,
        wanted_states,
    ):
        raise Broken(f"expected {wanted}; got {said}")


def same(what: str, got: Any, wanted: Any) -> None:
    if got != wanted:
        raise Broken(f"{what}: expected {wanted!r}, got {got!r}")


def same_artifact(store: Store, artifact_id: str, what: str, data: Any, version: int) -> None:
    """The store still holds ``data`` at ``version`` for ``artifact_id``; Broken naming
    ``what`` was checked when it does not."""
    held = store.artifact(artifact_id)
    same(what, (data_of(held), held.version), (data, version))


def data_of(artifact: pb.StoredArtifact) -> Any:
    try:
        return json.loads(artifact.data_json)
    except ValueError:
        raise Broken(f"artifact {artifact.id}'s data_json is not JSON") from None
