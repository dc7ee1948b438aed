"""The MCP front's HTTP side: stateless Streamable HTTP, the attempt's binding, and
a small endpoint that begins and ends attempts for harnesses without gRPC.

Routes (all on ``--mcp-listen``):

- ``/mcp``, the attempt bound by the header ``actonce-attempt-id``; with the header
  ``actonce-scope`` too, that attempt is the delivery, and each call is made in the
  scoped attempt of that tool call's scope in the delivery (core/deliveries.py);
- ``/mcp/attempts/{attempt_id}``, for clients that cannot set headers;
- ``POST /attempts`` ``{"run_id", "rule", "checkpoint", "lease_deadline"?, "scope"?,
  "delivery_attempt_id"?}`` -> ``{"attempt_id"}`` (BeginAttempt's fields), and
  ``POST /attempts/{attempt_id}/end`` -> the counts;
- ``GET /readiness`` -> ``{"detail": [line, ...]}``: the readiness detail, a line for each
  thing the operator should fix that does not stop the front serving (an effects file's
  entry that its upstream's listing contradicts, sidecar.fronts.mcp.gateway).

The harness binds the attempt, never the model: no tool takes an attempt id. With
``--agent-capabilities``, a request without the API token goes on only when its header
``actonce-attempt-capability`` is the capability of the attempt it names (the path's, else
the header's: :func:`attempt_named`; with ``actonce-scope``, the delivery whose scoped
attempt it is made in); ``POST /attempts`` names none, and needs the token
(sidecar.ops.auth). Its answer carries the new attempt's ``capability`` then.

Every route is behind the HTTP guard (sidecar.ops.http_guard): Host and Origin, JSON on
every POST, the body's size and nesting; and served under uvicorn with deadlines and a
connection cap (sidecar.ops.http_server).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any

import mcp_types as types
import structlog
import uvicorn
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sidecar.core.actions import RunActions
from sidecar.core.audit import FRONT
from sidecar.errors import ActonceError, FailureClass, InvalidArgument, UnknownAttempt
from sidecar.fronts import operations
from sidecar.fronts.mcp import decoding, tools
from sidecar.fronts.mcp.decoding import refuse_duplicate_keys, request_identity
from sidecar.fronts.mcp.gateway import Gateway, check_arguments
from sidecar.fronts.mcp.refusals import JsonRpcRefusals
from sidecar.ops import auth, http_guard, http_server
from sidecar.ops.auth import TokenFile

if TYPE_CHECKING:
    from sidecar.ops.tracing import Tracing

log = structlog.get_logger()

ATTEMPT_HEADER = "actonce-attempt-id"
SCOPE_HEADER = "actonce-scope"
FRONT_NAME = "mcp"
# What the metrics and traces call a tool that is not listed.
UNLISTED_TOOL = "unlisted"

# (rpc, outcome or "failed", the error when failed): what the metrics count.
Recorder = Callable[[str, str, ActonceError | None], None]


def _no_record(_rpc: str, _outcome: str, _error: ActonceError | None) -> None:
    return None


class NoAttempt(ActonceError):
    """A call that names no attempt: the harness must bind one."""

    reason = "NO_ATTEMPT"
    failure_class = FailureClass.RETRYABLE


def _attempt_of(request: Any) -> str:
    path_params = getattr(request, "path_params", None) or {}
    attempt_id = path_params.get("attempt_id") or (
        request.headers.get(ATTEMPT_HEADER) if request is not None else None
    )
    if not attempt_id:
        raise NoAttempt(
            "this call names no attempt: the harness begins one (over gRPC, or POST "
            f"/attempts) and sets the header {ATTEMPT_HEADER} on /mcp, or calls "
            "/mcp/attempts/{attempt_id}"
        )
    return str(attempt_id)


# The routes that name an attempt in their path, as Starlette matches ``{attempt_id}``.
_NAMED_IN_PATH = (
    re.compile(r"/mcp/attempts/(?P<attempt_id>[^/]+)"),
    re.compile(r"/attempts/(?P<attempt_id>[^/]+)/end"),
)


def attempt_named(scope: auth.Scope) -> str:
    """The attempt an HTTP request names before it is routed, as :func:`_attempt_of` finds
    it after: its path's, else, on ``/mcp``, the header's; "" for none. An attempt
    capability must be this attempt's (sidecar.ops.auth)."""
    path = str(scope.get("path", ""))
    for route in _NAMED_IN_PATH:
        found = route.fullmatch(path)
        if found:
            return found["attempt_id"]
    if path != "/mcp":
        return ""
    headers = [v for k, v in scope.get("headers", ()) if k == ATTEMPT_HEADER.encode()]
    return headers[0].decode("latin-1") if len(headers) == 1 else ""


def _scope_of(request: Any) -> str:
    scope = request.headers.get(SCOPE_HEADER) if request is not None else None
    return str(scope or "")


class McpFront:
    """RunActions (and, with upstreams, the gateway) served as MCP tools."""

    def __init__(
        self,
        actions: RunActions,
        *,
        gateway: Gateway | None = None,
        record: Recorder = _no_record,
        policy: http_guard.RequestPolicy | None = None,
        tracing: Tracing | None = None,
        api_token: TokenFile | None = None,
        capabilities: auth.Capabilities | None = None,
    ) -> None:
        self.actions = actions
        self.gateway = gateway
        self.record = record
        self.server: Server[Any] = Server(
            "actonce",
            version="0.1.0",
            instructions="Every write lands once per run, however often the run is retried.",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        # The SDK traces each message through the process's global provider; the sidecar's
        # own spans (sidecar.ops.tracing) take its place when it traces, and nothing does
        # when it does not.
        self.server.middleware = (
            [tracing.mcp_middleware(self.tool_name)] if tracing is not None else []
        )
        # The guard checks Host and Origin on every route, /mcp too, wherever the front
        # listens; the SDK's own check, of /mcp alone, would be a second rule to keep equal.
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        self.sessions = StreamableHTTPSessionManager(
            app=self.server, stateless=True, json_response=True, security_settings=security
        )
        mcp_app = StreamableHTTPASGIApp(self.sessions)
        self.app = Starlette(
            routes=[
                # POST alone: a stateless server has nothing to push, and the SDK's GET
                # stream stays open for ever, each one a connection under the cap.
                Route("/mcp", endpoint=mcp_app, methods=["POST"]),
                Route("/mcp/attempts/{attempt_id}", endpoint=mcp_app, methods=["POST"]),
                Route("/attempts", endpoint=self._begin_attempt, methods=["POST"]),
                Route("/attempts/{attempt_id}/end", endpoint=self._end_attempt, methods=["POST"]),
                Route("/readiness", endpoint=self._readiness, methods=["GET"]),
            ],
            # Outermost first: the refusals told in JSON-RPC on /mcp (refusals.py), the
            # guard's layers, then the API token on every route when one is configured
            # (sidecar.ops.auth).
            middleware=[
                Middleware(JsonRpcRefusals),
                *http_guard.middleware(policy or http_guard.RequestPolicy()),
                *auth.middleware(api_token, capabilities, attempt_named),
            ],
            lifespan=self._lifespan,
        )

    @contextlib.asynccontextmanager
    async def _lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        async with self.sessions.run():
            yield

    # -- MCP ----------------------------------------------------------------------

    async def _list_tools(
        self, _ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        listed = list(tools.TOOLS)
        if self.gateway is not None:
            listed += await self.gateway.list_tools()
        return types.ListToolsResult(tools=listed)

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        FRONT.set(FRONT_NAME)
        name = params.name
        rpc = self.metric_name(name)
        structlog.contextvars.bind_contextvars(front=FRONT_NAME, rpc=rpc)
        try:
            attempt_id = await self._bound_attempt(ctx.request)
            request_id = request_identity(params.meta, getattr(ctx.request, "headers", None))
            if ctx.request is not None:
                refuse_duplicate_keys(await ctx.request.body())
            arguments = check_arguments(params.arguments)
            return await self._dispatch(rpc, name, attempt_id, arguments, request_id)
        except ActonceError as error:
            log.info("refused", reason=error.reason, failure_class=error.failure_class.value)
            self.record(rpc, "failed", error)
            return tools.error_result(error)

    async def _bound_attempt(self, request: Any) -> str:
        """The attempt a call is made in: the one the harness bound, or, when it names a
        tool call's scope too, the scoped attempt of that tool call in the bound delivery."""
        attempt_id = _attempt_of(request)
        scope = _scope_of(request)
        if not scope:
            return attempt_id
        return (await self.actions.scoped_attempt(attempt_id, scope)).attempt_id

    async def _dispatch(
        self, rpc: str, name: str, attempt_id: str, arguments: Mapping[str, Any], request_id: str
    ) -> types.CallToolResult:
        if tools.serves(name):
            content = await tools.call(self.actions, name, attempt_id, arguments, request_id)
            self.record(rpc, str(content.get("outcome", "ok")), None)
            return tools.ok_result(content)
        if self.gateway is not None and self.gateway.owns(name):
            called = await self.gateway.call(attempt_id, name, arguments, request_id=request_id)
            outcome = called.outcome.value if called.outcome is not None else "tool_error"
            self.record(rpc, outcome, None)
            meta = dict(called.result.meta or {})
            meta["actonce/outcome"] = outcome
            meta["actonce/step_id"] = called.step_id
            return called.result.model_copy(update={"meta": meta})
        raise InvalidArgument("name", f"no tool named {name!r}; list the tools to see them")

    def metric_name(self, tool: str) -> str:
        """The name a call is counted under: its RPC for a builtin tool, else its bounded
        name (:meth:`tool_name`)."""
        return tools.RPC_OF.get(tool) or self.tool_name(tool)

    def tool_name(self, tool: str) -> str:
        """``tool`` when it is listed (a builtin tool or an upstream's), one fixed name for
        anything else: a model's made-up names mint no metric series nor span names."""
        if tool in tools.RPC_OF:
            return tool
        if self.gateway is not None and self.gateway.is_listed(tool):
            return tool
        return UNLISTED_TOOL

    # -- attempts over plain HTTP -----------------------------------------------

    async def _begin_attempt(self, request: Request) -> Response:
        """BeginAttempt's fields from the JSON body, as the table takes them; the answer
        names the attempt."""
        FRONT.set(FRONT_NAME)
        try:
            body = await _json_body(request)
            checked = decoding.arguments(_BEGIN, body, {}, unknown=_NOT_A_FIELD)
            attempt = await _BEGIN.core(self.actions, **checked)
        except ActonceError as error:
            return _http_error(error)
        answer = {"attempt_id": attempt.attempt_id}
        if attempt.capability:
            answer["capability"] = attempt.capability
        return JSONResponse(answer)

    async def _end_attempt(self, request: Request) -> Response:
        """EndAttempt of the attempt the path names; the answer is its response, the counts."""
        FRONT.set(FRONT_NAME)
        try:
            bound = {"attempt_id": request.path_params["attempt_id"]}
            checked = decoding.arguments(_END, {}, bound, unknown=_NOT_A_FIELD)
            counts = await _END.core(self.actions, **checked)
        except ActonceError as error:
            return _http_error(error)
        return JSONResponse(tools.as_json(_END.response, _END.answer(counts)))

    async def _readiness(self, _request: Request) -> Response:
        """The readiness detail: what the operator should fix while the front serves."""
        detail = await self.gateway.readiness() if self.gateway is not None else []
        return JSONResponse({"detail": detail})


_BEGIN = operations.BY_RPC["BeginAttempt"]
_END = operations.BY_RPC["EndAttempt"]
_NOT_A_FIELD = "is not a field of this request"


async def _json_body(request: Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.body(), object_pairs_hook=_fields_once)
    except ValueError:
        raise InvalidArgument("body", "is not JSON") from None
    if not isinstance(body, dict):
        raise InvalidArgument("body", "must be a JSON object")
    return body


def _fields_once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # A field given twice is refused, as a tool's argument is: the parser would keep the last.
    fields: dict[str, Any] = {}
    for name, value in pairs:
        if name in fields:
            raise InvalidArgument(name, "is given twice")
        fields[name] = value
    return fields


_HTTP_STATUS = {
    FailureClass.REFUSED: 400,
    FailureClass.PERMANENT: 403,
    FailureClass.RETRYABLE: 503,
    FailureClass.UNKNOWN: 500,
}


def _http_error(error: ActonceError) -> Response:
    status = 404 if isinstance(error, UnknownAttempt) else _HTTP_STATUS[error.failure_class]
    return Response(
        http_guard.refusal_body(error.reason, error.failure_class, error.message),
        status_code=status,
        media_type=http_guard.JSON,
    )


class McpListener:
    """The front served by uvicorn in the sidecar's own event loop, on a socket bound early
    (so that a taken port stops start-up, and port 0 gives its number)."""

    def __init__(
        self, front: McpFront, listen: str, limits: http_server.ServingLimits | None = None
    ) -> None:
        host, _, port = listen.rpartition(":")
        host = host.strip("[]")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind((host, int(port)))
        self.socket.listen(128)
        self.socket.setblocking(False)
        self.port: int = self.socket.getsockname()[1]
        self.server = uvicorn.Server(
            http_server.server_config(front.app, limits, lifespan="on", timeout_graceful_shutdown=5)
        )
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self.server.serve(sockets=[self.socket]))
        while not self.server.started:
            if self._task.done():
                await self._task  # its failure, said
                raise RuntimeError("the MCP listener stopped as it started")
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        if self._task is None:
            self.socket.close()
            return
        self.server.should_exit = True
        with contextlib.suppress(Exception):
            await self._task
        self.socket.close()
