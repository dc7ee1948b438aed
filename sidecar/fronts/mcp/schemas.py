"""The MCP tools as listed, generated from the API's table (sidecar.fronts.operations).

A tool is an entry the MCP front serves. Its input schema is its request's fields but
those the harness binds, each by its kind (a ``*_json`` field is a JSON value named
without the suffix), its oneofs as ``oneOf``; its output schema is its response's
fields: a write's answer is always ``id``, ``outcome`` and ``version`` (and the
response's other fields), any other answer the response itself, its JSON text as JSON
values. Its annotations follow the call's effect (sidecar.rules.effects).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import mcp_types as types
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from sidecar.fronts.operations import Field, Kind, Operation
from sidecar.rules.effects import ToolEffect

JSON_VALUE: dict[str, Any] = {
    "description": "any JSON value (an object, an array, a string, a number...)"
}
_BY_KIND: dict[Kind, dict[str, Any]] = {
    Kind.TEXT: {"type": "string"},
    Kind.OPTIONAL_TEXT: {"type": "string"},
    Kind.NAME: {"type": "string", "minLength": 1},
    Kind.JSON: JSON_VALUE,
    Kind.DOCUMENT: JSON_VALUE,
    Kind.FLAG: {"type": "boolean", "default": False},
    Kind.EFFECT: {"type": "integer"},
    Kind.TIMESTAMP: {"type": "string", "format": "date-time"},
}
# Kinds with a value when not given: never required.
_OPTIONAL = frozenset({Kind.OPTIONAL_TEXT, Kind.FLAG, Kind.EFFECT, Kind.TIMESTAMP})

_ANNOTATIONS = {
    ToolEffect.READ_ONLY: types.ToolAnnotations(read_only_hint=True, idempotent_hint=True),
    ToolEffect.IDEMPOTENT_WRITE: types.ToolAnnotations(
        read_only_hint=False, destructive_hint=False, idempotent_hint=True
    ),
}
_NOT_IDEMPOTENT = types.ToolAnnotations(read_only_hint=False, idempotent_hint=False)

_WRITE_ID = {"type": "string", "description": "the derived id of what the write made"}


def tool(op: Operation) -> types.Tool:
    """``op`` as the MCP front lists it."""
    assert op.tool is not None, f"{op.rpc} is not served as a tool"
    return types.Tool(
        name=op.tool.name,
        description=op.tool.description,
        input_schema=input_schema(op),
        output_schema=output_schema(op),
        annotations=_ANNOTATIONS.get(op.effect or ToolEffect.UNSPECIFIED, _NOT_IDEMPOTENT),
    )


# -- arguments ------------------------------------------------------------------------


def input_schema(op: Operation) -> dict[str, Any]:
    taken = [f for f in op.fields if not f.bound]
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {f.parameter: _argument(f) for f in taken},
    }
    required = [f.parameter for f in taken if _required(f)]
    if required:
        schema["required"] = required
    oneofs: dict[str, list[str]] = {}
    for f in taken:
        if f.oneof:
            oneofs.setdefault(f.oneof, []).append(f.parameter)
    for members in oneofs.values():
        schema["oneOf"] = [{"required": [name]} for name in members]
    schema["additionalProperties"] = False
    return schema


def _argument(f: Field) -> dict[str, Any]:
    return _noted(_BY_KIND[f.kind], f.note)


def _required(f: Field) -> bool:
    return f.required or not (f.oneof or f.kind in _OPTIONAL)


# -- answers --------------------------------------------------------------------------


def output_schema(op: Operation) -> dict[str, Any]:
    if not op.writes:
        return _message(op.response, op.notes, prefix="", required=False)
    assert op.tool is not None
    shown = {"id": _WRITE_ID, "outcome": None, "version": {"type": "integer"}}
    properties: dict[str, Any] = {}
    for name, fixed in shown.items():
        described = op.response.fields_by_name.get(name)
        properties[name] = fixed or _answer_field(described, op.notes, "")
    for f in op.response.fields:
        if f.name not in shown and f.name != op.tool.answer_id:
            properties[json_key(f)] = _answer_field(f, op.notes, "")
    return {"type": "object", "properties": properties, "required": list(properties)}


def json_key(f: FieldDescriptor) -> str:
    """A response field's name in a JSON answer: JSON text there is a JSON value."""
    return f.name.removesuffix("_json") if is_json_text(f) else f.name


def is_json_text(f: FieldDescriptor) -> bool:
    return f.type == FieldDescriptor.TYPE_STRING and f.name.endswith("_json")


def _message(
    descriptor: Descriptor, notes: Mapping[str, Any], *, prefix: str, required: bool
) -> dict[str, Any]:
    properties = {json_key(f): _answer_field(f, notes, prefix) for f in descriptor.fields}
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(properties)
    return schema


def _answer_field(f: FieldDescriptor | None, notes: Mapping[str, Any], prefix: str) -> Any:
    assert f is not None, "a write's answer has an outcome"
    note = notes.get(prefix + f.name, "")
    return _noted(_wire_schema(f, notes, prefix), note)


def _wire_schema(f: FieldDescriptor, notes: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    if f.message_type is not None:
        if f.message_type.full_name == "google.protobuf.Timestamp":
            return _BY_KIND[Kind.TIMESTAMP]
        nested = _message(f.message_type, notes, prefix=f"{prefix}{f.name}.", required=True)
        return {"type": "array", "items": nested} if f.is_repeated else nested
    if f.enum_type is not None:
        return {"type": "string", "enum": [v.name for v in f.enum_type.values if v.number]}
    if is_json_text(f):
        return JSON_VALUE
    if f.type == FieldDescriptor.TYPE_BOOL:
        return {"type": "boolean"}
    if f.type == FieldDescriptor.TYPE_STRING:
        return {"type": "string"}
    return {"type": "integer"}


def _noted(schema: Mapping[str, Any], note: str | Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` with what the table notes of its field: a description, or keywords."""
    if not note:
        return dict(schema)
    if isinstance(note, str):
        return {**schema, "description": note}
    return {**schema, **note}
