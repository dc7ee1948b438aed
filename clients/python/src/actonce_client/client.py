"""The client: a channel to the sidecar, and one Attempt per try of a run.

Every call has a deadline; the channel retries UNAVAILABLE (a draining
sidecar, an unreachable store, no connection); every write carries a fresh
request_id that a transport retry resends, so a repeat the sidecar already
answered gets the first answer back, and a write that landed is found by its
derived id. Failures raise ActonceError, which carries the write's request_id:
repeating the write with it after an unknown outcome gets the first answer.
"""

from __future__ import annotations

import enum
import json
import os
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self, TypeVar

import grpc
from google.protobuf import timestamp_pb2

from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc
from actonce_api.v1 import types_pb2
from actonce_client import target as targets
from actonce_client.auth import ApiToken, call_metadata
from actonce_client.errors import InvalidInput, from_rpc_error

DEFAULT_TIMEOUT = 10.0
"""Seconds a call may take unless told otherwise: above the sidecar's own
store deadline (5 s), so a slow store reaches the caller as its own error."""

SERVICE_CONFIG = json.dumps(
    {
        "methodConfig": [
            {
                "name": [{"service": "actonce.v1.RunActionsService"}],
                "retryPolicy": {
                    "maxAttempts": 4,
                    "initialBackoff": "0.1s",
                    "maxBackoff": "1s",
                    "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE"],
                },
            }
        ]
    }
)

T = TypeVar("T")


class Outcome(enum.IntEnum):
    """What a successful write did."""

    UNSPECIFIED = types_pb2.OUTCOME_UNSPECIFIED
    APPLIED = types_pb2.OUTCOME_APPLIED
    """Made now."""
    ALREADY_APPLIED = types_pb2.OUTCOME_ALREADY_APPLIED
    """An earlier attempt of the run made it."""
    SKIPPED = types_pb2.OUTCOME_SKIPPED
    """The edit's value was already there; nothing changed."""
    UNRECOGNIZED = -1
    """The write succeeded with an outcome this client does not know (a newer
    sidecar's): it landed, so it is not an error, and must not be repeated."""


_KNOWN_OUTCOMES = {Outcome.APPLIED, Outcome.ALREADY_APPLIED, Outcome.SKIPPED}


def _outcome(value: int) -> Outcome:
    return Outcome(value) if value in _KNOWN_OUTCOMES else Outcome.UNRECOGNIZED


class Effect(enum.IntEnum):
    """What one of the agent's own tool calls does to the world (ADR-111)."""

    UNSPECIFIED = types_pb2.TOOL_EFFECT_UNSPECIFIED
    READ_ONLY = types_pb2.TOOL_EFFECT_READ_ONLY
    IDEMPOTENT_WRITE = types_pb2.TOOL_EFFECT_IDEMPOTENT_WRITE
    NON_IDEMPOTENT_WRITE = types_pb2.TOOL_EFFECT_NON_IDEMPOTENT_WRITE


_EFFECTS = ("READ_ONLY", "IDEMPOTENT_WRITE", "NON_IDEMPOTENT_WRITE")


def effect_value(effect: Effect | str) -> types_pb2.ToolEffect.ValueType:
    """A step's effect on the wire, given as an :class:`Effect` or its name. Anything else
    is refused here, before anything is sent, as the sidecar would refuse it: a step sent
    with a wrong effect would otherwise fail after its call may have begun."""
    name = effect.name if isinstance(effect, Effect) else effect
    if not isinstance(name, str) or name not in _EFFECTS:
        raise InvalidInput("effect", f"is {effect!r}; it must be one of {', '.join(_EFFECTS)}")
    return types_pb2.ToolEffect.ValueType(Effect[name])


@dataclass(frozen=True)
class RawJSON:
    """JSON text sent as it is, e.g. a model's own output; the sidecar checks it."""

    text: str


@dataclass(frozen=True)
class Write:
    """What a write made: the derived id of the artifact, proposal, thread or
    message (for a direct edit, the edited artifact's id), and its outcome."""

    id: str
    outcome: Outcome
    version: int = 0


@dataclass(frozen=True)
class Artifact:
    """A versioned JSON document in the store."""

    id: str
    kind: str
    version: int
    data_json: str
    archived: bool

    @property
    def data(self) -> Any:
        return json.loads(self.data_json)


@dataclass(frozen=True)
class Message:
    """One entry of a thread: kind "notice" or "message"."""

    id: str
    kind: str
    text: str


@dataclass(frozen=True)
class Step:
    """The sidecar's answer to begin_step."""

    id: str
    outcome: Outcome
    result_json: str = ""

    @property
    def done(self) -> bool:
        """An earlier attempt made and ended this call: use result, do not call again."""
        return self.outcome is Outcome.ALREADY_APPLIED

    @property
    def result(self) -> Any:
        return json.loads(self.result_json) if self.result_json else None


@dataclass(frozen=True)
class Counts:
    """An attempt's writes by outcome."""

    applied: int
    already_applied: int
    skipped: int
    failed: int


def _json_text(value: Any) -> str:
    if isinstance(value, RawJSON):
        return value.text
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def begin_request(
    run_id: str,
    rule: str,
    checkpoint: str,
    *,
    lease_deadline: datetime | None,
    scope: str,
    delivery_attempt_id: str,
) -> pb.BeginAttemptRequest:
    """A BeginAttempt request, as both clients send it."""
    request = pb.BeginAttemptRequest(
        run_id=run_id, rule=rule, checkpoint=checkpoint, scope=scope,
        delivery_attempt_id=delivery_attempt_id,
    )  # fmt: skip
    if lease_deadline is not None:
        request.lease_deadline.CopyFrom(_timestamp(lease_deadline))
    return request


def json_text(value: Any) -> str:
    """A write's JSON data as the sidecar takes it: JSON text (RawJSON as it is)."""
    return _json_text(value)


def timestamp(value: datetime) -> timestamp_pb2.Timestamp:
    """A lease deadline as the sidecar takes it: timezone-aware, in UTC."""
    return _timestamp(value)


def outcome_of(value: int) -> Outcome:
    return _outcome(value)


def _timestamp(value: datetime) -> timestamp_pb2.Timestamp:
    if value.tzinfo is None:
        raise ValueError("lease deadlines must be timezone-aware datetimes")
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(value.astimezone(UTC))
    return stamp


class Client:
    """A channel to one sidecar, safe to share between threads.

    ``target`` is where the sidecar listens: ``"127.0.0.1:50051"`` or
    ``"unix:///run/actonce.sock"``; without it, ``ACTONCE_TARGET``. A URL
    (``http://...``) is refused at once (actonce_client.target). The sidecar runs in
    the agent's pod, so the channel is plaintext unless ``credentials`` are given.

    Every call carries the sidecar's API token when there is one: ``api_token``
    or ``api_token_file``, else the file named by ``ACTONCE_API_TOKEN_FILE``, else
    ``ACTONCE_API_TOKEN`` (actonce_client.auth). An agent that its harness handed one
    attempt (a sidecar with ``--agent-capabilities``) needs no token: it makes the
    attempt's handle with :meth:`attempt`, giving the attempt's ``capability``, and
    every call of that attempt carries it.
    """

    def __init__(
        self,
        target: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        credentials: grpc.ChannelCredentials | None = None,
        options: Sequence[tuple[str, Any]] = (),
        api_token: str | None = None,
        api_token_file: str | os.PathLike[str] | None = None,
    ) -> None:
        target = targets.resolve(target)
        self._token = ApiToken.resolve(api_token, api_token_file)
        self.target = target
        self.credentials = credentials
        self.options = tuple(options)
        channel_options = [("grpc.service_config", SERVICE_CONFIG), *options]
        self._channel = (
            grpc.secure_channel(target, credentials, options=channel_options)
            if credentials is not None
            else grpc.insecure_channel(target, options=channel_options)
        )
        self._stub = pb_grpc.RunActionsServiceStub(self._channel)
        self.timeout = timeout
        self._closed = False

    def begin(
        self,
        run_id: str,
        rule: str,
        checkpoint: str = "",
        *,
        lease_deadline: datetime | None = None,
        scope: str = "",
        delivery_attempt_id: str = "",
        capability: str = "",
    ) -> Attempt:
        """Start one try of a run from its last checkpoint ("" at the run's start).

        ``scope`` names the attempt's part of the run, stable across its retries
        (a tool call's id, say): fencing and derived ids are per (run, scope), so
        sibling scopes never fence each other and the same write in two scopes
        is two writes. ``delivery_attempt_id`` names the unscoped attempt (the
        queue's delivery of the run) a scoped attempt belongs to: a newer delivery
        fences it, and its lease is bounded by the delivery's. ``capability`` is that
        delivery's (``Attempt.capability``): with it, an agent that holds no token begins
        its delivery's scoped attempts. The attempt answered keeps its own capability.
        """
        request = begin_request(run_id, rule, checkpoint, lease_deadline=lease_deadline,
                                scope=scope, delivery_attempt_id=delivery_attempt_id)  # fmt: skip
        response = self._call(self._stub.BeginAttempt, request, capability=capability)
        return Attempt(self, response.attempt_id, run_id=run_id, rule=rule, checkpoint=checkpoint,
                       scope=scope, id_scheme_version=response.id_scheme_version or 1,
                       delivery_attempt_id=delivery_attempt_id,
                       capability=response.capability)  # fmt: skip

    def attempt(self, attempt_id: str, *, run_id: str, rule: str, checkpoint: str = "",
                scope: str = "", id_scheme_version: int = 1,
                capability: str = "") -> Attempt:  # fmt: skip
        """A handle on an attempt begun elsewhere (by the asyncio client, say, or by the
        harness that handed this agent the attempt's id and its ``capability``)."""
        return Attempt(self, attempt_id, run_id=run_id, rule=rule, checkpoint=checkpoint,
                       scope=scope, id_scheme_version=id_scheme_version,
                       capability=capability)  # fmt: skip

    def _call(
        self, method: Callable[..., T], request: Any, *, request_id: str = "", capability: str = ""
    ) -> T:
        metadata = call_metadata(self._token, capability)
        try:
            return method(request, timeout=self.timeout, metadata=metadata)
        except grpc.RpcError as error:
            # A blocking call is cancelled only by closing its channel: a CANCELLED
            # after close() is the caller's own doing, any other is not.
            raise from_rpc_error(
                error, request_id=request_id, caller_cancelled=self._closed
            ) from error

    def close(self) -> None:
        self._closed = True
        self._channel.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class _AttemptCalls:
    """A client's calls as one attempt makes them: each carries the attempt's capability."""

    def __init__(self, client: Client, capability: str) -> None:
        self._client = client
        self._capability = capability

    def _call(self, method: Callable[..., T], request: Any, *, request_id: str = "") -> T:
        return self._client._call(method, request, request_id=request_id,
                                  capability=self._capability)  # fmt: skip


class Attempt:
    """One try of a run. Every write takes ``request_id`` (default: a fresh
    one, see ``new_request_id``), and an error from a write carries the one it
    was sent with (``ActonceError.request_id``): repeat the call with it, in the
    same attempt, after an error that left its outcome unknown, and get the
    first answer back instead of a second write.

    ``capability`` is what the sidecar answered BeginAttempt with (empty unless it runs
    with ``--agent-capabilities``): every call of the attempt carries it, and a harness
    hands it, with the attempt's id, to the agent it lets act in this attempt alone."""

    def __init__(self, client: Client, attempt_id: str, *, run_id: str, rule: str,
                 checkpoint: str, scope: str = "", id_scheme_version: int = 1,
                 delivery_attempt_id: str = "", capability: str = "") -> None:  # fmt: skip
        self._client = _AttemptCalls(client, capability)
        self._stub = client._stub
        self.capability = capability
        self.id = attempt_id
        self.run_id = run_id
        self.rule = rule
        self.checkpoint = checkpoint
        self.scope = scope
        # The delivery (an unscoped attempt of the run) a scoped attempt belongs to.
        self.delivery_attempt_id = delivery_attempt_id
        # The derived-id scheme the sidecar derives this attempt's ids with
        # (actonce_client.ids); a run keeps the version it began with.
        self.id_scheme_version = id_scheme_version

    def create(
        self,
        kind: str,
        data: Any,
        *,
        propose: bool = False,
        key: str = "",
        request_id: str | None = None,
    ) -> Write:
        """Make an artifact of ``kind`` holding ``data``, or propose it.

        ``key`` (1 to 255 bytes, a run's attempts of version 3): a key you choose that
        names this artifact in the run and checkpoint, instead of its data. A redelivery
        whose data differs (a timestamp, a uuid) finds the same artifact; the same key
        with other data in one attempt is refused KEY_REUSED (REFUSED)."""
        rid = request_id or new_request_id()
        response = self._client._call(
            self._stub.Create,
            pb.CreateRequest(attempt_id=self.id, kind=kind, data_json=_json_text(data),
                             propose=propose, request_id=rid, key=key),
            request_id=rid,
        )  # fmt: skip
        return Write(response.id, _outcome(response.outcome), response.version)

    def edit(
        self,
        artifact_id: str,
        path: str,
        value: Any,
        *,
        propose: bool = False,
        request_id: str | None = None,
    ) -> Write:
        """Set ``value`` at the JSON Pointer ``path``, or propose it; skipped
        when the value is already there."""
        rid = request_id or new_request_id()
        response = self._client._call(
            self._stub.Edit,
            pb.EditRequest(attempt_id=self.id, artifact_id=artifact_id, path=path,
                           value_json=_json_text(value), propose=propose,
                           request_id=rid),
            request_id=rid,
        )  # fmt: skip
        written = response.proposal_id if propose else artifact_id
        return Write(written, _outcome(response.outcome), response.version)

    def notice(self, thread_id: str, text: str, *, request_id: str | None = None) -> Write:
        """Post a notice: it starts and steers no turn."""
        rid = request_id or new_request_id()
        response = self._client._call(
            self._stub.Notice,
            pb.NoticeRequest(attempt_id=self.id, thread_id=thread_id, text=text,
                             request_id=rid),
            request_id=rid,
        )  # fmt: skip
        return Write(response.message_id, _outcome(response.outcome))

    def send(self, thread_id: str, text: str, *, request_id: str | None = None) -> Write:
        """Post a message that asks for the thread's turn (rules on the
        sidecar's send allowlist only; others get FORBIDDEN, PERMANENT)."""
        rid = request_id or new_request_id()
        response = self._client._call(
            self._stub.Send,
            pb.SendRequest(attempt_id=self.id, thread_id=thread_id, text=text,
                           request_id=rid),
            request_id=rid,
        )  # fmt: skip
        return Write(response.message_id, _outcome(response.outcome))

    def create_thread(self, title: str, *, key: str = "", request_id: str | None = None) -> Write:
        """Make a conversation thread; ``key`` names it instead of its title (see create)."""
        rid = request_id or new_request_id()
        response = self._client._call(
            self._stub.CreateThread,
            pb.CreateThreadRequest(attempt_id=self.id, title=title,
                                   request_id=rid, key=key),
            request_id=rid,
        )  # fmt: skip
        return Write(response.thread_id, _outcome(response.outcome))

    def read_artifact(self, artifact_id: str) -> Artifact:
        """An artifact as the store holds it now."""
        response = self._client._call(
            self._stub.Read, pb.ReadRequest(attempt_id=self.id, artifact_id=artifact_id)
        )
        a = response.artifact
        return Artifact(a.id, a.kind, a.version, a.data_json, a.archived)

    def read_thread(self, thread_id: str) -> list[Message]:
        """A thread's messages, oldest first."""
        response = self._client._call(
            self._stub.Read, pb.ReadRequest(attempt_id=self.id, thread_id=thread_id)
        )
        return [Message(m.id, m.kind, m.text) for m in response.messages]

    def begin_step(
        self,
        tool: str,
        effect: Effect | str,
        args: Any,
        *,
        key: str = "",
        request_id: str | None = None,
    ) -> Step:
        """Declare one of the agent's own tool calls before making it.

        When the answer is ``done``, an earlier attempt made the call: use its
        ``result``. A non-idempotent call that began earlier and never ended
        is refused with IN_DOUBT (UNKNOWN): it is never made again automatically.
        ``key`` names the step by its tool and the key instead of its arguments (see
        create).
        """
        rid = request_id or new_request_id()
        response = self._client._call(
            self._stub.BeginStep,
            pb.BeginStepRequest(attempt_id=self.id, tool=tool, effect=effect_value(effect),
                                args_json=_json_text(args), request_id=rid, key=key),
            request_id=rid,
        )  # fmt: skip
        return Step(response.step_id, _outcome(response.outcome), response.result_json)

    def end_step(self, step_id: str, result: Any, *, request_id: str | None = None) -> Outcome:
        """Record the result of a step begun with begin_step."""
        rid = request_id or new_request_id()
        response = self._client._call(
            self._stub.EndStep,
            pb.EndStepRequest(attempt_id=self.id, step_id=step_id,
                              result_json=_json_text(result), request_id=rid),
            request_id=rid,
        )  # fmt: skip
        return _outcome(response.outcome)

    def abort_step(
        self, step_id: str, reason: str = "", *, request_id: str | None = None
    ) -> Outcome:
        """Declare that a step begun with begin_step did not act: the tool refused
        before acting, or was never called. A later try may run it, under the
        same step id. Only for what provably did not act; an ended step cannot
        be aborted (STEP_ENDED), nor an aborted one ended (STEP_ABORTED)."""
        rid = request_id or new_request_id()
        response = self._client._call(
            self._stub.AbortStep,
            pb.AbortStepRequest(attempt_id=self.id, step_id=step_id, reason=reason,
                                request_id=rid),
            request_id=rid,
        )  # fmt: skip
        return _outcome(response.outcome)

    def extend_lease(self, deadline: datetime) -> datetime:
        """Move the attempt's lease deadline; returns the one in force."""
        response = self._client._call(
            self._stub.ExtendLease,
            pb.ExtendLeaseRequest(attempt_id=self.id, lease_deadline=_timestamp(deadline)),
        )
        moved: datetime = response.lease_deadline.ToDatetime(tzinfo=UTC)
        return moved

    def end(self) -> Counts:
        """Close the attempt; returns its writes by outcome."""
        r = self._client._call(self._stub.EndAttempt, pb.EndAttemptRequest(attempt_id=self.id))
        return Counts(r.applied, r.already_applied, r.skipped, r.failed)


def new_request_id() -> str:
    """A fresh request_id. Each write gets one unless it is given one: choose it
    yourself before the first try to know it whatever happens to the call."""
    # One id per call; the channel's own retries resend the same request bytes.
    return str(uuid.uuid4())
