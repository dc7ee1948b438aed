"""Callers' API token: read from a file, checked in constant time, on gRPC and on HTTP.

With ``--api-token-file`` (``ACTONCE_API_TOKEN_FILE``), every call must carry
``authorization: Bearer <token>``: gRPC metadata, or an HTTP header. A call without it,
or with another token, is refused ``UNAUTHENTICATED`` before anything below sees it: no
attempt is begun, no audit event written, nothing reaches the store.

- :class:`TokenFile`: the token in a file (a Secret mount), never a flag's value (that
  shows in ``ps`` and in the pod spec). The file is looked at again at most once a
  second, and before any refusal, so that a Secret rotated in place takes effect
  without a restart; the token it held before stays good for ROTATION_OVERLAP_SECONDS,
  for the clients that read their file a moment later.
- :class:`ApiTokenInterceptor`: the gRPC side. Health stays open unless
  ``--api-token-exempt`` says otherwise (probes call it; it answers a status and nothing
  more); reflection needs the token unless the operator exempts it. The status it refuses
  with is the gRPC front's (sidecar.fronts.grpc.status), handed in by the assembly: ops
  sits below the fronts and imports none of them. A refused call is counted under its
  method's name only when the method is one this server serves: the name comes from a
  caller who has not authenticated, and each new label value would be a new series kept
  for the life of the process.
- :class:`ApiTokenMiddleware`: the HTTP side, pure ASGI, for the MCP front and the
  console. A refusal is 401 with the JSON body of the MCP front's other refusals.
- :class:`Capabilities`: with ``--agent-capabilities``, the harness holds the token and
  hands its agent one attempt's capability (``BeginAttemptResponse.capability``). The rule,
  for both fronts, is :meth:`Capabilities.admits`: a call without the token is let in only
  when it carries, in ``actonce-attempt-capability``, the capability of the attempt it
  names (:func:`attempt_named`). An unscoped BeginAttempt names none: beginning a run, or
  fencing it, stays the token's alone. A capability that is not the named attempt's is
  refused CAPABILITY_REFUSED (PERMISSION_DENIED, 403) before the request reaches the core;
  a call with neither is refused as before. A refusal changes nothing; like the token's, it
  is logged and counted, not audited: a forged capability names no attempt to audit under.

Presented tokens are compared with :func:`hmac.compare_digest`, which takes as long
whatever the mismatch, so that timing gives away no prefix of the token.
"""

from __future__ import annotations

import base64
import hmac
import json
import os
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Never

import grpc
import structlog
from actonce_api.v1 import run_actions_pb2
from google.protobuf.message import DecodeError
from google.protobuf.message_factory import GetMessageClass
from grpc_health.v1 import health_pb2
from prometheus_client import Counter

from sidecar import defaults
from sidecar.errors import ActonceError, CapabilityRefused, Unauthenticated
from sidecar.ops.security import SecuritySettingError, read_token

if TYPE_CHECKING:
    # Starlette comes with the HTTP fronts' extras (mcp, console); the gRPC server that
    # imports this module serves without them.
    from starlette.middleware import Middleware

log = structlog.get_logger()

HEADER = "authorization"
SCHEME = "bearer"
# Where a call carries the capability of the attempt it names: gRPC metadata, HTTP header.
CAPABILITY_HEADER = "actonce-attempt-capability"
# How often the file is looked at while presented tokens match; a mismatch looks at once.
RECHECK_SECONDS = 1.0
# How long the token a file held before stays good once the file holds a new one.
ROTATION_OVERLAP_SECONDS = 10.0

# --api-token-exempt names services by these words, not by their full names.
EXEMPTABLE: dict[str, frozenset[str]] = {
    "health": frozenset({"grpc.health.v1.Health"}),
    "reflection": frozenset(
        {"grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"}
    ),
}
DEFAULT_EXEMPT: frozenset[str] = defaults.API_TOKEN_EXEMPT

# The label a refused call of a method this server does not serve is counted under: one
# value, whatever name the caller made up.
UNKNOWN_RPC = "unknown"
# Of a made-up method's name, what a log line keeps.
LOGGED_METHOD_CHARS = 120


def _served_rpcs() -> frozenset[str]:
    """Every method path this sidecar's gRPC server serves: the API, health, reflection."""
    api = run_actions_pb2.DESCRIPTOR.services_by_name["RunActionsService"]
    health = health_pb2.DESCRIPTOR.services_by_name["Health"]
    paths = {f"/{api.full_name}/{m.name}" for m in api.methods}
    paths |= {f"/{health.full_name}/{m.name}" for m in health.methods}
    paths |= {f"/{name}/ServerReflectionInfo" for name in EXEMPTABLE["reflection"]}
    return frozenset(paths)


SERVED_RPCS = _served_rpcs()


def rpc_label(method: str) -> str:
    """The ``rpc`` label of a call of ``method`` (its full path): the method's own name
    when this server serves it, else :data:`UNKNOWN_RPC`."""
    return method.rpartition("/")[2] if method in SERVED_RPCS else UNKNOWN_RPC


MESSAGE = (
    "this sidecar needs its API token: send 'authorization: Bearer <token>' "
    "(clients read ACTONCE_API_TOKEN_FILE or ACTONCE_API_TOKEN)"
)
MESSAGE_WITH_CAPABILITIES = (
    f"{MESSAGE}, or, for the calls of one attempt, that attempt's capability in "
    "'actonce-attempt-capability'"
)
# A token was sent, and it is not this sidecar's: another fix than sending none.
WRONG_TOKEN = (
    "the API token this call carries is not this sidecar's: the client's "
    "(ACTONCE_API_TOKEN_FILE or ACTONCE_API_TOKEN) must be the one the sidecar reads from "
    "--api-token-file; after a rotation the old one is taken for a few seconds only"
)


def parse_exempt(text: str) -> frozenset[str]:
    """``health,reflection`` (the default), either one, or ``none``."""
    words = frozenset(word.strip() for word in text.split(",") if word.strip())
    if words == {"none"}:
        return frozenset()
    unknown = sorted(words - EXEMPTABLE.keys())
    if unknown or not words:
        raise ValueError(f"expected a comma-separated choice of {', '.join(EXEMPTABLE)}, or none")
    return words


def exempt_services(words: Iterable[str]) -> frozenset[str]:
    """The full gRPC service names that ``words`` (of :data:`EXEMPTABLE`) leave open."""
    return frozenset(name for word in words for name in EXEMPTABLE[word])


# -- the token -------------------------------------------------------------------


@dataclass(frozen=True)
class _Seen:
    """What identifies one version of the file: a Secret's update swaps in a new file."""

    inode: int
    device: int
    mtime_ns: int
    size: int


def _seen(path: Path) -> _Seen:
    stat = os.stat(path)
    return _Seen(stat.st_ino, stat.st_dev, stat.st_mtime_ns, stat.st_size)


class TokenFile:
    """The API token in ``path``, followed as the file changes.

    Raises :class:`SecuritySettingError` (an OSError: start-up stops with one line) when
    the file cannot be read, is empty, or holds what no header can carry. Once started, a
    file that cannot be read, or that holds no usable token, leaves the last token in
    force and says so in the log: a Secret caught in the middle of an update must not
    lock every caller out.
    """

    def __init__(self, path: Path, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self._clock = clock
        self._seen = _seen(path)
        self._token = self._read()
        self._previous: bytes | None = None
        self._previous_until = 0.0
        self._next_check = clock() + RECHECK_SECONDS

    def _read(self) -> bytes:
        return read_token(self.path, "the API token file").encode("ascii")

    def __repr__(self) -> str:  # never the token itself
        return f"TokenFile({str(self.path)!r})"

    def matches(self, presented: bytes | None) -> bool:
        """Whether ``presented`` is the token (or, just after a rotation, the one before)."""
        now = self._clock()
        if now >= self._next_check:
            self._follow(now)
        if presented is None:
            return False
        if self._accepts(presented, now):
            return True
        # The caller may already hold a token the file got since it was last looked at.
        return self._follow(now) and self._accepts(presented, now)

    def fingerprint(self, key: bytes) -> str:
        """The token now in force, as an HMAC under ``key``: what a console session signed
        in with it keeps, so that a rotation ends the session (and the cookie, which a
        browser's owner can read, gives away nothing to guess the token from)."""
        now = self._clock()
        if now >= self._next_check:
            self._follow(now)
        return hmac.new(key, self._token, "sha256").hexdigest()

    def sign(self, message: bytes) -> bytes:
        """``message``'s HMAC-SHA256 under the token in force."""
        now = self._clock()
        if now >= self._next_check:
            self._follow(now)
        return hmac.new(self._token, message, "sha256").digest()

    def signed(self, message: bytes, mac: bytes) -> bool:
        """Whether ``mac`` is ``message``'s HMAC under the token in force (or, just after a
        rotation, the one before), compared in constant time."""
        now = self._clock()
        if now >= self._next_check:
            self._follow(now)
        if self._signs(message, mac, now):
            return True
        return self._follow(now) and self._signs(message, mac, now)

    def _signs(self, message: bytes, mac: bytes, now: float) -> bool:
        keys = [self._token]
        if self._previous is not None and now < self._previous_until:
            keys.append(self._previous)
        return any(
            hmac.compare_digest(hmac.new(key, message, "sha256").digest(), mac) for key in keys
        )

    def _accepts(self, presented: bytes, now: float) -> bool:
        if hmac.compare_digest(presented, self._token):
            return True
        previous = self._previous
        return (
            previous is not None
            and now < self._previous_until
            and (hmac.compare_digest(presented, previous))
        )

    def _follow(self, now: float) -> bool:
        """Read the file again if it changed; whether the token did."""
        self._next_check = now + RECHECK_SECONDS
        try:
            seen = _seen(self.path)
            if seen == self._seen:
                return False
            token = self._read()
        except OSError as exc:  # SecuritySettingError too: the last token stays in force
            log.warning("api_token_file_unusable", path=str(self.path), error=str(exc))
            return False
        self._seen = seen
        if hmac.compare_digest(token, self._token):
            return False
        self._previous, self._previous_until = self._token, now + ROTATION_OVERLAP_SECONDS
        self._token = token
        log.info("api_token_rotated", path=str(self.path))
        return True


def load(path: Path | None) -> TokenFile | None:
    """The API token of ``--api-token-file``; None when none is configured."""
    return TokenFile(path) if path is not None else None


def bearer(values: Iterable[str | bytes]) -> bytes | None:
    """The token of the one ``Bearer`` credential among ``values``; None for none, or for
    more than one (which of two a proxy added cannot be told)."""
    found = [v.encode("utf-8", "replace") if isinstance(v, str) else v for v in values]
    if len(found) != 1:
        return None
    scheme, _, token = found[0].partition(b" ")
    if scheme.lower() != SCHEME.encode() or not token:
        return None
    return token


# -- attempt capabilities ----------------------------------------------------------

# A capability's form: this prefix, the attempt's id, and the MAC of the id. Clients never
# read it; the prefix names the form, so that another can follow it.
CAPABILITY_FORM = "acap1"
_CAPABILITY_DOMAIN = b"actonce-attempt-capability/1\x00"

CAPABILITY_REFUSED = (
    "this call carries no API token, and its actonce-attempt-capability is not the "
    "capability of the attempt it names: an agent's capability reaches its own attempt "
    "alone (and begins only that delivery's scoped attempts); beginning or fencing a run "
    "needs the API token"
)


def attempt_named(rpc: str, field: Callable[[str], str]) -> str:
    """The attempt a RunActionsService call ``rpc`` names, as a capability must match it
    (``field`` reads the request's field by name): its ``attempt_id``; for BeginAttempt, the
    delivery a scoped attempt names, and none for an unscoped one, which begins a run or
    fences it. A scoped attempt of its own delivery stays within the run: the delivery
    must be the run's newest (sidecar.core.deliveries, and the ledger's fence)."""
    if rpc == "BeginAttempt":
        return field("delivery_attempt_id") if field("scope") else ""
    return field("attempt_id")


class Capabilities:
    """Attempt capabilities: an HMAC-SHA256 of the attempt's id under the API token.

    Why the token is the key: a capability must hold after the sidecar restarts (the
    attempt is then UNKNOWN_ATTEMPT, as it should be, not a refusal) and across the
    sidecars that share a ledger and a token (a scoped attempt may begin on another
    sidecar than its delivery), so a key of the process's own would not do. A key kept
    in the ledger would give it to every holder of a ledger DSN, who could then act as any
    agent; a key file of its own would be a second Secret to mount and rotate. The token is
    already the secret only the harness holds, and rotating it revokes every capability
    issued under it (after the overlap a rotation allows), as it ends the console's
    sessions. The MAC is bound to the attempt's id, which names one run, rule and scope
    for the attempt's life; its lease and its end are the attempt's own: a write past the
    lease is refused LEASE_EXPIRED, an ended attempt's calls UNKNOWN_ATTEMPT. It has no
    expiry of its own: a delivery's capability still begins scoped attempts of that
    delivery once the sidecar no longer knows it (docs/security.md says what that leaves).
    """

    def __init__(self, token: TokenFile) -> None:
        self._token = token

    def issue(self, attempt_id: str) -> str:
        """The capability of ``attempt_id``."""
        mac = self._token.sign(_CAPABILITY_DOMAIN + attempt_id.encode())
        encoded = base64.urlsafe_b64encode(mac).rstrip(b"=").decode("ascii")
        return f"{CAPABILITY_FORM}.{attempt_id}.{encoded}"

    def holder(self, presented: bytes | None) -> str | None:
        """The attempt ``presented`` is the capability of; None when it is none."""
        try:
            form, attempt_id, encoded = (presented or b"").decode("ascii").split(".")
            # Strict: a capability has one spelling, unpadded (urlsafe_b64decode skips junk).
            if "=" in encoded:
                raise ValueError("padded")
            padded = encoded + "=" * (-len(encoded) % 4)
            mac = base64.b64decode(padded, altchars=b"-_", validate=True)
        except ValueError:  # not ASCII, not three parts, not base64
            return None
        if form != CAPABILITY_FORM or not attempt_id:
            return None
        return (
            attempt_id
            if self._token.signed(_CAPABILITY_DOMAIN + attempt_id.encode(), mac)
            else None
        )

    def admits(self, presented: bytes | None, named: str) -> bool:
        """The rule: a call without the token goes on only when ``presented`` is the
        capability of ``named``, the attempt the call names (:func:`attempt_named`)."""
        return bool(named) and self.holder(presented) == named


def capability(values: Iterable[str | bytes]) -> bytes | None:
    """The one capability among ``values``; None for none, or for more than one."""
    found = [v.encode("utf-8", "replace") if isinstance(v, str) else v for v in values]
    return found[0] if len(found) == 1 else None


# -- gRPC ------------------------------------------------------------------------


class _Refusal(grpc.Status):
    def __init__(self, status: grpc.Status) -> None:
        self.code = status.code
        self.details = status.details
        self.trailing_metadata = status.trailing_metadata


def _api_requests() -> dict[str, tuple[str, Any]]:
    """Each RunActionsService method's path: its name and its request's message class."""
    api = run_actions_pb2.DESCRIPTOR.services_by_name["RunActionsService"]
    return {
        f"/{api.full_name}/{m.name}": (m.name, GetMessageClass(m.input_type)) for m in api.methods
    }


API_REQUESTS = _api_requests()


class ApiTokenInterceptor(grpc.aio.ServerInterceptor):
    """Refuse every call without the token, but those of ``exempt`` services and, with
    ``capabilities``, the API calls that carry the capability of the attempt they name.

    It decides on each call's metadata before the handler is even looked up, and a
    refused call gets a handler that answers without reading the request: an
    unauthenticated caller's message is never parsed, nor is one that carries no valid
    capability. A call whose capability is valid is let in to be judged on the attempt its
    request names (:meth:`_judged`). It stands outside every interceptor that keeps the
    handlers it wraps (sidecar.fronts.grpc.interceptors), so that none of them keeps this
    decision for later calls.
    """

    def __init__(
        self,
        token: TokenFile,
        *,
        refusal: Callable[[ActonceError], grpc.Status],
        exempt: Collection[str] = exempt_services(DEFAULT_EXEMPT),
        # Told the refused call's rpc label (rpc_label): never a name the caller chose.
        on_refused: Callable[[str, ActonceError], None] = lambda _rpc, _error: None,
        capabilities: Capabilities | None = None,
    ) -> None:
        self._token = token
        self._exempt = frozenset(exempt)
        self._on_refused = on_refused
        self._capabilities = capabilities
        message = MESSAGE if capabilities is None else MESSAGE_WITH_CAPABILITIES
        self._unauthenticated = Unauthenticated(message)
        self._wrong_token = Unauthenticated(WRONG_TOKEN)
        self._not_capable = CapabilityRefused(CAPABILITY_REFUSED)
        errors = (self._unauthenticated, self._wrong_token, self._not_capable)
        self._statuses = {error: _Refusal(refusal(error)) for error in errors}
        # Of the request-streaming kind whatever the method's, so that nothing is read.
        self._refuse: dict[ActonceError, grpc.RpcMethodHandler[Any, Any]] = {
            error: grpc.stream_unary_rpc_method_handler(self._answer(status))
            for error, status in self._statuses.items()
        }

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        method = str(handler_call_details.method)
        service = method.lstrip("/").rpartition("/")[0]
        metadata = handler_call_details.invocation_metadata or ()
        token = bearer(v for k, v in metadata if k == HEADER)
        if service in self._exempt or self._token.matches(token):
            return await continuation(handler_call_details)
        presented = capability(v for k, v in metadata if k == CAPABILITY_HEADER)
        if self._capabilities is None or presented is None:
            missing = token is None
            return self._refused(method, self._unauthenticated if missing else self._wrong_token)
        holder = self._capabilities.holder(presented)
        handler = (
            await continuation(handler_call_details)
            if holder is not None and method in API_REQUESTS
            else None
        )
        if holder is None or handler is None or handler.unary_unary is None:
            return self._refused(method, self._not_capable)
        return self._judged(method, presented, handler)

    def _judged(
        self, method: str, presented: bytes, handler: grpc.RpcMethodHandler[Any, Any]
    ) -> grpc.RpcMethodHandler[Any, Any]:
        """``handler``, run only when its request names the attempt ``presented`` is the
        capability of (:meth:`Capabilities.admits`).

        The handler may take the request's bytes (an interceptor below parses them with
        its own limits): they are parsed here too, and a request that does not parse
        names no attempt, and is refused."""
        rpc, request_class = API_REQUESTS[method]
        inner: Any = handler.unary_unary
        assert self._capabilities is not None
        capabilities = self._capabilities

        async def judged(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            try:
                message = (
                    request_class.FromString(request) if isinstance(request, bytes) else request
                )
                named = attempt_named(rpc, lambda name: str(getattr(message, name)))
            except DecodeError:  # a request that does not parse names no attempt
                named = ""
            if not capabilities.admits(presented, named):
                self._refused(method, self._not_capable)
                await context.abort_with_status(self._statuses[self._not_capable])
            return await inner(request, context)

        return grpc.unary_unary_rpc_method_handler(
            judged,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def _refused(self, method: str, error: ActonceError) -> grpc.RpcMethodHandler[Any, Any]:
        structlog.contextvars.clear_contextvars()
        label = rpc_label(method)
        unknown = {} if label != UNKNOWN_RPC else {"method": method[:LOGGED_METHOD_CHARS]}
        log.info(
            "refused",
            rpc=label,
            reason=error.reason,
            failure_class=error.failure_class.value,
            **unknown,
        )
        self._on_refused(label, error)
        return self._refuse[error]

    @staticmethod
    def _answer(
        status: grpc.Status,
    ) -> Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[Never]]:
        async def answer(_requests: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Never:
            await context.abort_with_status(status)
            raise AssertionError("abort_with_status returns only by raising")

        return answer


# -- HTTP (ASGI) -----------------------------------------------------------------

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

REFUSAL_BODY = json.dumps(
    {
        "reason": Unauthenticated.reason,
        "failure_class": Unauthenticated.failure_class.value,
        "message": MESSAGE,
    }
).encode()


WRONG_TOKEN_BODY = json.dumps(
    {
        "reason": Unauthenticated.reason,
        "failure_class": Unauthenticated.failure_class.value,
        "message": WRONG_TOKEN,
    }
).encode()


CAPABILITY_REFUSAL_BODY = json.dumps(
    {
        "reason": CapabilityRefused.reason,
        "failure_class": CapabilityRefused.failure_class.value,
        "message": CAPABILITY_REFUSED,
    }
).encode()


async def refuse_http(scope: Scope, _receive: Receive, send: Send) -> None:
    """401 with the JSON body every refusal of the MCP front has: a request with no token
    is told to send one, a request with another token that it is not this sidecar's."""
    body = REFUSAL_BODY if http_bearer(scope) is None else WRONG_TOKEN_BODY
    await _refuse(scope, send, 401, body)


async def refuse_capability(scope: Scope, _receive: Receive, send: Send) -> None:
    """403, CAPABILITY_REFUSED: a capability that is not the named attempt's."""
    await _refuse(scope, send, 403, CAPABILITY_REFUSAL_BODY)


async def _refuse(scope: Scope, send: Send, status: int, body: bytes) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008})
        return
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b'Bearer realm="actonce"'),
                (b"cache-control", b"no-store"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def http_bearer(scope: Scope) -> bytes | None:
    """The Bearer token of an HTTP request's one ``authorization`` header."""
    return bearer(v for k, v in scope.get("headers", ()) if k == HEADER.encode())


def http_capability(scope: Scope) -> bytes | None:
    """The capability of an HTTP request's one ``actonce-attempt-capability`` header."""
    return capability(v for k, v in scope.get("headers", ()) if k == CAPABILITY_HEADER.encode())


class ApiTokenMiddleware:
    """Pass only requests that carry the token, or that ``admit`` lets in, to ``app``.

    ``exempt`` says which paths need no token at all; ``admit`` another way in that the
    app knows (the console's signed-in session); ``refuse`` answers the rest
    (:func:`refuse_http` unless given). Lifespan events pass untouched.
    """

    def __init__(
        self,
        app: ASGIApp,
        token: TokenFile,
        *,
        exempt: Callable[[str], bool] = lambda _path: False,
        admit: Callable[[Scope], bool] = lambda _scope: False,
        refuse: ASGIApp = refuse_http,
    ) -> None:
        self.app = app
        self.token = token
        self.exempt = exempt
        self.admit = admit
        self.refuse = refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or self.allowed(scope):
            await self.app(scope, receive, send)
            return
        await self.refuse(scope, receive, send)

    def allowed(self, scope: Scope) -> bool:
        return (
            self.exempt(str(scope.get("path", "")))
            or self.token.matches(http_bearer(scope))
            or self.admit(scope)
        )


def interceptors(
    token: TokenFile | None,
    exempt: Iterable[str] = DEFAULT_EXEMPT,
    *,
    refusal: Callable[[ActonceError], grpc.Status],
    refusals: Counter | None = None,
    capabilities: Capabilities | None = None,
) -> list[grpc.aio.ServerInterceptor]:
    """The gRPC server's interceptor for ``token``, none when no token is configured: a
    refused call ends with ``refusal`` of its error (the gRPC front's status table), each
    one counted in ``refusals`` (the metrics' counter by RPC, reason and class); with
    ``capabilities``, an attempt's capability lets in that attempt's calls."""
    if token is None:
        return []

    def counted(rpc: str, error: ActonceError) -> None:
        if refusals is not None:
            refusals.labels(rpc, error.reason, error.failure_class.value).inc()

    return [
        ApiTokenInterceptor(
            token,
            refusal=refusal,
            exempt=exempt_services(exempt),
            on_refused=counted,
            capabilities=capabilities,
        )
    ]


def middleware(
    token: TokenFile | None,
    capabilities: Capabilities | None = None,
    attempt_of: Callable[[Scope], str] = lambda _scope: "",
) -> list[Middleware]:
    """A Starlette app's middleware for ``token``; none when no token is configured. With
    ``capabilities``, a request without the token that carries the capability of the
    attempt ``attempt_of`` finds it naming goes on too."""
    from starlette.middleware import Middleware

    if token is None:
        return []
    if capabilities is None:
        return [Middleware(ApiTokenMiddleware, token=token)]

    def admit(scope: Scope) -> bool:
        return capabilities.admits(http_capability(scope), attempt_of(scope))

    def refuse(scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        refused = refuse_capability if http_capability(scope) is not None else refuse_http
        return refused(scope, receive, send)

    return [Middleware(ApiTokenMiddleware, token=token, admit=admit, refuse=refuse)]


__all__ = [
    "CAPABILITY_HEADER",
    "DEFAULT_EXEMPT",
    "HEADER",
    "UNKNOWN_RPC",
    "ApiTokenInterceptor",
    "ApiTokenMiddleware",
    "Capabilities",
    "SecuritySettingError",
    "TokenFile",
    "attempt_named",
    "bearer",
    "exempt_services",
    "interceptors",
    "load",
    "middleware",
    "parse_exempt",
    "refuse_http",
    "rpc_label",
]
