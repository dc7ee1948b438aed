"""The thin RunActionsService servicer: proto in, one domain call, proto out.

All rules live in sidecar.core.actions and sidecar.rules. The one place that turns
an error into a gRPC status is :func:`_answer`.
"""

from __future__ import annotations

from collections.abc import Awaitable
from datetime import UTC, datetime
from typing import Any, TypeVar

import grpc
import structlog
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc
from actonce_api.v1 import types_pb2
from google.protobuf import timestamp_pb2
from grpc_status import rpc_status

from sidecar.core.actions import RunActions
from sidecar.core.types import Outcome
from sidecar.errors import ActonceError, InvalidArgument, to_status
from sidecar.refstore.wire import to_message

log = structlog.get_logger()

T = TypeVar("T")
_Context = grpc.aio.ServicerContext[Any, Any]

_OUTCOMES = {
    Outcome.APPLIED: types_pb2.OUTCOME_APPLIED,
    Outcome.ALREADY_APPLIED: types_pb2.OUTCOME_ALREADY_APPLIED,
    Outcome.SKIPPED: types_pb2.OUTCOME_SKIPPED,
}


async def _answer(context: _Context, call: Awaitable[T]) -> T:
    """Await the domain call; abort the RPC with ErrorInfo if it refused."""
    try:
        return await call
    except ActonceError as error:
        log.info("refused", reason=error.reason, failure_class=error.failure_class.value)
        await context.abort_with_status(rpc_status.to_status(to_status(error)))
        raise  # abort_with_status raises; this line is for the type checker


def _timestamp(value: timestamp_pb2.Timestamp | None, field: str) -> datetime | None:
    if value is None:
        return None
    try:
        return value.ToDatetime(tzinfo=UTC)
    except (ValueError, OverflowError) as exc:
        raise InvalidArgument(field, f"is not a valid timestamp: {exc}") from None


# A repeat of a step still running waits no longer than its caller does, less this much:
# it is answered (with ErrorInfo), not cut off by its deadline.
ANSWER_MARGIN_SECONDS = 0.5


def _within(context: _Context) -> float | None:
    """How long its caller waits for a BeginStep's answer, less the margin; None when it
    set no deadline."""
    remaining = context.time_remaining()
    return None if remaining is None else max(0.0, remaining - ANSWER_MARGIN_SECONDS)


class RunActionsServicer(pb_grpc.RunActionsServiceServicer):
    """actonce.v1.RunActionsService over sidecar.core.actions.RunActions."""

    def __init__(self, actions: RunActions) -> None:
        self.actions = actions

    async def BeginAttempt(
        self, request: pb.BeginAttemptRequest, context: _Context
    ) -> pb.BeginAttemptResponse:
        async def call() -> pb.BeginAttemptResponse:
            deadline = (
                _timestamp(request.lease_deadline, "lease_deadline")
                if request.HasField("lease_deadline")
                else None
            )
            attempt = await self.actions.begin_attempt(
                run_id=request.run_id,
                rule=request.rule,
                checkpoint=request.checkpoint,
                lease_deadline=deadline,
                scope=request.scope,
                delivery_attempt_id=request.delivery_attempt_id,
            )
            return pb.BeginAttemptResponse(
                attempt_id=attempt.attempt_id, id_scheme_version=attempt.id_scheme
            )

        return await _answer(context, call())

    async def Create(self, request: pb.CreateRequest, context: _Context) -> pb.CreateResponse:
        result = await _answer(
            context,
            self.actions.create(
                attempt_id=request.attempt_id,
                kind=request.kind,
                data_json=request.data_json,
                propose=request.propose,
                request_id=request.request_id,
            ),
        )
        return pb.CreateResponse(
            id=result.id, outcome=_OUTCOMES[result.outcome], version=result.version
        )

    async def Edit(self, request: pb.EditRequest, context: _Context) -> pb.EditResponse:
        result = await _answer(
            context,
            self.actions.edit(
                attempt_id=request.attempt_id,
                artifact_id=request.artifact_id,
                path=request.path,
                value_json=request.value_json,
                propose=request.propose,
                request_id=request.request_id,
            ),
        )
        return pb.EditResponse(
            outcome=_OUTCOMES[result.outcome],
            version=result.version,
            proposal_id=result.proposal_id,
        )

    async def Notice(self, request: pb.NoticeRequest, context: _Context) -> pb.NoticeResponse:
        result = await _answer(
            context,
            self.actions.notice(
                attempt_id=request.attempt_id,
                thread_id=request.thread_id,
                text=request.text,
                request_id=request.request_id,
            ),
        )
        return pb.NoticeResponse(message_id=result.id, outcome=_OUTCOMES[result.outcome])

    async def CreateThread(
        self, request: pb.CreateThreadRequest, context: _Context
    ) -> pb.CreateThreadResponse:
        result = await _answer(
            context,
            self.actions.create_thread(
                attempt_id=request.attempt_id,
                title=request.title,
                request_id=request.request_id,
            ),
        )
        return pb.CreateThreadResponse(thread_id=result.id, outcome=_OUTCOMES[result.outcome])

    async def Send(self, request: pb.SendRequest, context: _Context) -> pb.SendResponse:
        result = await _answer(
            context,
            self.actions.send(
                attempt_id=request.attempt_id,
                thread_id=request.thread_id,
                text=request.text,
                request_id=request.request_id,
            ),
        )
        return pb.SendResponse(message_id=result.id, outcome=_OUTCOMES[result.outcome])

    async def Read(self, request: pb.ReadRequest, context: _Context) -> pb.ReadResponse:
        target = request.WhichOneof("target")
        result = await _answer(
            context,
            self.actions.read(
                attempt_id=request.attempt_id,
                artifact_id=request.artifact_id if target == "artifact_id" else None,
                thread_id=request.thread_id if target == "thread_id" else None,
            ),
        )
        if result.artifact is not None:
            return pb.ReadResponse(artifact=to_message(result.artifact, types_pb2.Artifact))
        return pb.ReadResponse(
            messages=[types_pb2.Message(id=m.id, kind=m.kind, text=m.text) for m in result.messages]
        )

    async def EndAttempt(
        self, request: pb.EndAttemptRequest, context: _Context
    ) -> pb.EndAttemptResponse:
        counts = await _answer(context, self.actions.end_attempt(request.attempt_id))
        return pb.EndAttemptResponse(
            applied=counts.applied,
            already_applied=counts.already_applied,
            skipped=counts.skipped,
            failed=counts.failed,
        )

    async def ExtendLease(
        self, request: pb.ExtendLeaseRequest, context: _Context
    ) -> pb.ExtendLeaseResponse:
        async def call() -> pb.ExtendLeaseResponse:
            if not request.HasField("lease_deadline"):
                raise InvalidArgument("lease_deadline", "must be set")
            deadline = _timestamp(request.lease_deadline, "lease_deadline")
            assert deadline is not None
            in_force = await self.actions.extend_lease(request.attempt_id, deadline)
            stamp = timestamp_pb2.Timestamp()
            stamp.FromDatetime(in_force)
            return pb.ExtendLeaseResponse(lease_deadline=stamp)

        return await _answer(context, call())

    async def BeginStep(
        self, request: pb.BeginStepRequest, context: _Context
    ) -> pb.BeginStepResponse:
        result = await _answer(
            context,
            self.actions.begin_step(
                attempt_id=request.attempt_id,
                tool=request.tool,
                effect=int(request.effect),
                args_json=request.args_json,
                request_id=request.request_id,
                within_seconds=_within(context),
            ),
        )
        return pb.BeginStepResponse(
            step_id=result.id,
            outcome=_OUTCOMES[result.outcome],
            result_json=result.result_json,
        )

    async def EndStep(self, request: pb.EndStepRequest, context: _Context) -> pb.EndStepResponse:
        result = await _answer(
            context,
            self.actions.end_step(
                attempt_id=request.attempt_id,
                step_id=request.step_id,
                result_json=request.result_json,
                request_id=request.request_id,
            ),
        )
        return pb.EndStepResponse(outcome=_OUTCOMES[result.outcome])

    async def AbortStep(
        self, request: pb.AbortStepRequest, context: _Context
    ) -> pb.AbortStepResponse:
        result = await _answer(
            context,
            self.actions.abort_step(
                attempt_id=request.attempt_id,
                step_id=request.step_id,
                reason=request.reason,
                request_id=request.request_id,
            ),
        )
        return pb.AbortStepResponse(outcome=_OUTCOMES[result.outcome])
