"""RunActions' writes and reads as MCP tools: schemas, and arguments in, answers out.

A tool's arguments are the gRPC request's fields without ``attempt_id`` and
``request_id``; JSON travels as JSON values (``data``, ``value``), turned into
the JSON text that ``RunActions`` takes here and nowhere else. Every rule
(validation, derived ids, the audit) is the core's: this module only reshapes.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import mcp_types as types

from sidecar.core.actions import RunActions
from sidecar.core.types import ReadResult, WriteResult
from sidecar.errors import ActonceError, FailureClass, FieldViolation, InvalidArgument

_OUTCOMES = ["OUTCOME_APPLIED", "OUTCOME_ALREADY_APPLIED", "OUTCOME_SKIPPED"]
_NAME = {"type": "string", "minLength": 1}
_JSON_VALUE = {"description": "any JSON value (an object, an array, a string, a number...)"}

_WRITE_ANSWER: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "description": "the derived id of what the write made"},
        "outcome": {"type": "string", "enum": _OUTCOMES},
        "version": {"type": "integer"},
    },
    "required": ["id", "outcome", "version"],
}
_EDIT_ANSWER: dict[str, Any] = {
    "type": "object",
    "properties": {
        **_WRITE_ANSWER["properties"],
        "proposal_id": {"type": "string", "description": "set when the edit was proposed"},
    },
    "required": ["id", "outcome", "version", "proposal_id"],
}
_READ_ANSWER: dict[str, Any] = {
    "type": "object",
    "properties": {
        "artifact": {
            "type": "object",
            "properties": {
                "id": {"type": "string"},
                "kind": {"type": "string"},
                "version": {"type": "integer"},
                "data": _JSON_VALUE,
                "archived": {"type": "boolean"},
            },
            "required": ["id", "kind", "version", "data", "archived"],
        },
        "messages": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "kind": {"type": "string", "enum": ["notice", "message"]},
                    "text": {"type": "string"},
                },
                "required": ["id", "kind", "text"],
            },
        },
    },
}


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


_WRITE = types.ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True)
_READ = types.ToolAnnotations(read_only_hint=True, idempotent_hint=True)
_PROPOSE = {"type": "boolean", "default": False, "description": "offer it for review instead"}

TOOLS: list[types.Tool] = [
    types.Tool(
        name="create",
        description="Create an artifact (a JSON document of a kind). Made once per run: "
        "the same create on a retry answers OUTCOME_ALREADY_APPLIED.",
        input_schema=_object(
            {"kind": _NAME, "data": _JSON_VALUE, "propose": _PROPOSE}, ["kind", "data"]
        ),
        output_schema=_WRITE_ANSWER,
        annotations=_WRITE,
    ),
    types.Tool(
        name="edit",
        description="Set one value at a JSON Pointer path of an artifact (an object member "
        "is added or replaced; an array index names an existing element). Skipped when the "
        "value is already there.",
        input_schema=_object(
            {
                "artifact_id": _NAME,
                "path": {"type": "string", "description": "a JSON Pointer, e.g. /status"},
                "value": _JSON_VALUE,
                "propose": _PROPOSE,
            },
            ["artifact_id", "path", "value"],
        ),
        output_schema=_EDIT_ANSWER,
        annotations=_WRITE,
    ),
    types.Tool(
        name="notice",
        description="Post a notice to a thread: it informs, and starts no turn.",
        input_schema=_object(
            {"thread_id": _NAME, "text": {"type": "string"}}, ["thread_id", "text"]
        ),
        output_schema=_WRITE_ANSWER,
        annotations=_WRITE,
    ),
    types.Tool(
        name="create_thread",
        description="Create a thread with a title.",
        input_schema=_object({"title": _NAME}, ["title"]),
        output_schema=_WRITE_ANSWER,
        annotations=_WRITE,
    ),
    types.Tool(
        name="send",
        description="Send a message to a thread and ask for its turn (only for rules the "
        "operator allows; post a notice otherwise).",
        input_schema=_object(
            {"thread_id": _NAME, "text": {"type": "string"}}, ["thread_id", "text"]
        ),
        output_schema=_WRITE_ANSWER,
        annotations=_WRITE,
    ),
    types.Tool(
        name="read",
        description="Read an artifact (name artifact_id) or a thread's messages (name thread_id).",
        input_schema={
            "type": "object",
            "properties": {"artifact_id": _NAME, "thread_id": _NAME},
            "oneOf": [{"required": ["artifact_id"]}, {"required": ["thread_id"]}],
            "additionalProperties": False,
        },
        output_schema=_READ_ANSWER,
        annotations=_READ,
    ),
]
# The RPC each tool is, as the audit and the metrics name it.
RPC_OF = {
    "create": "Create",
    "edit": "Edit",
    "notice": "Notice",
    "create_thread": "CreateThread",
    "send": "Send",
    "read": "Read",
}


def _text(arguments: Mapping[str, Any], name: str, *, required: bool = True) -> str:
    value = arguments.get(name)
    if value is None:
        # Missing: the core says what it needs of the field.
        return ""
    if not isinstance(value, str):
        raise InvalidArgument(name, f"must be a string, not {type(value).__name__}")
    return value


def _json_text(arguments: Mapping[str, Any], name: str) -> str:
    if name not in arguments:
        raise InvalidArgument(name, "is required: give it as a JSON value")
    return json.dumps(arguments[name], ensure_ascii=False, allow_nan=False)


def _flag(arguments: Mapping[str, Any], name: str) -> bool:
    value = arguments.get(name, False)
    if not isinstance(value, bool):
        raise InvalidArgument(name, "must be true or false")
    return value


def _unexpected(arguments: Mapping[str, Any], allowed: frozenset[str]) -> None:
    for name in arguments:
        if name not in allowed:
            raise InvalidArgument(name, "is not an argument of this tool")


def _written(result: WriteResult, id: str | None = None) -> dict[str, Any]:
    return {
        "id": result.id if id is None else id,
        "outcome": result.outcome.value,
        "version": result.version,
    }


def _read(result: ReadResult) -> dict[str, Any]:
    if result.artifact is not None:
        a = result.artifact
        return {
            "artifact": {
                "id": a.id,
                "kind": a.kind,
                "version": a.version,
                "data": json.loads(a.data_json),
                "archived": a.archived,
            }
        }
    return {"messages": [{"id": m.id, "kind": m.kind, "text": m.text} for m in result.messages]}


# A tool's handler: the actions, the bound attempt, the arguments and the call's request
# identity ("" when the client gave none: then the core's repeat rule tells repeats apart).
Handler = Callable[[RunActions, str, Mapping[str, Any], str], Awaitable[dict[str, Any]]]


async def _create(
    actions: RunActions, attempt_id: str, a: Mapping[str, Any], request_id: str
) -> dict[str, Any]:
    _unexpected(a, frozenset({"kind", "data", "propose"}))
    result = await actions.create(
        attempt_id=attempt_id,
        kind=_text(a, "kind"),
        data_json=_json_text(a, "data"),
        propose=_flag(a, "propose"),
        request_id=request_id,
    )
    return _written(result)


async def _edit(
    actions: RunActions, attempt_id: str, a: Mapping[str, Any], request_id: str
) -> dict[str, Any]:
    _unexpected(a, frozenset({"artifact_id", "path", "value", "propose"}))
    artifact_id = _text(a, "artifact_id")
    result = await actions.edit(
        attempt_id=attempt_id,
        artifact_id=artifact_id,
        path=_text(a, "path"),
        value_json=_json_text(a, "value"),
        propose=_flag(a, "propose"),
        request_id=request_id,
    )
    return {**_written(result, id=artifact_id), "proposal_id": result.proposal_id}


async def _notice(
    actions: RunActions, attempt_id: str, a: Mapping[str, Any], request_id: str
) -> dict[str, Any]:
    _unexpected(a, frozenset({"thread_id", "text"}))
    result = await actions.notice(
        attempt_id=attempt_id,
        thread_id=_text(a, "thread_id"),
        text=_text(a, "text"),
        request_id=request_id,
    )
    return _written(result)


async def _send(
    actions: RunActions, attempt_id: str, a: Mapping[str, Any], request_id: str
) -> dict[str, Any]:
    _unexpected(a, frozenset({"thread_id", "text"}))
    result = await actions.send(
        attempt_id=attempt_id,
        thread_id=_text(a, "thread_id"),
        text=_text(a, "text"),
        request_id=request_id,
    )
    return _written(result)


async def _create_thread(
    actions: RunActions, attempt_id: str, a: Mapping[str, Any], request_id: str
) -> dict[str, Any]:
    _unexpected(a, frozenset({"title"}))
    result = await actions.create_thread(
        attempt_id=attempt_id, title=_text(a, "title"), request_id=request_id
    )
    return _written(result)


async def _read_tool(
    actions: RunActions, attempt_id: str, a: Mapping[str, Any], _request_id: str
) -> dict[str, Any]:
    _unexpected(a, frozenset({"artifact_id", "thread_id"}))
    if "artifact_id" in a and "thread_id" in a:
        raise InvalidArgument("target", "name an artifact_id or a thread_id, not both")
    result = await actions.read(
        attempt_id=attempt_id,
        artifact_id=_text(a, "artifact_id") if "artifact_id" in a else None,
        thread_id=_text(a, "thread_id") if "thread_id" in a else None,
    )
    return _read(result)


HANDLERS: dict[str, Handler] = {
    "create": _create,
    "edit": _edit,
    "notice": _notice,
    "create_thread": _create_thread,
    "send": _send,
    "read": _read_tool,
}


# The core names the JSON text it takes; the model gave the value as this argument.
ARGUMENT_OF = {"data_json": "data", "value_json": "value"}


def _violations(error: ActonceError) -> list[FieldViolation]:
    return [
        FieldViolation(ARGUMENT_OF.get(v.field, v.field), v.description) for v in error.violations
    ]


def refused_text(error: ActonceError) -> str:
    """The message a model reads: for REFUSED, how to correct the call."""
    if error.failure_class is FailureClass.REFUSED:
        fields = ", ".join(f"{v.field} {v.description}" for v in _violations(error))
        what = fields or error.message
        return (
            f"The call was refused ({error.reason}): {what}. Nothing was written. "
            "Correct the arguments and call the tool again."
        )
    return (
        f"{error.failure_class.value} failure ({error.reason}): {error.message}. "
        "Do not retry this call yourself; the run's harness decides what happens next."
    )


def error_result(error: ActonceError) -> types.CallToolResult:
    """Every error is a tool result with isError, its reason, its class, its metadata and,
    for bad input, the fields at fault (as gRPC's BadRequest names them)."""
    text = refused_text(error)
    said: dict[str, Any] = {
        "reason": error.reason,
        "failure_class": error.failure_class.value,
        "message": text,
    }
    if error.violations:
        said["field_violations"] = [
            {"field": v.field, "description": v.description} for v in _violations(error)
        ]
    if error.metadata:
        # What ErrorInfo's metadata carries over gRPC (ids, never payloads): a step in
        # doubt is named, for the agent's harness to park it.
        said["metadata"] = dict(error.metadata)
    return types.CallToolResult(
        content=[types.TextContent(text=text)], structured_content=said, is_error=True
    )


def ok_result(content: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=json.dumps(content, ensure_ascii=False))],
        structured_content=content,
    )
