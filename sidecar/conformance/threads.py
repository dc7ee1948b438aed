"""The checks of threads, messages and turns: posting order, idempotent turn requests, a
notice that takes no turn; and of listing a kind's artifacts page by page.
"""

from __future__ import annotations

from actonce_api.store.v1 import artifact_store_pb2 as pb

from sidecar.conformance.kit import Broken, Store, expect, same
from sidecar.store_contract import (
    RefusalCode,
)


def message_order(store: Store) -> str:
    thread_id = store.new_thread()
    posted = []
    for n, kind in enumerate(("notice", "message", "notice")):
        message_id = store.id("message")
        post = pb.PostMessageRequest(
            message_id=message_id, thread_id=thread_id, kind=kind, text=f"text {n}"
        )
        message = store.call("PostMessage", post).message
        same(f"message {n}'s seq", message.seq, n + 1)
        posted.append((message_id, kind, f"text {n}", n + 1))
    listed = store.call("ListMessages", pb.ListMessagesRequest(thread_id=thread_id)).messages
    same("the thread's messages", [(m.id, m.kind, m.text, m.seq) for m in listed], posted)
    return "a thread's messages keep posting order, seq from 1, kind and text as posted"


def turn_requests(store: Store) -> str:
    thread_id = store.new_thread()
    asked = store.id("message")
    store.call(
        "PostMessage",
        pb.PostMessageRequest(
            message_id=asked, thread_id=thread_id, kind="message", text="a", request_turn=True
        ),
    )
    later = store.id("message")
    store.call(
        "PostMessage",
        pb.PostMessageRequest(message_id=later, thread_id=thread_id, kind="message", text="b"),
    )
    same(
        "RequestTurn of a message posted with its turn request",
        store.call("RequestTurn", pb.RequestTurnRequest(message_id=asked)).created,
        False,
    )
    same(
        "RequestTurn of a message posted without one",
        store.call("RequestTurn", pb.RequestTurnRequest(message_id=later)).created,
        True,
    )
    same(
        "RequestTurn asked again",
        store.call("RequestTurn", pb.RequestTurnRequest(message_id=later)).created,
        False,
    )
    turns = store.call(
        "ListTurnRequests", pb.ListTurnRequestsRequest(thread_id=thread_id)
    ).message_ids
    same("the thread's turn requests, oldest first", list(turns), [asked, later])
    return "a turn request is keyed by its message id: idempotent, listed oldest first"


def notice_takes_no_turn(store: Store) -> str:
    thread_id = store.new_thread()
    notice = store.id("notice")
    store.call(
        "PostMessage",
        pb.PostMessageRequest(message_id=notice, thread_id=thread_id, kind="notice", text="n"),
    )
    expect(
        store.refused("RequestTurn", pb.RequestTurnRequest(message_id=notice)),
        RefusalCode.VALIDATION_FAILED,
    )
    post = pb.PostMessageRequest(
        message_id=store.id("notice"),
        thread_id=thread_id,
        kind="notice",
        text="n",
        request_turn=True,
    )
    expect(store.refused("PostMessage", post), RefusalCode.VALIDATION_FAILED)
    turns = store.call(
        "ListTurnRequests", pb.ListTurnRequestsRequest(thread_id=thread_id)
    ).message_ids
    same("the thread's turn requests", list(turns), [])
    messages = store.call("ListMessages", pb.ListMessagesRequest(thread_id=thread_id)).messages
    same("the thread's messages", [m.id for m in messages], [notice])
    return "a notice takes no turn: asked with the post or later, VALIDATION_FAILED, nothing kept"


def listing(store: Store) -> str:
    kind = f"{store.prefix}-listed"
    made = sorted(store.new_artifact({"n": n}, kind=kind).id for n in range(5))
    store.call("ArchiveArtifact", pb.ArchiveArtifactRequest(artifact_id=made[2]))
    seen: list[str] = []
    token = ""
    for _ in range(10):
        page = store.call(
            "ListArtifacts", pb.ListArtifactsRequest(kind=kind, page_size=2, page_token=token)
        )
        if len(page.artifacts) > 2:
            raise Broken(f"a page of size 2 held {len(page.artifacts)} artifacts")
        seen += [a.id for a in page.artifacts]
        token = page.next_page_token
        if not token:
            break
    same("the kind's artifacts, page by page", seen, made)
    return "ListArtifacts lists a kind's artifacts in id order, archived ones too, page by page"
