"""Cross-cutting concerns of every call, kept out of the handlers.

Each is a RunActionsInterceptor: it wraps every RunActionsService call and lets
other services (health, reflection) pass. LogContextInterceptor starts each call
with fresh log context bound to the RPC and the attempt, so that every line a
call logs names them. RequestDecodingInterceptor parses each request itself, so
that one that does not parse is refused as bad input like any other. CallGate is the
drain's gate: once closed, it answers every call SHUTTING_DOWN and cancels none. The
metrics' interceptor (sidecar.assembly.instruments) and the call's span
(sidecar.fronts.grpc.spans) are two more, built on RunActionsInterceptor too.
ForwardingContext is the call's context handed on whole, for an interceptor that
watches some of its methods (the metrics count aborts as they are sent).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Never, TypeAlias, TypeGuard

import grpc
import structlog
from actonce_api.v1 import run_actions_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError

from sidecar.errors import ActonceError, InvalidArgument, RequestTooLarge, ShuttingDown
from sidecar.fronts.grpc import status
from sidecar.ops import limits

if TYPE_CHECKING:
    # The type grpc's stubs give a done callback; it exists only in the stubs.
    from grpc.aio import _DoneCallback

RUN_ACTIONS = run_actions_pb2.DESCRIPTOR.services_by_name["RunActionsService"]

# A unary call's behaviour: the request (or, for RAW_REQUESTS, its bytes) and the context.
Context: TypeAlias = grpc.aio.ServicerContext[Any, Any]
Behavior: TypeAlias = Callable[[Any, Context], Awaitable[Any]]
# Generic only in grpc's type stubs, so named as a string.
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
Metadata: TypeAlias = grpc.aio.Metadata | Sequence[tuple[str, str | bytes]]


def behavior_of(handler: Handler) -> Behavior:
    """The unary behaviour ``handler`` holds, as an asyncio server holds it.

    grpc's type stubs describe a handler's behaviour as the synchronous server's (a plain
    function of a ``grpc.ServicerContext``); on a ``grpc.aio`` server it is a coroutine
    function of the asyncio context. This is the one place that says so, and it checks.
    """
    behavior = handler.unary_unary
    if not _served_by_asyncio(behavior):
        raise TypeError(f"{behavior!r} is not a unary coroutine function of a grpc.aio call")
    return behavior


def _served_by_asyncio(behavior: object) -> TypeGuard[Behavior]:
    # Whether it takes the asyncio context cannot be seen at run time; that it is a
    # coroutine function can, and a synchronous server's behaviour never is one.
    return inspect.iscoroutinefunction(behavior)


class ForwardingContext(grpc.aio.ServicerContext[Any, Any]):
    """A call's context that hands every method to the call's own; a subclass overrides
    the ones it watches."""

    def __init__(self, context: Context) -> None:
        self._context = context

    async def abort(
        self, code: grpc.StatusCode, details: str = "", trailing_metadata: Metadata = ()
    ) -> Never:
        await self._context.abort(code, details, trailing_metadata)

    async def abort_with_status(self, status: grpc.Status) -> Never:
        await self._context.abort_with_status(status)

    async def read(self) -> Any:
        return await self._context.read()

    async def write(self, message: Any) -> None:
        await self._context.write(message)

    async def send_initial_metadata(self, initial_metadata: Metadata) -> None:
        await self._context.send_initial_metadata(initial_metadata)

    def add_done_callback(self, callback: _DoneCallback[Any, Any]) -> None:
        self._context.add_done_callback(callback)

    def set_trailing_metadata(self, trailing_metadata: Metadata) -> None:
        self._context.set_trailing_metadata(trailing_metadata)

    def invocation_metadata(self) -> grpc.aio.Metadata | None:
        return self._context.invocation_metadata()

    def set_code(self, code: grpc.StatusCode) -> None:
        self._context.set_code(code)

    def set_details(self, details: str) -> None:
        self._context.set_details(details)

    def set_compression(self, compression: grpc.Compression) -> None:
        self._context.set_compression(compression)

    def disable_next_message_compression(self) -> None:
        self._context.disable_next_message_compression()

    def peer(self) -> str:
        return self._context.peer()

    def peer_identities(self) -> Iterable[bytes] | None:
        return self._context.peer_identities()

    def peer_identity_key(self) -> str | None:
        return self._context.peer_identity_key()

    def auth_context(self) -> Mapping[str, Iterable[bytes]]:
        return self._context.auth_context()

    def time_remaining(self) -> float:
        return self._context.time_remaining()

    def trailing_metadata(self) -> grpc.aio.Metadata:
        return self._context.trailing_metadata()

    def code(self) -> grpc.StatusCode:
        return self._context.code()

    def details(self) -> str:
        return self._context.details()

    def cancelled(self) -> bool:
        return self._context.cancelled()

    def done(self) -> bool:
        return self._context.done()


class RunActionsInterceptor(grpc.aio.ServerInterceptor):
    """Wraps each RunActionsService call in :meth:`wrap`; other services pass as they are.

    The wrapped handler of a method is built once and kept: what it does per call is
    decided when the call runs (the gate checks whether it is closed then), and the
    handler below it is the same for every call of the method, since every interceptor
    of the chain keeps its own. Built per call, the four interceptors' closures and
    handlers cost each call a few percent of the sidecar's CPU for nothing.
    """

    # True when the wrapped behaviour takes the request's bytes and parses them itself.
    RAW_REQUESTS: ClassVar[bool] = False

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        method = handler_call_details.method
        wrapped: dict[str, Handler] = self.__dict__.setdefault("_wrapped", {})
        found = wrapped.get(method)
        if found is not None:
            return found
        handler = await continuation(handler_call_details)
        service, _, rpc = str(method).lstrip("/").rpartition("/")
        if handler is None or handler.unary_unary is None or service != RUN_ACTIONS.full_name:
            return handler
        built: Handler = grpc.unary_unary_rpc_method_handler(
            self.wrap(rpc, handler),
            request_deserializer=None if self.RAW_REQUESTS else handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
        wrapped[method] = built
        return built

    def wrap(self, rpc: str, handler: Handler) -> Behavior:
        """The behaviour that runs around ``handler.unary_unary`` for calls of ``rpc``."""
        raise NotImplementedError


class LogContextInterceptor(RunActionsInterceptor):
    """Bind ``rpc`` and ``attempt_id`` for the life of each call."""

    def wrap(self, rpc: str, handler: Handler) -> Behavior:
        inner = behavior_of(handler)

        async def bound(request: Any, context: Context) -> Any:
            structlog.contextvars.clear_contextvars()
            structlog.contextvars.bind_contextvars(rpc=rpc)
            attempt_id = getattr(request, "attempt_id", "")
            if attempt_id:
                structlog.contextvars.bind_contextvars(attempt_id=attempt_id)
            return await inner(request, context)

        return bound


class RequestDecodingInterceptor(RunActionsInterceptor):
    """Refuse a request that does not parse with INVALID_ARGUMENT, ErrorInfo and BadRequest,
    and one larger than sidecar.ops.limits allows, unparsed, with REQUEST_TOO_LARGE.

    grpc answers a request it cannot deserialize (a string field that is not UTF-8, a
    corrupt message) with UNKNOWN and no details, which a client cannot tell from a fault of
    the sidecar. Here the handler takes the raw bytes and parses them itself, so such a
    request gets the answer every other bad input gets, naming the field where it can.
    Nothing of it reaches the ledger or the store.
    """

    RAW_REQUESTS = True

    def wrap(self, rpc: str, handler: Handler) -> Behavior:
        decode = handler.request_deserializer
        assert decode is not None, "generated handlers name their request's parser"
        inner = behavior_of(handler)
        request_type: Descriptor = RUN_ACTIONS.methods_by_name[rpc].input_type

        async def decoded(raw: bytes, context: Context) -> Any:
            error: ActonceError | None = None
            if len(raw) > limits.MAX_REQUEST_BYTES:
                error = RequestTooLarge(
                    f"the request is {len(raw)} bytes; the limit is {limits.MAX_REQUEST_BYTES}"
                )
            else:
                try:
                    request = decode(raw)
                except DecodeError as exc:
                    error = _undecodable(raw, request_type, exc)
            if error is not None:
                structlog.contextvars.clear_contextvars()
                await status.abort(context, error, rpc=rpc)
            return await inner(request, context)

        return decoded


def _undecodable(raw: bytes, request_type: Descriptor, exc: DecodeError) -> InvalidArgument:
    field = _field_not_utf8(raw, request_type)
    if field is not None:
        return InvalidArgument(field, "is not valid UTF-8")
    return InvalidArgument("request", f"is not a valid {request_type.full_name}: {exc}")


def _field_not_utf8(raw: bytes, request_type: Descriptor) -> str | None:
    """The first top-level string field whose bytes are not UTF-8, walking the wire format
    (the request types hold no strings below the top level)."""
    pos = 0
    try:
        while pos < len(raw):
            key, pos = _varint(raw, pos)
            number, wire_type = key >> 3, key & 7
            if wire_type == 0:
                _, pos = _varint(raw, pos)
            elif wire_type == 1:
                pos += 8
            elif wire_type == 5:
                pos += 4
            elif wire_type == 2:
                length, pos = _varint(raw, pos)
                chunk, pos = raw[pos : pos + length], pos + length
                field = request_type.fields_by_number.get(number)
                if field is not None and field.type == FieldDescriptor.TYPE_STRING:
                    try:
                        chunk.decode("utf-8")
                    except UnicodeDecodeError:
                        return str(field.name)
            else:
                return None
    except IndexError:  # a truncated message: no field to name
        return None
    return None


def _varint(raw: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        byte = raw[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


# -- the drain's gate --------------------------------------------------------------

# A caller that got SHUTTING_DOWN stops; this long without any call means they all have
# (an agent busy between two calls for longer finds no listener: UNAVAILABLE, RETRYABLE).
QUIET_SECONDS = 1.0
# How long a call gRPC has accepted may take to reach the gate, on a busy event loop.
SETTLE_SECONDS = 0.1
# How long the calls cut at the end of their time get to send their refusal.
CUT_SECONDS = 1.0
# Of the grace, this much (at most half of what is left after closing) is kept after the
# calls' time, so that the server goes on answering SHUTTING_DOWN after a cut until
# its callers are quiet: a quiet period and its settling, with room for late callers.
LINGER_SECONDS = 1.5

# gRFC A6: a negative pushback tells the client's retry policy not to retry this call.
_NO_TRANSPORT_RETRY = (("grpc-retry-pushback-ms", "-1"),)


class _Refusal(grpc.Status):
    def __init__(self, code: grpc.StatusCode, details: str, trailing: tuple[Any, ...]) -> None:
        self.code = code
        self.details = details
        self.trailing_metadata = trailing


def _shutting_down() -> grpc.Status:
    refusal = status.to_grpc_status(
        ShuttingDown("the sidecar is shutting down and takes no new calls; retry the run")
    )
    trailing = (*refusal.trailing_metadata, *_NO_TRANSPORT_RETRY)
    return _Refusal(refusal.code, refusal.details, trailing)


class CallGate(RunActionsInterceptor):
    """Counts RunActionsService calls in flight, and refuses new ones once closed.

    Graceful drain: once told to stop, the sidecar answers every call it receives, and never
    cancels one.

    grpc's own ``server.stop(grace)`` closes the listening socket at once, so an
    agent that calls during the grace period gets a bare connection error; and it
    drops the calls it had accepted but not yet handed to a handler (they wait in
    grpc's queue while the event loop is busy): their callers see a bare
    ``CANCELLED``, which no client can classify. Calls still running when the grace
    runs out are cancelled the same way. The gate makes the drain explicit instead:

    - once closed, every RunActionsService call gets UNAVAILABLE with ErrorInfo
      reason ``SHUTTING_DOWN`` (class RETRYABLE): the queue retries the run
      elsewhere, and derived ids make that safe. The refusal carries
      ``grpc-retry-pushback-ms: -1``, so that no client's transport retries it
      against a sidecar that is going away;
    - health and reflection calls pass, so probes see NOT_SERVING rather than an error;
    - :meth:`CallGate.wait_idle` returns when the last call in flight has answered;
    - :meth:`CallGate.cut` answers the calls still running when their time runs out
      with the same refusal, rather than letting grpc cancel them;
    - :meth:`CallGate.wait_quiet` keeps the server answering until callers have
      stopped calling (each stops at its first SHUTTING_DOWN). Only then is grpc's
      server stopped: its queue is empty, so it has nothing left to cancel.

    The quiet is waited for after a cut as well, and the grace keeps time for it
    (LINGER_SECONDS): the callers whose calls were cut, and agents that make their
    first call only then, still call. grpc's ``stop`` cancels every call it has
    accepted and not yet handed to a handler, and from then on the port refuses
    connections: without the linger, a call that arrives in the instant the server
    stops gets a bare ``CANCELLED``.
    """

    def __init__(self) -> None:
        self._running: set[asyncio.Task[Any]] = set()
        self._cut: set[asyncio.Task[Any]] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._last_arrival = 0.0
        self.closed = False
        # Calls refused SHUTTING_DOWN since the gate closed.
        self.refused = 0

    @property
    def in_flight(self) -> int:
        return len(self._running)

    def close(self) -> None:
        """Refuse every call that arrives from now on."""
        self.closed = True

    async def wait_idle(self) -> None:
        """Wait until no call is in flight (bound it with ``asyncio.timeout``)."""
        await self._idle.wait()

    async def cut(self) -> int:
        """Answer every call still running SHUTTING_DOWN now; how many there were.

        Such a call may have reached the store: a write's id is derived, so the run's
        retry finds it done, exactly as after a store deadline.
        """
        cut = list(self._running)
        self._cut.update(cut)
        for task in cut:
            task.cancel()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CUT_SECONDS):
                await self.wait_idle()
        return len(cut)

    async def wait_quiet(self, deadline: float, quiet: float = QUIET_SECONDS) -> bool:
        """Keep answering until no call has arrived for ``quiet`` seconds: True then, False
        if ``deadline`` (the event loop's clock) passed first."""
        loop = asyncio.get_running_loop()
        while True:
            now = loop.time()
            silent = now - self._last_arrival
            if silent >= quiet and not self._running:
                # A call gRPC accepted a moment ago reaches the gate a few iterations of the
                # event loop later: give it those, and go on waiting if one came.
                seen = self._last_arrival
                await asyncio.sleep(SETTLE_SECONDS)
                if self._last_arrival == seen and not self._running:
                    return True
                continue
            if now >= deadline:
                return False
            await asyncio.sleep(min(max(quiet - silent, 0.01), deadline - now))

    def wrap(self, rpc: str, handler: Handler) -> Behavior:
        inner = behavior_of(handler)

        async def gated(request: Any, context: Context) -> Any:
            self._last_arrival = asyncio.get_running_loop().time()
            # Checked when the call runs, not when its handler was looked up: a call
            # that arrived just before the gate closed is refused all the same.
            if self.closed:
                self.refused += 1
                await context.abort_with_status(_shutting_down())
            task = asyncio.current_task()
            assert task is not None
            self._running.add(task)
            self._idle.clear()
            try:
                return await inner(request, context)
            except asyncio.CancelledError:
                if task not in self._cut:
                    raise  # the caller went away: nobody is left to answer
                self._cut.discard(task)
                task.uncancel()
            finally:
                self._running.discard(task)
                if not self._running:
                    self._idle.set()
            await context.abort_with_status(_shutting_down())

        return gated
