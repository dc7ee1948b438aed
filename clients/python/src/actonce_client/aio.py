"""The asyncio client: the same API as :mod:`actonce_client.client`, on ``grpc.aio``.

    async with AsyncClient("127.0.0.1:50051") as client:
        attempt = await client.begin("run-42", "triage", checkpoint="cp-7")
        ticket = await attempt.create("ticket", {"title": "Disk full"})
        await attempt.end()

Every call has a deadline, the channel retries UNAVAILABLE with the same service
config, every write carries a fresh request_id that a transport retry resends, and
failures raise the same :class:`~actonce_client.errors.ActonceError`. A channel
belongs to the event loop it was made in: make the client inside it.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self, TypeVar

import grpc
import grpc.aio

from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc
from actonce_client import target as targets
from actonce_client.auth import ApiToken, call_metadata
from actonce_client.client import (
    DEFAULT_TIMEOUT,
    SERVICE_CONFIG,
    Artifact,
    Client,
    Counts,
    Effect,
    Message,
    Outcome,
    Step,
    Write,
    begin_request,
    effect_value,
    json_text,
    new_request_id,
    outcome_of,
    timestamp,
)
from actonce_client.errors import from_rpc_error

T = TypeVar("T")


class AsyncClient:
    """A ``grpc.aio`` channel to one sidecar, for the event loop it is made in.

    ``target``, ``timeout``, ``credentials``, ``options``, ``api_token`` and
    ``api_token_file`` are those of :class:`~actonce_client.Client` (the token found
    in the environment the same way too); :meth:`like` makes one with a blocking
    client's settings.
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
        channel_options = [("grpc.service_config", SERVICE_CONFIG), *options]
        self._channel = (
            grpc.aio.secure_channel(target, credentials, options=channel_options)
            if credentials is not None
            else grpc.aio.insecure_channel(target, options=channel_options)
        )
        self._stub = pb_grpc.RunActionsServiceStub(self._channel)
        self.target = target
        self.timeout = timeout
        self._closed = False

    @classmethod
    def like(cls, client: Client) -> AsyncClient:
        """An asyncio client to ``client``'s sidecar, with its deadline and channel settings."""
        made = cls(client.target, timeout=client.timeout, credentials=client.credentials,
                   options=client.options)  # fmt: skip
        made._token = client._token  # the same token, followed as its file changes
        return made

    async def begin(
        self,
        run_id: str,
        rule: str,
        checkpoint: str = "",
        *,
        lease_deadline: datetime | None = None,
        scope: str = "",
        delivery_attempt_id: str = "",
        capability: str = "",
    ) -> AsyncAttempt:
        """Start one try of a run, as :meth:`actonce_client.Client.begin` does."""
        request = begin_request(run_id, rule, checkpoint, lease_deadline=lease_deadline,
                                scope=scope, delivery_attempt_id=delivery_attempt_id)  # fmt: skip
        response = await self._call(self._stub.BeginAttempt, request, capability=capability)
        return AsyncAttempt(self, response.attempt_id, run_id=run_id, rule=rule,
                            checkpoint=checkpoint, scope=scope,
                            id_scheme_version=response.id_scheme_version or 1,
                            delivery_attempt_id=delivery_attempt_id,
                            capability=response.capability)  # fmt: skip

    def attempt(self, attempt_id: str, *, run_id: str, rule: str, checkpoint: str = "",
                scope: str = "", id_scheme_version: int = 1,
                capability: str = "") -> AsyncAttempt:  # fmt: skip
        """A handle on an attempt begun elsewhere (by a blocking client, say, or by the
        harness that handed this agent the attempt's id and its ``capability``)."""
        return AsyncAttempt(self, attempt_id, run_id=run_id, rule=rule, checkpoint=checkpoint,
                            scope=scope, id_scheme_version=id_scheme_version,
                            capability=capability)  # fmt: skip

    async def _call(
        self,
        method: Callable[..., Awaitable[T]],
        request: Any,
        *,
        request_id: str = "",
        capability: str = "",
    ) -> T:
        metadata = call_metadata(self._token, capability)
        try:
            return await method(request, timeout=self.timeout, metadata=metadata)
        except grpc.aio.AioRpcError as error:
            raise from_rpc_error(
                error, request_id=request_id, caller_cancelled=self._closed
            ) from error

    async def close(self) -> None:
        self._closed = True
        await self._channel.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class _AttemptCalls:
    """A client's calls as one attempt makes them: each carries the attempt's capability."""

    def __init__(self, client: AsyncClient, capability: str) -> None:
        self._client = client
        self._capability = capability

    async def _call(
        self, method: Callable[..., Awaitable[T]], request: Any, *, request_id: str = ""
    ) -> T:
        return await self._client._call(method, request, request_id=request_id,
                                        capability=self._capability)  # fmt: skip


class AsyncAttempt:
    """One try of a run, as :class:`actonce_client.Attempt` with every call awaited."""

    def __init__(self, client: AsyncClient, attempt_id: str, *, run_id: str, rule: str,
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
        self.delivery_attempt_id = delivery_attempt_id
        self.id_scheme_version = id_scheme_version

    async def create(
        self,
        kind: str,
        data: Any,
        *,
        propose: bool = False,
        key: str = "",
        request_id: str | None = None,
    ) -> Write:
        rid = request_id or new_request_id()
        response = await self._client._call(
            self._stub.Create,
            pb.CreateRequest(attempt_id=self.id, kind=kind, data_json=json_text(data),
                             propose=propose, request_id=rid, key=key),
            request_id=rid,
        )  # fmt: skip
        return Write(response.id, outcome_of(response.outcome), response.version)

    async def edit(
        self,
        artifact_id: str,
        path: str,
        value: Any,
        *,
        propose: bool = False,
        request_id: str | None = None,
    ) -> Write:
        rid = request_id or new_request_id()
        response = await self._client._call(
            self._stub.Edit,
            pb.EditRequest(attempt_id=self.id, artifact_id=artifact_id, path=path,
                           value_json=json_text(value), propose=propose, request_id=rid),
            request_id=rid,
        )  # fmt: skip
        written = response.proposal_id if propose else artifact_id
        return Write(written, outcome_of(response.outcome), response.version)

    async def notice(self, thread_id: str, text: str, *, request_id: str | None = None) -> Write:
        rid = request_id or new_request_id()
        response = await self._client._call(
            self._stub.Notice,
            pb.NoticeRequest(attempt_id=self.id, thread_id=thread_id, text=text, request_id=rid),
            request_id=rid,
        )
        return Write(response.message_id, outcome_of(response.outcome))

    async def send(self, thread_id: str, text: str, *, request_id: str | None = None) -> Write:
        rid = request_id or new_request_id()
        response = await self._client._call(
            self._stub.Send,
            pb.SendRequest(attempt_id=self.id, thread_id=thread_id, text=text, request_id=rid),
            request_id=rid,
        )
        return Write(response.message_id, outcome_of(response.outcome))

    async def create_thread(
        self, title: str, *, key: str = "", request_id: str | None = None
    ) -> Write:
        rid = request_id or new_request_id()
        response = await self._client._call(
            self._stub.CreateThread,
            pb.CreateThreadRequest(attempt_id=self.id, title=title, request_id=rid, key=key),
            request_id=rid,
        )
        return Write(response.thread_id, outcome_of(response.outcome))

    async def read_artifact(self, artifact_id: str) -> Artifact:
        response = await self._client._call(
            self._stub.Read, pb.ReadRequest(attempt_id=self.id, artifact_id=artifact_id)
        )
        a = response.artifact
        return Artifact(a.id, a.kind, a.version, a.data_json, a.archived)

    async def read_thread(self, thread_id: str) -> list[Message]:
        response = await self._client._call(
            self._stub.Read, pb.ReadRequest(attempt_id=self.id, thread_id=thread_id)
        )
        return [Message(m.id, m.kind, m.text) for m in response.messages]

    async def begin_step(
        self,
        tool: str,
        effect: Effect | str,
        args: Any,
        *,
        key: str = "",
        request_id: str | None = None,
    ) -> Step:
        rid = request_id or new_request_id()
        response = await self._client._call(
            self._stub.BeginStep,
            pb.BeginStepRequest(attempt_id=self.id, tool=tool, effect=effect_value(effect),
                                args_json=json_text(args), request_id=rid, key=key),
            request_id=rid,
        )  # fmt: skip
        return Step(response.step_id, outcome_of(response.outcome), response.result_json)

    async def end_step(
        self, step_id: str, result: Any, *, request_id: str | None = None
    ) -> Outcome:
        rid = request_id or new_request_id()
        response = await self._client._call(
            self._stub.EndStep,
            pb.EndStepRequest(attempt_id=self.id, step_id=step_id,
                              result_json=json_text(result), request_id=rid),
            request_id=rid,
        )  # fmt: skip
        return outcome_of(response.outcome)

    async def abort_step(
        self, step_id: str, reason: str = "", *, request_id: str | None = None
    ) -> Outcome:
        rid = request_id or new_request_id()
        response = await self._client._call(
            self._stub.AbortStep,
            pb.AbortStepRequest(attempt_id=self.id, step_id=step_id, reason=reason,
                                request_id=rid),
            request_id=rid,
        )  # fmt: skip
        return outcome_of(response.outcome)

    async def extend_lease(self, deadline: datetime) -> datetime:
        response = await self._client._call(
            self._stub.ExtendLease,
            pb.ExtendLeaseRequest(attempt_id=self.id, lease_deadline=timestamp(deadline)),
        )
        moved: datetime = response.lease_deadline.ToDatetime(tzinfo=UTC)
        return moved

    async def end(self) -> Counts:
        r = await self._client._call(
            self._stub.EndAttempt, pb.EndAttemptRequest(attempt_id=self.id)
        )
        return Counts(r.applied, r.already_applied, r.skipped, r.failed)
