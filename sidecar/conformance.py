"""``actonce store check``: does a store keep the store contract? A conformance kit.

The sidecar trusts its store for one thing above all: a used id is refused, durably, with
INVALID_STATE whose only state is ID_USED, and the write already made stays as it was. That
refusal is how a retried write lands once. The kit runs the contract's behaviour
(``protos/actonce/store/v1/artifact_store.proto``, ``docs/writing-a-store.md``) against any
store over gRPC and prints what holds:

- ids: every write type (artifact, proposal, thread, message) refuses a used id, and the
  first write is what the store still holds; of writers racing for one id, one lands;
- states: an artifact starts at version 1, unarchived; archived, it refuses patches,
  proposed edits and another archive with INVALID_STATE {ARCHIVED}; a refusal names every
  state that refused it (a used proposal id of an archived artifact: ID_USED and ARCHIVED);
- versions: a patch at the current version applies and bumps it by one; a stale or future
  version is VERSION_CONFLICT and changes nothing; a patch that does not apply is
  PATCH_FAILED and changes nothing, not even the operations before the failing one;
- the refusal table: each code travels in an ErrorInfo of domain ``store.actonce`` with its
  status code (``sidecar.store_contract``), ALREADY_EXISTS for ID_USED alone;
- threads: messages keep posting order (seq from 1), a message posted with its turn
  request and a turn request keyed by the message id are idempotent, a notice takes no turn;
- listing: a kind's artifacts in id order, archived ones included, page by page;
- with a token: a call without it is refused FORBIDDEN.

Every id the kit writes starts with a prefix of its own run, so it can run against a store
that holds other data; it archives what it made, which is all a store lets it do. Each
check is a function that raises :class:`Broken` with what it saw; the one table
:data:`CHECKS` lists them in the order they print.
"""

from __future__ import annotations

import json
import secrets
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import grpc
from actonce_api.store.v1 import artifact_store_pb2 as pb
from actonce_api.store.v1 import artifact_store_pb2_grpc as pb_grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from sidecar.ops.security import CHANNEL_OPTIONS, channel_credentials, read_token, store_tls
from sidecar.store_contract import (
    ARCHIVED,
    ID_USED,
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
            return _answer(error)
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


def _answer(error: grpc.RpcError) -> Answer:
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


def _data(artifact: pb.StoredArtifact) -> Any:
    try:
        return json.loads(artifact.data_json)
    except ValueError:
        raise Broken(f"artifact {artifact.id}'s data_json is not JSON") from None


# -- ids ------------------------------------------------------------------------------


def used_artifact_id(store: Store) -> str:
    first = store.new_artifact({"n": 1})
    again = pb.CreateArtifactRequest(artifact_id=first.id, kind=first.kind, data_json='{"n": 2}')
    expect(store.refused("CreateArtifact", again), RefusalCode.INVALID_STATE, {ID_USED})
    held = store.artifact(first.id)
    same("the artifact after the refused create", (_data(held), held.version), ({"n": 1}, 1))
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
            return n, _answer(error)
        return n, None

    with ThreadPoolExecutor(RACERS) as pool:
        answers = list(pool.map(create, range(RACERS)))
    landed = [n for n, refused in answers if refused is None]
    if len(landed) != 1:
        raise Broken(f"{len(landed)} of {RACERS} creates racing for one id succeeded, not 1")
    for _, refused in answers:
        if refused is not None:
            expect(refused, RefusalCode.INVALID_STATE, {ID_USED})
    same("the raced artifact's data", _data(store.artifact(artifact_id)), {"writer": landed[0]})
    return f"of {RACERS} creates racing for one id, exactly one lands; the others are ID_USED"


# -- states and versions ------------------------------------------------------------------


def created_state(store: Store) -> str:
    data = {"title": "conformance", "tags": ["a"], "n": 1}
    created = store.new_artifact(data)
    same(
        "the created artifact (version, archived)", (created.version, created.archived), (1, False)
    )
    same("the created artifact's data", _data(created), data)
    read = store.artifact(created.id)
    same(
        "the artifact read back",
        (read.id, read.kind, read.version, read.archived, _data(read)),
        (created.id, created.kind, 1, False, data),
    )
    return "an artifact starts at version 1, unarchived, with its data as given"


def patch_bumps_version(store: Store) -> str:
    created = store.new_artifact({"n": 1})
    for version in (1, 2):
        patch = json.dumps([{"op": "add", "path": f"/v{version}", "value": version}])
        request = pb.PatchArtifactRequest(
            artifact_id=created.id, expected_version=version, patch_json=patch
        )
        patched = store.call("PatchArtifact", request).artifact
        same(f"the version after patch {version}", patched.version, version + 1)
    same("the patched data", _data(store.artifact(created.id)), {"n": 1, "v1": 1, "v2": 2})
    return "a patch at the current version applies and bumps the version by one"


def stale_version(store: Store) -> str:
    created = store.new_artifact({"n": 1})
    bump = pb.PatchArtifactRequest(
        artifact_id=created.id,
        expected_version=1,
        patch_json='[{"op": "add", "path": "/n", "value": 2}]',
    )
    store.call("PatchArtifact", bump)
    for version in (1, 3):
        stale = pb.PatchArtifactRequest(
            artifact_id=created.id,
            expected_version=version,
            patch_json='[{"op": "add", "path": "/n", "value": 9}]',
        )
        expect(store.refused("PatchArtifact", stale), RefusalCode.VERSION_CONFLICT)
    held = store.artifact(created.id)
    same("the artifact after the refused patches", (_data(held), held.version), ({"n": 2}, 2))
    return "a patch at a stale or a future version is VERSION_CONFLICT and changes nothing"


def patch_that_does_not_apply(store: Store) -> str:
    created = store.new_artifact({"n": 1})
    for patch in (
        [{"op": "add", "path": "/missing/child", "value": 1}],
        [{"op": "test", "path": "/n", "value": 2}],
        # The first operation would apply: nothing of the patch may be kept.
        [{"op": "add", "path": "/extra", "value": 1}, {"op": "remove", "path": "/absent"}],
    ):
        request = pb.PatchArtifactRequest(
            artifact_id=created.id, expected_version=1, patch_json=json.dumps(patch)
        )
        expect(store.refused("PatchArtifact", request), RefusalCode.PATCH_FAILED)
    held = store.artifact(created.id)
    same("the artifact after the refused patches", (_data(held), held.version), ({"n": 1}, 1))
    return "a patch that does not apply is PATCH_FAILED, and none of its operations is kept"


def archived_artifact(store: Store) -> str:
    created = store.new_artifact({"n": 1})
    archived = store.call(
        "ArchiveArtifact", pb.ArchiveArtifactRequest(artifact_id=created.id)
    ).artifact
    same("the archived artifact's archived flag", archived.archived, True)
    same("the artifact read back archived", store.artifact(created.id).archived, True)
    patch = pb.PatchArtifactRequest(
        artifact_id=created.id,
        expected_version=archived.version,
        patch_json='[{"op": "add", "path": "/n", "value": 2}]',
    )
    expect(store.refused("PatchArtifact", patch), RefusalCode.INVALID_STATE, {ARCHIVED})
    again = pb.ArchiveArtifactRequest(artifact_id=created.id)
    expect(store.refused("ArchiveArtifact", again), RefusalCode.INVALID_STATE, {ARCHIVED})
    proposal = pb.CreateProposalRequest(
        proposal_id=store.id("proposal"),
        artifact_id=created.id,
        patch_json=patch.patch_json,
        base_version=archived.version,
    )
    expect(store.refused("CreateProposal", proposal), RefusalCode.INVALID_STATE, {ARCHIVED})
    held = store.artifact(created.id)
    same("the archived artifact's data", (_data(held), held.version), ({"n": 1}, archived.version))
    return "archived, it refuses patches, proposed edits, archiving: INVALID_STATE {ARCHIVED}"


def every_state_is_named(store: Store) -> str:
    created = store.new_artifact({"n": 1})
    proposal_id = store.id("proposal")
    patch = '[{"op": "add", "path": "/n", "value": 2}]'
    edit = pb.CreateProposalRequest(
        proposal_id=proposal_id, artifact_id=created.id, patch_json=patch, base_version=1
    )
    store.call("CreateProposal", edit)
    store.call("ArchiveArtifact", pb.ArchiveArtifactRequest(artifact_id=created.id))
    # ID_USED alone would read as "already made"; the archive refuses it too, and must say so.
    expect(store.refused("CreateProposal", edit), RefusalCode.INVALID_STATE, {ID_USED, ARCHIVED})
    return "a refusal names every state that refused it (ID_USED and ARCHIVED), never ID_USED alone"


# -- the refusal table ---------------------------------------------------------------------


def not_found(store: Store) -> str:
    missing = store.id("missing")
    for rpc, request in (
        ("GetArtifact", pb.GetArtifactRequest(artifact_id=missing)),
        (
            "PatchArtifact",
            pb.PatchArtifactRequest(
                artifact_id=missing,
                expected_version=1,
                patch_json='[{"op": "add", "path": "/n", "value": 1}]',
            ),
        ),
        ("ArchiveArtifact", pb.ArchiveArtifactRequest(artifact_id=missing)),
        ("GetProposal", pb.GetProposalRequest(proposal_id=missing)),
        (
            "PostMessage",
            pb.PostMessageRequest(
                message_id=store.id("message"), thread_id=missing, kind="notice", text="x"
            ),
        ),
        ("ListMessages", pb.ListMessagesRequest(thread_id=missing)),
        ("RequestTurn", pb.RequestTurnRequest(message_id=missing)),
    ):
        try:
            expect(store.refused(rpc, request), RefusalCode.NOT_FOUND)
        except Broken as broken:
            raise Broken(f"{rpc} of an unknown id: {broken}") from None
    return "what does not exist is NOT_FOUND (domain store.actonce), for every read and write"


def validation_failed(store: Store) -> str:
    kind = f"{store.prefix}-kind"

    def create(artifact_id: str, kind: str, data_json: str) -> Any:
        return pb.CreateArtifactRequest(artifact_id=artifact_id, kind=kind, data_json=data_json)

    def bad_patch() -> Any:
        created = store.new_artifact({"n": 1})
        return pb.PatchArtifactRequest(
            artifact_id=created.id, expected_version=1, patch_json='{"op": "add"}'
        )

    def bad_kind() -> Any:
        thread_id = store.new_thread()
        return pb.PostMessageRequest(
            message_id=store.id("m"), thread_id=thread_id, kind="shout", text="x"
        )

    cases: list[tuple[str, str, Callable[[], Any]]] = [
        ("data that is not JSON", "CreateArtifact", lambda: create(store.id("a"), kind, "{")),
        ("data that is no object", "CreateArtifact", lambda: create(store.id("a"), kind, "[1]")),
        ("an empty kind", "CreateArtifact", lambda: create(store.id("a"), "", "{}")),
        ("an empty id", "CreateArtifact", lambda: create("", kind, "{}")),
        ("a patch that is no JSON Patch", "PatchArtifact", bad_patch),
        ("a message of an unknown kind", "PostMessage", bad_kind),
        (
            "an empty thread title",
            "CreateThread",
            lambda: pb.CreateThreadRequest(thread_id=store.id("t"), title=""),
        ),
    ]
    for what, rpc, request in cases:
        try:
            expect(store.refused(rpc, request()), RefusalCode.VALIDATION_FAILED)
        except Broken as broken:
            raise Broken(f"{what}: {broken}") from None
    return (
        "bad input is VALIDATION_FAILED (INVALID_ARGUMENT): data no object, empty names, no patch"
    )


def forbidden(store: Store) -> str:
    if not store.metadata:
        return "SKIP: no token given (--token-file), so a call without one proves nothing"
    expect(
        store.refused("GetArtifact", pb.GetArtifactRequest(artifact_id=store.id("x")), metadata=()),
        RefusalCode.FORBIDDEN,
    )
    wrong = (("authorization", "Bearer not-the-token"),)
    expect(
        store.refused(
            "GetArtifact", pb.GetArtifactRequest(artifact_id=store.id("x")), metadata=wrong
        ),
        RefusalCode.FORBIDDEN,
    )
    return "a call without the token, or with another, is FORBIDDEN (PERMISSION_DENIED)"


# -- threads, messages and turns ------------------------------------------------------------


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


# -- listing ---------------------------------------------------------------------------------


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


Check = Callable[[Store], str]
# The order they run and print in.
CHECKS: tuple[tuple[str, Check], ...] = (
    ("ids/artifact", used_artifact_id),
    ("ids/proposal", used_proposal_id),
    ("ids/thread", used_thread_id),
    ("ids/message", used_message_id),
    ("ids/message-with-turn", used_message_id_with_turn),
    ("ids/race", racing_writers),
    ("states/created", created_state),
    ("states/archived", archived_artifact),
    ("states/every-state-named", every_state_is_named),
    ("versions/bump", patch_bumps_version),
    ("versions/conflict", stale_version),
    ("versions/patch-failed", patch_that_does_not_apply),
    ("refusals/not-found", not_found),
    ("refusals/validation-failed", validation_failed),
    ("refusals/forbidden", forbidden),
    ("threads/order", message_order),
    ("threads/turn-requests", turn_requests),
    ("threads/notice-takes-no-turn", notice_takes_no_turn),
    ("listing/pages", listing),
)


def open_channel(
    target: str,
    *,
    tls_ca: Path | None = None,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
) -> grpc.Channel:
    """A channel to ``target`` as the sidecar's --store-target opens one: TLS when a CA or a
    client certificate is given."""
    tls = store_tls(tls_ca, tls_cert, tls_key)
    if tls is None:
        return grpc.insecure_channel(target, options=list(CHANNEL_OPTIONS))
    return grpc.secure_channel(target, channel_credentials(tls), options=list(CHANNEL_OPTIONS))


def run_checks(store: Store, out: TextIO = sys.stdout) -> int:
    """Run every check and print one line each; 0 when all hold, 1 otherwise."""
    held = broken = skipped = 0
    for name, check in CHECKS:
        try:
            said = check(store)
        except Broken as error:
            broken += 1
            print(f"  FAIL  {name}: {error}", file=out)
            continue
        except grpc.RpcError as error:
            broken += 1
            answer = _answer(error)
            print(
                f"  FAIL  {name}: a call the contract answers was refused: {answer.code.name}, "
                f"reason {answer.reason or '(none)'!r}: {answer.message}",
                file=out,
            )
            continue
        if said.startswith("SKIP: "):
            skipped += 1
            print(f"  SKIP  {name}: {said.removeprefix('SKIP: ')}", file=out)
        else:
            held += 1
            print(f"  ok    {name}: {said}", file=out)
    verdict = "the store keeps the contract" if not broken else "the store BREAKS the contract"
    print(f"\n{held} held, {broken} failed, {skipped} skipped: {verdict}", file=out)
    return 0 if not broken else 1


def check_store(
    target: str,
    *,
    tls_ca: Path | None = None,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
    token_file: Path | None = None,
    timeout: float = 10.0,
    out: TextIO = sys.stdout,
) -> int:
    """``actonce store check``: 0 when every check holds, 1 when one fails, 2 when the store
    cannot be reached at all."""
    metadata = [("authorization", f"Bearer {read_token(token_file)}")] if token_file else []
    with open_channel(target, tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key) as channel:
        try:
            grpc.channel_ready_future(channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            print(
                f"actonce: error: the store at {target} cannot be reached "
                f"(no connection within {timeout:g} s)",
                file=sys.stderr,
            )
            return 2
        store = Store(channel, metadata, timeout)
        print(f"actonce store check: {target}, ids under {store.prefix}-*\n", file=out)
        return run_checks(store, out)
