"""The reference store: its rules on SQL, written once for both of its databases, its records,
and the input rules a call validates with.

`StoreBackend` is what the gRPC servicer calls. It makes every call of the store: what it
validates, which rows it reads, which states refuse a write, how a version is checked and
bumped, how a listing pages. A dialect (`sqlite`, `postgres`) supplies only what truly differs
between the databases: how a call gets its connection and transaction (`_transact`), and the
few words in which the statements of `queries` differ (table names, placeholder, row locks).
As in DBOS's system database or Powertools' persistence layer, the base holds the rules and
the dialect the primitives.

It knows nothing of gRPC: it takes and returns plain values and frozen records (the contract's
`StoredArtifact` and `StoredMessage`, and the store's own below), refuses with the contract's
`StoreRefusal` (`sidecar.store_contract`), and raises `StoreUnavailableError` when its
database cannot be reached (a store on a local file never is unreachable).

The input rules that do not depend on storage (what valid JSON, a message kind, a stored
string, a page size and a page token are; what a valid JSON Patch is, in
`sidecar.refstore.patches`) are functions of their own, so that every call refuses the same
input with the same code.

Refusal order, the same in every write: the input is validated first (VALIDATION_FAILED),
then whether the call's principal may reach the data's owner (FORBIDDEN, by
`store_contract.may_reach`, checked on the row the write reads in its own transaction, so that
no owner set meanwhile slips by), then every state that refuses the write is collected and
reported together (INVALID_STATE with all of them: a caller counts a refusal as done only when
ID_USED is the *only* state), then what is missing (NOT_FOUND), then the version
(VERSION_CONFLICT), then whether a patch applies (PATCH_FAILED). Archiving an archived artifact
is refused with INVALID_STATE {ARCHIVED} rather than accepted again: archived artifacts refuse
every change, and archiving is one. A notice starts and steers no turn, so a turn request for
one is refused (VALIDATION_FAILED), whether it is asked with the post or later.

Each statement is written to be right whatever the database does with concurrent writers:

- A create is `INSERT ... ON CONFLICT (id) DO NOTHING`: of two writers racing for one id, the
  second finds the first's row (waiting for it to commit where the database lets both run), so
  exactly one lands and the other is refused with ID_USED.
- A change of an existing row (patch, archive) reads it with the dialect's update lock: the
  version check and the update hold together, so a stale version never overwrites a newer one.
- A post locks its thread row first: the thread's next `seq` is then computed by one writer at
  a time. A turn request locks its thread too, so a thread's requests commit in the order their
  keys were drawn and a reader never sees a later one before an earlier one.
- A proposed edit holds its artifact with the dialect's share lock while it is recorded, so the
  artifact cannot be archived between the check and the insert.

Where a database serializes whole transactions (SQLite's `BEGIN IMMEDIATE`), its locks are
empty words and the statements hold anyway.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypedDict, TypeVar, Unpack

import jsonpatch

from sidecar.refstore.patches import apply_patch, patch_of
from sidecar.refstore.queries import Connection, Dialect, Queries
from sidecar.store_contract import (
    ARCHIVED,
    ID_USED,
    Owner,
    Principal,
    RefusalCode,
    StoredArtifact,
    StoredMessage,
    StoreRefusal,
    may_reach,
)

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "MAX_PAGE_SIZE",
    "MESSAGE_KINDS",
    "OWNED",
    "ArtifactPage",
    "Connection",
    "Dialect",
    "Owner",
    "Principal",
    "StoreBackend",
    "StoreUnavailableError",
    "StoredArtifact",
    "StoredMessage",
    "StoredProposal",
    "StoredThread",
    "compact_json",
    "decode_page_token",
    "encode_page_token",
    "page_size_for",
    "parse_document",
    "parse_json",
    "parse_patch",
    "require_text",
]

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000

# "notice" starts and steers no turn; "message" (made by send) asks for the thread's turn.
MESSAGE_KINDS = frozenset({"notice", "message"})

# What an owner is assigned to, by the command that assigns owners to data made before they
# were recorded (sidecar.refstore.owners).
OWNED = ("artifacts", "threads", "proposals")


class StoreUnavailableError(Exception):
    """The backend's database could not be reached, or went away during the call.

    Not a refusal: the call may succeed when retried, and derived ids make a retry safe. When
    the connection was lost while the transaction was committing, the write may have landed;
    a retry then meets ID_USED (or, for a patch, a version conflict), never a second copy.
    """


@dataclass(frozen=True, slots=True)
class ArtifactPage:
    """One page of a kind's artifacts in id order; `next_page_token` is empty on the last."""

    artifacts: tuple[StoredArtifact, ...]
    next_page_token: str


class ProposalFields(TypedDict, total=False):
    """A proposal's content: a create's kind and data_json, or an edit's artifact_id,
    patch_json and base_version (empty or 0 where not given)."""

    kind: str
    data_json: str
    artifact_id: str
    patch_json: str
    base_version: int


@dataclass(frozen=True, slots=True)
class StoredProposal:
    """A proposal as recorded.

    A proposed create has `kind` and `data_json`; a proposed edit has `artifact_id`,
    `patch_json` and `base_version`. The other form's fields are empty ("" and 0), as on the
    wire.
    """

    id: str
    kind: str
    data_json: str
    artifact_id: str
    patch_json: str
    base_version: int
    owner: str = ""

    @property
    def is_edit(self) -> bool:
        return bool(self.artifact_id)


@dataclass(frozen=True, slots=True)
class NewMessage:
    """A message to post: its id, its thread, its kind (`notice` or `message`), its text, and
    whether a turn request commits with it (a message's only)."""

    message_id: str
    thread_id: str
    kind: str
    text: str
    request_turn: bool = False


@dataclass(frozen=True, slots=True)
class StoredThread:
    """A thread; ``owner`` is the rule whose run made it, empty when made before owners were
    recorded."""

    id: str
    title: str
    owner: str = ""


def require_text(value: str, field: str) -> str:
    """Refuse an empty required string, or one holding a NUL character, with VALIDATION_FAILED.

    PostgreSQL text cannot hold NUL. Refusing it in every backend keeps the answers the same
    whichever database is behind the store, and means no stored id ever contains one, so a
    lookup by such an id is simply NOT_FOUND. (JSON text never holds a raw NUL: it is
    escaped as \\u0000 when documents are stored compact.)
    """
    if not value:
        raise StoreRefusal(RefusalCode.VALIDATION_FAILED, f"{field} must not be empty")
    if "\0" in value:
        raise StoreRefusal(
            RefusalCode.VALIDATION_FAILED, f"{field} must not contain a NUL character"
        )
    return value


def _reject_constant(name: str) -> object:
    # Python's json accepts NaN and Infinity, which are not JSON and which other languages'
    # parsers (and RFC 8785 digests) would choke on later.
    raise ValueError(f"{name} is not valid JSON")


def parse_json(text: str, field: str) -> object:
    """Parse strict JSON text (RFC 8259); VALIDATION_FAILED otherwise."""
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise StoreRefusal(RefusalCode.VALIDATION_FAILED, f"{field} is nested too deeply") from None
    except ValueError as error:
        # The message names the position, never the content: refusals reach logs.
        detail = error.msg if isinstance(error, json.JSONDecodeError) else str(error)
        position = f" at {error.pos}" if isinstance(error, json.JSONDecodeError) else ""
        raise StoreRefusal(
            RefusalCode.VALIDATION_FAILED, f"{field} is not valid JSON: {detail}{position}"
        ) from None


def parse_document(text: str, field: str) -> dict[str, object]:
    """Parse an artifact's data: strict JSON whose top level is an object.

    An artifact is a document edited one JSON Pointer path at a time; a bare number, string or
    array at the top would leave no member to name, so it is refused (VALIDATION_FAILED).
    """
    document = parse_json(text, field)
    if not isinstance(document, dict):
        raise StoreRefusal(RefusalCode.VALIDATION_FAILED, f"{field} must be a JSON object")
    return document


def compact_json(value: object) -> str:
    """The compact text a document is stored as (key order kept, non-ASCII kept)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def parse_patch(patch_json: str, field: str = "patch_json") -> jsonpatch.JsonPatch:
    """Parse an RFC 6902 JSON Patch document; VALIDATION_FAILED when it is not one
    (strict JSON, then :func:`sidecar.refstore.patches.patch_of`)."""
    return patch_of(parse_json(patch_json, field), field)


def page_size_for(requested: int) -> int:
    """The page size to use: 0 means the default; above the maximum is lowered to it."""
    if requested < 0:
        raise StoreRefusal(RefusalCode.VALIDATION_FAILED, "page_size must not be negative")
    if requested == 0:
        return DEFAULT_PAGE_SIZE
    return min(requested, MAX_PAGE_SIZE)


def encode_page_token(kind: str, after_id: str) -> str:
    """An opaque token for the page after `after_id` in `kind`'s listing."""
    raw = json.dumps({"kind": kind, "after": after_id}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode("ascii")


def decode_page_token(kind: str, token: str) -> str | None:
    """The id a page token continues after, or None for the first page.

    The token carries its kind so that one from another listing is refused rather than
    silently paging through the wrong artifacts.
    """
    if not token:
        return None
    try:
        decoded = json.loads(base64.urlsafe_b64decode(token.encode("ascii")))
    except (ValueError, binascii.Error, UnicodeError):
        decoded = None
    if (
        not isinstance(decoded, dict)
        or not isinstance(decoded.get("after"), str)
        or "\0" in decoded["after"]
        or decoded.get("kind") != kind
    ):
        raise StoreRefusal(
            RefusalCode.VALIDATION_FAILED, "page_token is not a token of this listing"
        )
    after: str = decoded["after"]
    return after


def proposal_for(proposal_id: str, **fields: Unpack[ProposalFields]) -> StoredProposal:
    """A proposal's fields checked and normalized, as every backend records them."""
    kind, data_json = fields.get("kind", ""), fields.get("data_json", "")
    artifact_id, patch_json = fields.get("artifact_id", ""), fields.get("patch_json", "")
    base_version = fields.get("base_version", 0)
    require_text(proposal_id, "proposal_id")
    is_create = bool(kind or data_json)
    is_edit = bool(artifact_id or patch_json or base_version)
    if is_create == is_edit:
        raise StoreRefusal(
            RefusalCode.VALIDATION_FAILED,
            "a proposal is either a create (kind, data_json) or an edit"
            " (artifact_id, patch_json, base_version), exactly one",
        )
    if is_create:
        require_text(kind, "kind")
        data_json = compact_json(parse_document(data_json, "data_json"))
    else:
        require_text(artifact_id, "artifact_id")
        patch_json = compact_json(parse_patch(patch_json).patch)
        if base_version < 1:
            raise StoreRefusal(
                RefusalCode.VALIDATION_FAILED, "base_version must be a version (from 1)"
            )
    return StoredProposal(
        id=proposal_id,
        kind=kind,
        data_json=data_json,
        artifact_id=artifact_id,
        patch_json=patch_json,
        base_version=base_version,
    )


_T = TypeVar("_T")


class StoreBackend:
    """Durable storage for artifacts, proposals, threads, messages and turn requests.

    Ids are chosen by the caller and unique forever within their type (artifact, proposal,
    thread, message); a used id is refused with INVALID_STATE whose states include ID_USED.
    Each write is atomic. It is safe to call from several threads: the
    servicer runs every call in a worker thread.

    Every call takes the ``principal`` it acts for (None: not checked). A create records its
    rule as the owner; any other call on owned data is refused with FORBIDDEN unless
    ``store_contract.may_reach`` says the principal reaches its owner.

    Its rules are here; a subclass supplies the database (``sqlite``, ``postgres``).
    """

    def __init__(self, dialect: Dialect) -> None:
        self._sql = Queries(dialect)

    def _transact(self, work: Callable[[Connection], _T], *, write: bool) -> _T:
        """Run `work` in one transaction and answer once what it did or read is durable."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the storage; later calls fail."""
        raise NotImplementedError

    # Artifacts

    def create_artifact(
        self, artifact_id: str, kind: str, data_json: str, *, principal: Principal | None = None
    ) -> StoredArtifact:
        """Make an artifact at version 1, owned by the principal's rule."""
        require_text(artifact_id, "artifact_id")
        require_text(kind, "kind")
        data = compact_json(parse_document(data_json, "data_json"))
        owner = _owner_of(principal)

        def work(db: Connection) -> None:
            if not _inserted(db, self._sql.insert_artifact, (artifact_id, kind, data, owner)):
                raise _id_used("artifact")

        self._transact(work, write=True)
        return StoredArtifact(
            id=artifact_id, kind=kind, version=1, data_json=data, archived=False, owner=owner or ""
        )

    def get_artifact(
        self, artifact_id: str, *, principal: Principal | None = None
    ) -> StoredArtifact:
        """Read an artifact; NOT_FOUND when missing."""

        def work(db: Connection) -> StoredArtifact:
            return _reached(principal, self._artifact(db, artifact_id, lock=False))

        return self._transact(work, write=False)

    def patch_artifact(
        self,
        artifact_id: str,
        expected_version: int,
        patch_json: str,
        *,
        principal: Principal | None = None,
    ) -> StoredArtifact:
        """Apply an RFC 6902 patch if the version still matches; bump the version."""
        patch = parse_patch(patch_json)

        def work(db: Connection) -> StoredArtifact:
            current = _reached(principal, self._artifact(db, artifact_id, lock=True))
            if current.archived:
                raise StoreRefusal(
                    RefusalCode.INVALID_STATE, "artifact is archived", states={ARCHIVED}
                )
            if current.version != expected_version:
                raise StoreRefusal(
                    RefusalCode.VERSION_CONFLICT,
                    f"artifact is at version {current.version}, not {expected_version}",
                )
            # The stored text was written by compact_json from an object: it parses back as one.
            stored = parse_document(current.data_json, "data_json")
            data = compact_json(apply_patch(patch, stored))
            version = current.version + 1
            db.execute(self._sql.patch_artifact, (data, version, artifact_id))
            return replace(current, version=version, data_json=data)

        return self._transact(work, write=True)

    def archive_artifact(
        self, artifact_id: str, *, principal: Principal | None = None
    ) -> StoredArtifact:
        """Archive an artifact; archiving an archived one is INVALID_STATE {ARCHIVED}."""

        def work(db: Connection) -> StoredArtifact:
            current = _reached(principal, self._artifact(db, artifact_id, lock=True))
            if current.archived:
                raise StoreRefusal(
                    RefusalCode.INVALID_STATE, "artifact is already archived", states={ARCHIVED}
                )
            db.execute(self._sql.archive_artifact, (artifact_id,))
            return replace(current, archived=True)

        return self._transact(work, write=True)

    def list_artifacts(
        self,
        kind: str,
        page_size: int = 0,
        page_token: str = "",
        *,
        principal: Principal | None = None,
    ) -> ArtifactPage:
        """List a kind's artifacts in id order, archived ones included; with a principal,
        only those it may reach."""
        require_text(kind, "kind")
        size = page_size_for(page_size)
        after = decode_page_token(kind, page_token)
        start = after if after is not None else ""
        params: tuple[object, ...]
        if principal is None:
            query, params = self._sql.artifact_page, (kind, start, size + 1)
        else:
            query = self._sql.reachable_artifact_page
            reach = (principal.rule, principal.granted_owner or principal.rule)
            params = (kind, start, *reach, size + 1)
        rows: list[tuple[Any, ...]] = self._transact(
            lambda db: db.execute(query, params).fetchall(), write=False
        )
        artifacts = tuple(_artifact(row) for row in rows[:size])
        token = encode_page_token(kind, artifacts[-1].id) if len(rows) > size else ""
        return ArtifactPage(artifacts=artifacts, next_page_token=token)

    # Proposals

    def create_proposal(
        self,
        proposal_id: str,
        *,
        principal: Principal | None = None,
        **fields: Unpack[ProposalFields],
    ) -> StoredProposal:
        """Record a proposed create (kind, data_json) or edit (artifact_id, patch_json, ...)."""
        proposal = replace(
            proposal_for(proposal_id, **fields), owner=principal.rule if principal else ""
        )

        def work(db: Connection) -> None:
            states: set[str] = set()
            target = None
            if proposal.is_edit:
                target = _row(db, self._sql.proposal_target, proposal.artifact_id)
                if target is not None:
                    _require_reach(principal, target[1], "artifact")
                    if target[0]:
                        states.add(ARCHIVED)
            if states or (proposal.is_edit and target is None):
                # Refused either way; the states must all be reported (ID_USED alone would
                # read as "already done"), and a used id goes before a missing artifact.
                if _row(db, self._sql.proposal_used, proposal.id) is not None:
                    states.add(ID_USED)
                if states:
                    raise StoreRefusal(
                        RefusalCode.INVALID_STATE,
                        "proposal refused: " + ", ".join(sorted(states)),
                        states=states,
                    )
                raise StoreRefusal(RefusalCode.NOT_FOUND, "no such artifact")
            params = (
                proposal.id,
                proposal.kind,
                proposal.data_json,
                proposal.artifact_id,
                proposal.patch_json,
                proposal.base_version,
                proposal.owner or None,
            )
            if not _inserted(db, self._sql.insert_proposal, params):
                raise StoreRefusal(
                    RefusalCode.INVALID_STATE, "proposal refused: ID_USED", states={ID_USED}
                )

        self._transact(work, write=True)
        return proposal

    def get_proposal(
        self, proposal_id: str, *, principal: Principal | None = None
    ) -> StoredProposal:
        """Read a proposal; NOT_FOUND when missing."""
        row = self._transact(lambda db: _row(db, self._sql.proposal, proposal_id), write=False)
        if row is None:
            raise StoreRefusal(RefusalCode.NOT_FOUND, "no such proposal")
        _require_reach(principal, row[6], "proposal")
        return StoredProposal(
            id=row[0],
            kind=row[1],
            data_json=row[2],
            artifact_id=row[3],
            patch_json=row[4],
            base_version=row[5],
            owner=row[6] or "",
        )

    # Threads and messages

    def create_thread(
        self, thread_id: str, title: str, *, principal: Principal | None = None
    ) -> StoredThread:
        """Make a thread, owned by the principal's rule."""
        require_text(thread_id, "thread_id")
        require_text(title, "title")
        owner = _owner_of(principal)

        def work(db: Connection) -> None:
            if not _inserted(db, self._sql.insert_thread, (thread_id, title, owner)):
                raise _id_used("thread")

        self._transact(work, write=True)
        return StoredThread(id=thread_id, title=title, owner=owner or "")

    def post_message(
        self, message: NewMessage, *, principal: Principal | None = None
    ) -> StoredMessage:
        """Append a message; with its `request_turn`, its turn request commits with it."""
        require_text(message.message_id, "message_id")
        require_text(message.thread_id, "thread_id")
        if message.kind not in MESSAGE_KINDS:
            raise StoreRefusal(RefusalCode.VALIDATION_FAILED, "kind must be 'notice' or 'message'")
        require_text(message.text, "text")
        if message.request_turn and message.kind == "notice":
            raise StoreRefusal(
                RefusalCode.VALIDATION_FAILED,
                "a notice starts no turn: request_turn needs a message",
            )

        def work(db: Connection) -> int:
            # The id first: a repeat of a post whose thread exists is "already done", and a used
            # message id always belongs to an existing thread. But not to a principal that may
            # not reach the thread named: it learns nothing, not even that the id is used.
            used = _row(db, self._sql.message_used, message.message_id) is not None
            thread = _row(db, self._sql.thread_for_update, message.thread_id)
            if thread is not None:
                _require_reach(principal, thread[0], "thread")
            if used:
                raise _id_used("message")
            if thread is None:
                raise StoreRefusal(RefusalCode.NOT_FOUND, "no such thread")
            (seq,) = db.execute(self._sql.next_seq, (message.thread_id,)).fetchone()
            if not _inserted(
                db,
                self._sql.insert_message,
                (message.message_id, message.thread_id, seq, message.kind, message.text),
            ):
                # Another writer took the id after the check above (it posted to another
                # thread, whose lock this one does not hold).
                raise _id_used("message")
            if message.request_turn:
                # Same transaction as the message: no crash can leave a message untaken.
                db.execute(self._sql.insert_turn_request, (message.message_id, message.thread_id))
            return int(seq)

        seq = self._transact(work, write=True)
        return StoredMessage(
            id=message.message_id,
            thread_id=message.thread_id,
            kind=message.kind,
            text=message.text,
            seq=seq,
        )

    def list_messages(
        self, thread_id: str, *, principal: Principal | None = None
    ) -> tuple[StoredMessage, ...]:
        """A thread's messages, oldest first; NOT_FOUND for an unknown thread."""

        def work(db: Connection) -> list[tuple[Any, ...]]:
            self._require_thread(db, thread_id, principal)
            rows: list[tuple[Any, ...]] = db.execute(self._sql.messages, (thread_id,)).fetchall()
            return rows

        return tuple(_message(row) for row in self._transact(work, write=False))

    def request_turn(self, message_id: str, *, principal: Principal | None = None) -> bool:
        """Ask for the thread's turn for a message (not a notice); False when already asked."""

        def work(db: Connection) -> bool:
            row = _row(db, self._sql.message_turn, message_id)
            if row is None:
                raise StoreRefusal(RefusalCode.NOT_FOUND, "no such message")
            thread_id, kind = row
            # One writer per thread at a time, so the keys are drawn in commit order.
            thread = _row(db, self._sql.thread_for_update, thread_id)
            _require_reach(principal, thread[0] if thread is not None else None, "thread")
            if kind == "notice":
                raise StoreRefusal(
                    RefusalCode.VALIDATION_FAILED,
                    "a notice starts no turn: the message is a notice",
                )
            return _inserted(db, self._sql.insert_turn_request, (message_id, thread_id))

        return self._transact(work, write=True)

    def list_turn_requests(
        self, thread_id: str, *, principal: Principal | None = None
    ) -> tuple[str, ...]:
        """Message ids with a turn request, oldest first; NOT_FOUND for an unknown thread."""

        def work(db: Connection) -> list[tuple[Any, ...]]:
            self._require_thread(db, thread_id, principal)
            rows: list[tuple[Any, ...]] = db.execute(
                self._sql.turn_requests, (thread_id,)
            ).fetchall()
            return rows

        return tuple(row[0] for row in self._transact(work, write=False))

    # Owners

    def get_owner(self, *, artifact_id: str = "", thread_id: str = "") -> Owner:
        """The owner of an artifact (with its kind) or a thread; NOT_FOUND when missing.
        Not checked against any principal: it says nothing of the content."""
        if bool(artifact_id) == bool(thread_id):
            raise StoreRefusal(
                RefusalCode.VALIDATION_FAILED, "name an artifact_id or a thread_id, exactly one"
            )

        def work(db: Connection) -> Owner:
            if artifact_id:
                row = _row(db, self._sql.artifact_owner, artifact_id)
                if row is None:
                    raise StoreRefusal(RefusalCode.NOT_FOUND, "no such artifact")
                return Owner(row[0] or "", row[1])
            row = _row(db, self._sql.thread, thread_id)
            if row is None:
                raise StoreRefusal(RefusalCode.NOT_FOUND, "no such thread")
            return Owner(row[0] or "")

        return self._transact(work, write=False)

    def assign_owner(self, table: str, record_id: str, owner: str) -> bool:
        """Set the owner of a record of ``table`` (one of OWNED) that has none; False when
        it has one already (it is never changed) or does not exist."""
        if table not in OWNED:
            raise ValueError(f"owners are assigned to {', '.join(OWNED)}, not {table!r}")
        require_text(owner, "owner")
        query = self._sql.assign_owner[table]

        def work(db: Connection) -> bool:
            return "\0" not in record_id and _inserted(db, query, (owner, record_id))

        return self._transact(work, write=True)

    # Row access shared by the calls above

    def _artifact(self, db: Connection, artifact_id: str, *, lock: bool) -> StoredArtifact:
        query = self._sql.artifact_for_update if lock else self._sql.artifact
        row = _row(db, query, artifact_id)
        if row is None:
            raise StoreRefusal(RefusalCode.NOT_FOUND, "no such artifact")
        return _artifact(row)

    def _require_thread(self, db: Connection, thread_id: str, principal: Principal | None) -> None:
        row = _row(db, self._sql.thread, thread_id)
        if row is None:
            raise StoreRefusal(RefusalCode.NOT_FOUND, "no such thread")
        _require_reach(principal, row[0], "thread")


def _owner_of(principal: Principal | None) -> str | None:
    """The owner a create records: the principal's rule; NULL without one (a caller from
    before ownership), as data made before owners were recorded."""
    if principal is None or not principal.rule:
        return None
    require_text(principal.rule, "principal.rule")
    return principal.rule


def _require_reach(principal: Principal | None, owner: str | None, what: str) -> None:
    """Refuse with FORBIDDEN a call whose principal may not reach data owned by ``owner``."""
    if not may_reach(principal, owner or ""):
        assert principal is not None
        raise StoreRefusal(
            RefusalCode.FORBIDDEN,
            f"the {what} belongs to rule {owner!r}; rule {principal.rule!r} may not reach it",
        )


def _reached(principal: Principal | None, artifact: StoredArtifact) -> StoredArtifact:
    _require_reach(principal, artifact.owner, "artifact")
    return artifact


def _id_used(what: str) -> StoreRefusal:
    return StoreRefusal(RefusalCode.INVALID_STATE, f"{what} id is used", states={ID_USED})


def _row(db: Connection, query: str, key: str) -> tuple[Any, ...] | None:
    """The row `query` finds by `key`, or None.

    require_text keeps NUL out of every stored id, and PostgreSQL would reject it as a query
    parameter: a key holding one names nothing, on every database alike.
    """
    if "\0" in key:
        return None
    row: tuple[Any, ...] | None = db.execute(query, (key,)).fetchone()
    return row


def _inserted(db: Connection, query: str, params: Sequence[object]) -> bool:
    """Run an `INSERT ... ON CONFLICT DO NOTHING`; False when the row was there already."""
    return db.execute(query, params).rowcount == 1


def _artifact(row: Sequence[Any]) -> StoredArtifact:
    return StoredArtifact(
        id=row[0],
        kind=row[1],
        version=row[2],
        data_json=row[3],
        archived=bool(row[4]),
        owner=row[5] or "",
    )


def _message(row: Sequence[Any]) -> StoredMessage:
    return StoredMessage(id=row[0], thread_id=row[1], kind=row[2], text=row[3], seq=row[4])
