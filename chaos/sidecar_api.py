"""Blocking calls to the sidecars' RunActionsService, and a failed call as the agent reads it.

A call of an attempt goes to the sidecar its BeginAttempt went to. A failed call is decoded
into its status and the ErrorInfo the sidecar attaches (``failure_of``); whether the queue
may begin a new attempt after it is ``Failure.retryable``. ``Api.give_up`` makes a call as a
caller that gives up on it (:class:`CallerFault`): with a deadline of a few milliseconds,
cancelled mid-way, or with its connection closed under it.
"""

from __future__ import annotations

import enum
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Generic, TypeVar, cast

import grpc
from google.protobuf.message import Message
from google.rpc import error_details_pb2
from grpc_status import rpc_status

SERVICE = "actonce.v1.RunActionsService"
# How long the agent waits for one answer: far above any healthy call, so that only a
# stuck sidecar runs into it.
CALL_TIMEOUT_SECONDS = 15.0


# Transport failures with no ErrorInfo that mean "the sidecar is not there": retry the run.
_TRANSPORT_RETRYABLE = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
}

R = TypeVar("R", bound=Message)

_CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 500),
]


class CallerFault(enum.StrEnum):
    """How a caller gives up on a call, or calls again (counted by kind in the summary)."""

    DEADLINE = "deadline"  # a deadline of a few milliseconds, then a repeat
    CANCEL = "cancel"  # the call cancelled mid-way, then a repeat
    RESET = "reset"  # the call's connection closed under it, then a repeat
    TWIN = "twin"  # two calls at once with one request_id
    REPEAT = "repeat"  # a repeat with the same request_id after a failure the sidecar answered
    OVERLAP = "overlap"  # a second attempt of the run begun while the first still works
    GIVE_UP = "give_up"  # a gateway charge given up on, then repeated with its identity


@dataclass(frozen=True)
class Failure:
    """A failed call as the agent sees it: its status and, if any, its ErrorInfo."""

    code: str
    reason: str
    failure_class: str
    message: str
    metadata: dict[str, str]

    @property
    def retryable(self) -> bool:
        if self.reason:
            return self.failure_class == "RETRYABLE"
        return self.code in {c.name for c in _TRANSPORT_RETRYABLE}

    def __str__(self) -> str:
        return f"{self.code} {self.reason or '(no ErrorInfo)'}/{self.failure_class}: {self.message}"


def failure_of(error: grpc.RpcError) -> Failure:
    """Decode a failed call: status code, and the ErrorInfo the sidecar attaches."""
    call = cast(grpc.Call, error)
    code = call.code()
    status = rpc_status.from_call(call)
    if status is not None:
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                return Failure(
                    code.name,
                    info.reason,
                    info.metadata.get("failure_class", ""),
                    status.message,
                    dict(info.metadata),
                )
    return Failure(code.name, "", "", call.details() or "", {})


class AttemptFailed(Exception):
    """A call of the attempt failed; the attempt is over. ``lease_lapsed``: its begin was
    refused for a lease already past when it arrived (the sidecar was frozen longer than the
    lease while the begin waited), as a queue's lease runs out before its worker starts."""

    def __init__(self, failure: Failure, *, lease_lapsed: bool = False) -> None:
        super().__init__(str(failure))
        self.failure = failure
        self.lease_lapsed = lease_lapsed


@dataclass(frozen=True)
class Method(Generic[R]):
    """One RPC of the service, called as an agent calls it: on the sidecar its attempt went
    to, or on the one ``sidecar`` pins (BeginAttempt, which has no attempt yet)."""

    name: str
    response: type[R]
    api: Api
    sidecar: int | None = None

    def on(self, sidecar: int) -> Method[R]:
        return replace(self, sidecar=sidecar)

    def sidecar_for(self, request: Message) -> int:
        return self.sidecar if self.sidecar is not None else self.api.sidecar_of(request)

    def call(self, request: Message) -> grpc.UnaryUnaryMultiCallable[Message, Message]:
        """The callable of the sidecar ``request`` goes to."""
        return self.api.callable(self.sidecar_for(request), self.name, self.response)

    def __call__(self, request: Message) -> R:
        return cast(R, self.call(request)(request, timeout=CALL_TIMEOUT_SECONDS))


class Api:
    """Blocking calls to the RunActionsService of one sidecar or several sharing a ledger
    and a store; a call of an attempt goes to the sidecar its BeginAttempt went to."""

    def __init__(self, target: str | Sequence[str]) -> None:
        self.targets = [target] if isinstance(target, str) else list(target)
        self.target = self.targets[0]
        # Short reconnect backoff: after a restart the agent should find the sidecar at once,
        # not after gRPC's default backoff of up to two minutes.
        self.channels = [grpc.insecure_channel(t, options=_CHANNEL_OPTIONS) for t in self.targets]
        self.channel = self.channels[0]
        self._callables: dict[tuple[int, str], grpc.UnaryUnaryMultiCallable[Message, Message]] = {}
        self._routes: dict[str, int] = {}
        self._lock = threading.Lock()

    def method(self, name: str, response: type[R]) -> Method[R]:
        return Method(name, response, self)

    def route(self, attempt_id: str, sidecar: int) -> None:
        """Send the calls of ``attempt_id`` to sidecar number ``sidecar``."""
        with self._lock:
            self._routes[attempt_id] = sidecar

    def sidecar_of(self, request: Message) -> int:
        """The sidecar a request goes to: its attempt's (every request but BeginAttempt's
        names its attempt)."""
        with self._lock:
            return self._routes.get(getattr(request, "attempt_id", ""), 0)

    def callable(
        self, sidecar: int, name: str, response: type[Message]
    ) -> grpc.UnaryUnaryMultiCallable[Message, Message]:
        with self._lock:
            key = (sidecar, name)
            if key not in self._callables:
                self._callables[key] = self._callable(self.channels[sidecar], name, response)
            return self._callables[key]

    @staticmethod
    def _callable(
        channel: grpc.Channel, name: str, response: type[Message]
    ) -> grpc.UnaryUnaryMultiCallable[Message, Message]:
        return channel.unary_unary(
            f"/{SERVICE}/{name}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=response.FromString,
        )

    def give_up(
        self, method: Method[R], request: Message, fault: CallerFault, rng: random.Random
    ) -> R:
        """Make the call as a caller that gives up on it: its answer if one came in time,
        else the grpc.RpcError (or grpc.FutureCancelledError) the caller saw."""
        if fault is CallerFault.DEADLINE:
            return cast(R, method.call(request)(request, timeout=rng.uniform(0.001, 0.060)))
        if fault is CallerFault.CANCEL:
            future = method.call(request).future(request, timeout=CALL_TIMEOUT_SECONDS)
            time.sleep(rng.uniform(0.0, 0.040))
            future.cancel()
            return cast(R, future.result())
        # RESET: a connection of its own, closed while the call is in flight.
        target = self.targets[method.sidecar_for(request)]
        channel = grpc.insecure_channel(target, options=_CHANNEL_OPTIONS)
        try:
            call = self._callable(channel, method.name, method.response)
            future = call.future(request, timeout=CALL_TIMEOUT_SECONDS)
            time.sleep(rng.uniform(0.0, 0.040))
        finally:
            channel.close()
        return cast(R, future.result())

    def close(self) -> None:
        for channel in self.channels:
            channel.close()
