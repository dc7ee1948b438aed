"""The checks of ids: every write type refuses a used id, and of writers racing for one id,
one lands.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import grpc
from actonce_api.store.v1 import artifact_store_pb2 as pb

from sidecar.conformance.kit import (
    RACERS,
    Answer,
    Broken,
    Store,
    answer_of,
    data_of,
    expect,
    same,
    same_artifact,
)
from sidecar.store_contract import (
    ID_USED,
    RefusalCode,
)


def used_artifact_id(store: Store) -> str:
    first = store.new_artifact({"n": 1})
    again = pb.CreateArtifactRequest(artifact_id=first.id, kind=first.kind, data_json='{"n": 2}')
    expect(store.refused("CreateArtifact", again), RefusalCode.INVALID_STATE, {ID_USED})
    same_artifact(store, first.id, "the artifact after the refused create", {"n": 1}, 1)
    return "CreateArtifact refuses a used id with INVALID_STATE {ID_USED}; the first stays"


def used_proposal_id(store: Store) -> str:
    proposal_id = store.id("proposal")
    kind = f"{store.prefix}-proposed"
    store.call(
        "CreateProposal",
        pb.CreateProposalRequest(proposal_id=proposal_id, kind=kind, data_json='{"n": 1}'),
    )
    again = pb.CreateProposalRequest(proposal_id=proposal_id, kind=kind, data_json='{"n": 2}')
    expect(store.refused("CreateProposal", again), RefusalCode.INVALID_STATE, {ID_USED})
    held = store.call("GetProposal", pb.GetProposalRequest(proposal_id=proposal_id))
    same("the proposal after the refused create", json.loads(held.data_json), {"n": 1})
    return "CreateProposal refuses a used id with INVALID_STATE {ID_USED}; the first stays"


def used_thread_id(store: Store) -> str:
    thread_id = store.new_thread()
    again = pb.CreateThreadRequest(thread_id=thread_id, title="another")
    expect(store.refused("CreateThread", again), RefusalCode.INVALID_STATE, {ID_USED})
    return "CreateThread refuses a used id with INVALID_STATE {ID_USED}"


def used_message_id(store: Store) -> str:
    thread_id = store.new_thread()
    message_id = store.id("message")
    post = pb.PostMessageRequest(
        message_id=message_id, thread_id=thread_id, kind="notice", text="first"
    )
    store.call("PostMessage", post)
    again = pb.PostMessageRequest(
        message_id=message_id, thread_id=thread_id, kind="notice", text="second"
    )
    expect(store.refused("PostMessage", again), RefusalCode.INVALID_STATE, {ID_USED})
    messages = store.call("ListMessages", pb.ListMessagesRequest(thread_id=thread_id)).messages
    same(
        "the thread's messages after the refused post",
        [(m.id, m.text) for m in messages],
        [(message_id, "first")],
    )
    return "PostMessage refuses a used id with INVALID_STATE {ID_USED}; the first is held once"


def used_message_id_with_turn(store: Store) -> str:
    thread_id = store.new_thread()
    message_id = store.id("message")
    post = pb.PostMessageRequest(
        message_id=message_id, thread_id=thread_id, kind="message", text="hi", request_turn=True
    )
    store.call("PostMessage", post)
    expect(store.refused("PostMessage", post), RefusalCode.INVALID_STATE, {ID_USED})
    turns = store.call(
        "ListTurnRequests", pb.ListTurnRequestsRequest(thread_id=thread_id)
    ).message_ids
    same("the thread's turn requests", list(turns), [message_id])
    return (
        "a message posted with its turn request, posted again, is refused ID_USED; one turn request"
    )


def racing_writers(store: Store) -> str:
    artifact_id = store.id("raced")
    kind = f"{store.prefix}-kind"

    def create(n: int) -> tuple[int, Answer | None]:
        request = pb.CreateArtifactRequest(
            artifact_id=artifact_id, kind=kind, data_json=json.dumps({"writer": n})
        )
        try:
            store.call("CreateArtifact", request)
        except grpc.RpcError as error:
            return n, answer_of(error)
        return n, None

    with ThreadPoolExecutor(RACERS) as pool:
        answers = list(pool.map(create, range(RACERS)))
    landed = [n for n, refused in answers if refused is None]
    if len(landed) != 1:
        raise Broken(f"{len(landed)} of {RACERS} creates racing for one id succeeded, not 1")
    for _, refused in answers:
        if refused is not None:
            expect(refused, RefusalCode.INVALID_STATE, {ID_USED})
    same("the raced artifact's data", data_of(store.artifact(artifact_id)), {"writer": landed[0]})
    return f"of {RACERS} creates racing for one id, exactly one lands; the others are ID_USED"
