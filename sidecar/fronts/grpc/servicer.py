"""The RunActionsService servicer: the API's table (sidecar.fronts.operations) over gRPC.

Each RPC's method is built from its entry: every field is read from the request
message by its kind (a ``*_json`` field's text parsed, once, into the JsonValue the
core takes), the core method is called, and its answer becomes the response message
by the response's descriptor. A refusal ends the call in sidecar.fronts.grpc.status.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from operator import attrgetter
from typing import Any

import grpc
from google.protobuf import timestamp_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass

from sidecar.core.actions import RunActions
from sidecar.errors import ActonceError, InvalidArgument
from sidecar.fronts import operations
from sidecar.fronts.grpc import status
from sidecar.fronts.operations import Field, Kind, Operation
from sidecar.rules.canonical import Document, JsonValue

_Context = grpc.aio.ServicerContext[Any, Any]

# A repeat of a step still running waits no longer than its caller does, less this much:
# it is answered (with ErrorInfo), not cut off by its deadline.
ANSWER_MARGIN_SECONDS = 0.5


def _within(context: _Context) -> float | None:
    """How long its caller waits for the answer, less the margin; None when it set no
    deadline."""
    remaining = context.time_remaining()
    return None if remaining is None else max(0.0, remaining - ANSWER_MARGIN_SECONDS)


# -- requests ---------------------------------------------------------------------------


def _timestamp(field: Field) -> Callable[[Any], datetime | None]:
    def read(request: Any) -> datetime | None:
        if not request.HasField(field.name):
            if field.required:
                raise InvalidArgument(field.name, "must be set")
            return None
        stamp: timestamp_pb2.Timestamp = getattr(request, field.name)
        try:
            return stamp.ToDatetime(tzinfo=UTC)
        except (ValueError, OverflowError) as exc:
            raise InvalidArgument(field.name, f"is not a valid timestamp: {exc}") from None

    return read


def _reader(field: Field) -> Callable[[Any], Any]:
    """How ``field`` is read from a request message."""
    name = field.name
    if field.oneof:
        oneof = field.oneof
        return lambda request: getattr(request, name) if request.WhichOneof(oneof) == name else None
    if field.kind is Kind.JSON:
        return lambda request: JsonValue.parse(getattr(request, name), name)
    if field.kind is Kind.DOCUMENT:
        return lambda request: Document.parse(getattr(request, name), name)
    if field.kind is Kind.TIMESTAMP:
        return _timestamp(field)
    if field.kind is Kind.EFFECT:
        return lambda request: int(getattr(request, name))
    return attrgetter(name)


def _decoder(op: Operation) -> Callable[[Any], dict[str, Any]]:
    """The core method's keywords from a request, each field read in the request's order
    (so that the first bad field is the one named)."""
    readers = [(field.parameter, _reader(field)) for field in op.fields]
    return lambda request: {parameter: read(request) for parameter, read in readers}


# -- responses --------------------------------------------------------------------------


def _stamp(value: datetime) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(value)
    return stamp


def _converter(field: FieldDescriptor) -> Callable[[Any], Any] | None:
    """How an answer's value becomes the field's: None when it is the value itself."""
    message = field.message_type
    if message is None:
        return str if field.enum_type is not None else None  # an Outcome, by its name
    if message.full_name == "google.protobuf.Timestamp":
        return _stamp
    nested = _record_encoder(message)
    if field.is_repeated:
        return lambda records: [nested(record) for record in records]
    return nested


def _plan(descriptor: Descriptor) -> list[tuple[str, Callable[[Any], Any] | None]]:
    return [(field.name, _converter(field)) for field in descriptor.fields]


def _record_encoder(descriptor: Descriptor) -> Callable[[Any], Message]:
    """A record (the core's dataclass) as the message whose fields it names."""
    message_class, plan = GetMessageClass(descriptor), _plan(descriptor)

    def encode(record: Any) -> Message:
        values = {name: getattr(record, name) for name, _ in plan}
        return message_class(**_converted(values, plan))

    return encode


def _encoder(descriptor: Descriptor) -> Callable[[Mapping[str, Any]], Message]:
    """An answer (the response's fields by name) as the response message."""
    message_class, plan = GetMessageClass(descriptor), _plan(descriptor)
    return lambda answer: message_class(**_converted(answer, plan))


def _converted(
    values: Mapping[str, Any], plan: list[tuple[str, Callable[[Any], Any] | None]]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, convert in plan:
        if name in values:
            value = values[name]
            out[name] = value if convert is None else convert(value)
    return out


# -- the servicer -----------------------------------------------------------------------

_Method = Callable[["RunActionsServicer", Any, _Context], Awaitable[Message]]


def _method(op: Operation) -> _Method:
    """The servicer's method for ``op``: request in, one core call, response out."""
    decode, encode, answer = _decoder(op), _encoder(op.response), op.answer
    core, bounded = op.core, op.bounded_by_caller

    async def handle(self: RunActionsServicer, request: Any, context: _Context) -> Message:
        try:
            arguments = decode(request)
            if bounded:
                arguments["within_seconds"] = _within(context)
            result = await core(self.actions, **arguments)
        except ActonceError as error:
            await status.abort(context, error)
        return encode(answer(result))

    handle.__name__ = handle.__qualname__ = op.rpc
    return handle


class RunActionsServicer:
    """actonce.v1.RunActionsService over sidecar.core.actions.RunActions: one method per
    entry of the API's table, each set below."""

    def __init__(self, actions: RunActions) -> None:
        self.actions = actions


for _op in operations.TABLE:
    setattr(RunActionsServicer, _op.rpc, _method(_op))


def add_to_server(actions: RunActions, server: grpc.aio.Server) -> None:
    """Serve RunActionsService on ``server``: each entry's method, with its request's and
    its response's messages from the descriptors."""
    servicer = RunActionsServicer(actions)
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
        op.rpc: grpc.unary_unary_rpc_method_handler(
            getattr(servicer, op.rpc),
            request_deserializer=GetMessageClass(op.request).FromString,
            response_serializer=GetMessageClass(op.response).SerializeToString,
        )
        for op in operations.TABLE
    }
    name = operations.SERVICE.full_name
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(name, handlers),))
    server.add_registered_method_handlers(name, handlers)
