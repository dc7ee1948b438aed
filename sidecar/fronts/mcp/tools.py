"""RunActions' writes and reads as MCP tools: the API's table (sidecar.fronts.operations)
over MCP.

A tool is an entry of the table with a tool name; it is listed with the schemas
generated from it (sidecar.fronts.mcp.schemas), its arguments are taken by the
table's kinds (sidecar.fronts.mcp.decoding), and the core's answer is given in JSON:
a write's as ``id``, ``outcome`` and ``version`` (with its response's other fields),
a read's as its response, JSON text as JSON values. Every rule (validation, derived
ids, the audit) is the core's: this module only reshapes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import mcp_types as types
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from sidecar.core.actions import RunActions
from sidecar.errors import ActonceError, FailureClass
from sidecar.fronts import operations
from sidecar.fronts.mcp import decoding, schemas
from sidecar.fronts.operations import Answer, Operation

TOOLS: list[types.Tool] = [schemas.tool(op) for op in operations.TOOLS.values()]
# The RPC each tool is, as the audit and the metrics name it.
RPC_OF: Mapping[str, str] = {name: op.rpc for name, op in operations.TOOLS.items()}


def serves(name: str) -> bool:
    return name in operations.TOOLS


async def call(
    actions: RunActions, name: str, attempt_id: str, given: Mapping[str, Any], request_id: str
) -> dict[str, Any]:
    """Call the tool ``name`` in the bound attempt, with the call's request identity ("" when
    the client gave none: then the core's repeat rule tells repeats apart)."""
    op = operations.TOOLS[name]
    bound = {"attempt_id": attempt_id, "request_id": request_id}
    checked = decoding.arguments(op, given, bound)
    result = await op.core(actions, **checked)
    return answer(op, op.answer(result), checked)


# -- answers ----------------------------------------------------------------------------


def answer(op: Operation, response: Answer, checked: Mapping[str, Any]) -> dict[str, Any]:
    """The tool's JSON answer, from the response's fields and the arguments it took."""
    if not op.writes:
        return as_json(op.response, response)
    assert op.tool is not None
    named = op.tool.answer_id
    content: dict[str, Any] = {
        "id": response[named] if named in response else checked[named],
        "outcome": str(response["outcome"]),
        "version": response.get("version", 0),
    }
    rest = {k: v for k, v in response.items() if k not in content and k != named}
    content.update(as_json(op.response, rest))
    return content


def as_json(descriptor: Descriptor, values: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of ``values`` that ``descriptor`` has, as JSON."""
    return {
        schemas.json_key(f): _json_value(f, values[f.name])
        for f in descriptor.fields
        if f.name in values
    }


def _record(descriptor: Descriptor, record: Any) -> dict[str, Any]:
    return {schemas.json_key(f): _json_value(f, getattr(record, f.name)) for f in descriptor.fields}


def _json_value(f: FieldDescriptor, value: Any) -> Any:
    if f.message_type is not None:
        if f.message_type.full_name == "google.protobuf.Timestamp":
            return value.isoformat()
        if f.is_repeated:
            return [_record(f.message_type, item) for item in value]
        return _record(f.message_type, value)
    if f.enum_type is not None:
        return str(value)
    if schemas.is_json_text(f):
        return json.loads(value) if value else None
    return value


# -- results ----------------------------------------------------------------------------


def refused_text(error: ActonceError) -> str:
    """The message a model reads: for REFUSED, how to correct the call."""
    if error.failure_class is FailureClass.REFUSED:
        fields = ", ".join(f"{v.field} {v.description}" for v in error.violations)
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
    for bad input, the fields at fault (as gRPC's BadRequest names them, a JSON value by its
    argument)."""
    text = refused_text(error)
    said: dict[str, Any] = {
        "reason": error.reason,
        "failure_class": error.failure_class.value,
        "message": text,
    }
    if error.violations:
        said["field_violations"] = [
            {"field": v.field, "description": v.description} for v in error.violations
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
