"""The API declared once: one entry per RPC of ``actonce.v1.RunActionsService``.

An entry names its RPC; the proto descriptors give the rest of its shape: the
request's fields, their order, their wire types and oneofs, the response's fields.
The entry adds what a descriptor cannot say:

- the kind of a field whose rules are more than its wire type (a name that must
  not be empty, a JSON object), and what a schema says of it (proto comments are
  not in the runtime descriptors);
- the core method the call is, and how the core's answer fills the response;
- for a call the MCP front serves, its tool: name and description.

Both fronts are generic adapters of this table. The gRPC servicer
(sidecar.fronts.grpc.servicer) reads each field from the request message by its
kind and builds the response message by its descriptor; the MCP front
(sidecar.fronts.mcp.tools) reads each field from a tool's JSON arguments by the
same kind, answers in JSON, and generates each tool's schemas from the entry. A
field's rules (lengths, pointers, the attempt's) are the core's; the table decides
how each field is taken, so both fronts take it alike. A builtin call's effect is
sidecar.rules.effects'.

Adding an RPC is the proto, the core method, and one entry here
(docs/architecture.md, "Adding an RPC").
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from actonce_api.v1 import run_actions_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor

from sidecar.core.actions import RunActions
from sidecar.core.types import ReadResult
from sidecar.rules.effects import BUILTIN_EFFECTS, ToolEffect

SERVICE = run_actions_pb2.DESCRIPTOR.services_by_name["RunActionsService"]

# Fields a front fills from the call's binding rather than from a tool's arguments: the
# harness binds the attempt, never the model, and a call's request identity is its own.
BOUND = frozenset({"attempt_id", "request_id"})

# A response's fields, by name, before a front encodes them: strings, numbers, an
# Outcome, a datetime, and records (or lists of them) for message fields.
Answer = dict[str, Any]


class Kind(enum.Enum):
    """How a request field is taken: what its value is, on each front."""

    TEXT = "text"  # a string, as given (the core checks what it must be)
    OPTIONAL_TEXT = "optional_text"  # a string the caller may leave out: "" when not given
    NAME = "name"  # a string that must not be empty: an id, a kind, a title
    JSON = "json"  # any JSON value: UTF-8 JSON text on gRPC, the value itself on MCP
    DOCUMENT = "document"  # a JSON object: an artifact's data
    FLAG = "flag"  # true or false; false when not given
    EFFECT = "effect"  # a ToolEffect, by its number
    TIMESTAMP = "timestamp"  # a Timestamp on gRPC, RFC 3339 text on JSON; None when unset


@dataclass(frozen=True)
class Field:
    """One request field, as the core takes it."""

    name: str  # the proto field's name
    kind: Kind
    # The core method's keyword, and a JSON front's name for it: the proto name, but
    # "*_json" text is a JSON value there, named without the suffix ("data").
    parameter: str
    oneof: str = ""  # the oneof it is a member of: absent, it is None
    required: bool = False  # refused when unset (a message field proto3 may leave unset)
    note: str = ""  # what a schema says of it

    @property
    def bound(self) -> bool:
        return self.name in BOUND


@dataclass(frozen=True)
class Tool:
    """A call the MCP front serves as a tool."""

    name: str
    description: str
    # The field, of the response or else of the request, that the tool's answer names
    # ``id`` (an edit answers the artifact it edited).
    answer_id: str = "id"


@dataclass(frozen=True)
class Operation:
    """One RPC: its descriptor, its fields, the core method it is, and its answer."""

    method: MethodDescriptor
    fields: tuple[Field, ...]
    core: Callable[..., Awaitable[Any]]
    answer: Callable[[Any], Answer]
    tool: Tool | None = None
    # Response fields' notes, by name ("messages.kind" for a field of a nested message): a
    # description, or the JSON Schema keywords that say more than the wire type.
    notes: Mapping[str, str | Mapping[str, Any]] = field(default_factory=dict)
    # The core method takes ``within_seconds``: how long the caller waits for the answer.
    bounded_by_caller: bool = False

    @property
    def rpc(self) -> str:
        return str(self.method.name)

    @property
    def request(self) -> Descriptor:
        return self.method.input_type

    @property
    def response(self) -> Descriptor:
        return self.method.output_type

    @property
    def effect(self) -> ToolEffect | None:
        """The builtin call's effect (sidecar.rules.effects); None for the attempt's and the
        steps' own calls."""
        return BUILTIN_EFFECTS.get(self.rpc)

    @property
    def writes(self) -> bool:
        """Whether it answers as a write does: with an outcome."""
        return "outcome" in self.response.fields_by_name


# -- answers ----------------------------------------------------------------------------


def by_name(**renamed: str) -> Callable[[Descriptor], Callable[[Any], Answer]]:
    """An answer whose every field is the core result's attribute of the same name, or
    of the name ``renamed`` gives it (``id_scheme_version="id_scheme"``)."""

    def build(response: Descriptor) -> Callable[[Any], Answer]:
        pairs = [(f.name, renamed.get(f.name, f.name)) for f in response.fields]

        def answer(result: Any) -> Answer:
            return {name: getattr(result, attribute) for name, attribute in pairs}

        return answer

    return build


def written(id_field: str = "") -> Callable[[Descriptor], Callable[[Any], Answer]]:
    """A write's answer (a WriteResult): the response's ``id_field`` is the result's id,
    every other field the result's attribute of its name."""
    return by_name(**{id_field: "id"}) if id_field else by_name()


def _read(result: ReadResult) -> Answer:
    if result.artifact is not None:
        return {"artifact": result.artifact}
    return {"messages": list(result.messages)}


def _lease(in_force: datetime) -> Answer:
    return {"lease_deadline": in_force}


def as_is(answer: Callable[[Any], Answer]) -> Callable[[Descriptor], Callable[[Any], Answer]]:
    """An answer written out, for a result whose shape is not the response's."""
    return lambda _response: answer


# -- entries ----------------------------------------------------------------------------

_TIMESTAMP = "google.protobuf.Timestamp"
_TOOL_EFFECT = "actonce.v1.ToolEffect"


def _default_kind(descriptor: FieldDescriptor) -> Kind:
    """A field's kind from its wire type, when the entry names none."""
    if descriptor.type == FieldDescriptor.TYPE_STRING:
        return Kind.JSON if descriptor.name.endswith("_json") else Kind.TEXT
    if descriptor.type == FieldDescriptor.TYPE_BOOL:
        return Kind.FLAG
    enum_type = descriptor.enum_type
    if enum_type is not None and enum_type.full_name == _TOOL_EFFECT:
        return Kind.EFFECT
    if descriptor.message_type is not None and descriptor.message_type.full_name == _TIMESTAMP:
        return Kind.TIMESTAMP
    raise TypeError(f"{descriptor.full_name}: the table has no kind for this field's type")


def _field(
    descriptor: FieldDescriptor, kinds: Mapping[str, Kind], note: str, required: bool
) -> Field:
    oneof = descriptor.containing_oneof
    return Field(
        name=descriptor.name,
        kind=kinds.get(descriptor.name) or _default_kind(descriptor),
        parameter=descriptor.name.removesuffix("_json"),
        oneof=oneof.name if oneof is not None else "",
        required=required,
        note=note,
    )


def entry(
    rpc: str,
    core: Callable[..., Awaitable[Any]],
    answer: Callable[[Descriptor], Callable[[Any], Answer]],
    *,
    kinds: Mapping[str, Kind] | None = None,
    notes: Mapping[str, str | Mapping[str, Any]] | None = None,
    required: tuple[str, ...] = (),
    tool: Tool | None = None,
    bounded_by_caller: bool = False,
) -> Operation:
    """The operation ``rpc`` of the service, its fields read from its descriptor.

    ``kinds`` and ``required`` name fields of the request, ``notes`` fields of the request
    or the response; a name that is neither is refused here, as the table is built.
    """
    method = SERVICE.methods_by_name[rpc]
    kinds, notes = kinds or {}, notes or {}
    request = method.input_type.fields_by_name
    response = method.output_type.fields_by_name
    for name in [*kinds, *required]:
        if name not in request:
            raise ValueError(f"{rpc}: {name!r} is not a field of its request")
    for name in notes:
        if name not in request and name.partition(".")[0] not in response:
            raise ValueError(f"{rpc}: {name!r} is not a field of its request or response")
    fields = tuple(
        _field(f, kinds, str(notes.get(f.name, "")), f.name in required)
        for f in method.input_type.fields
    )
    return Operation(
        method=method,
        fields=fields,
        core=core,
        answer=answer(method.output_type),
        tool=tool,
        notes={name: note for name, note in notes.items() if name not in request},
        bounded_by_caller=bounded_by_caller,
    )


_PROPOSE = "offer it for review instead"
# What a schema says of a key the caller chooses (sidecar.rules.ids, docs/derived-ids.md).
_KEY = (
    "optional, 1 to 255 bytes: a key you choose that names this write in the run, so that "
    "a retry whose data differs (a timestamp, a uuid) is the same write; the same key with "
    "other data in one attempt is refused KEY_REUSED"
)

TABLE: tuple[Operation, ...] = (
    entry(
        "BeginAttempt",
        RunActions.begin_attempt,
        by_name(id_scheme_version="id_scheme"),
        kinds={"run_id": Kind.NAME, "rule": Kind.NAME},
    ),
    entry(
        "Create",
        RunActions.create,
        written("id"),
        kinds={"kind": Kind.NAME, "data_json": Kind.DOCUMENT, "key": Kind.OPTIONAL_TEXT},
        notes={"propose": _PROPOSE, "key": _KEY},
        tool=Tool(
            "create",
            "Create an artifact (a JSON document of a kind). Made once per run: the same "
            "create on a retry answers OUTCOME_ALREADY_APPLIED. Data that differs on a retry "
            "(a timestamp, a uuid) is another artifact, unless you name the create by a key.",
        ),
    ),
    entry(
        "Edit",
        RunActions.edit,
        written(),
        kinds={"artifact_id": Kind.NAME},
        notes={
            "path": "a JSON Pointer, e.g. /status",
            "propose": _PROPOSE,
            "proposal_id": "set when the edit was proposed",
        },
        tool=Tool(
            "edit",
            "Set one value at a JSON Pointer path of an artifact (an object member is added "
            "or replaced; an array index names an existing element). Skipped when the value "
            "is already there.",
            answer_id="artifact_id",
        ),
    ),
    entry(
        "Notice",
        RunActions.notice,
        written("message_id"),
        kinds={"thread_id": Kind.NAME},
        tool=Tool(
            "notice",
            "Post a notice to a thread: it informs, and starts no turn.",
            answer_id="message_id",
        ),
    ),
    entry(
        "CreateThread",
        RunActions.create_thread,
        written("thread_id"),
        kinds={"title": Kind.NAME, "key": Kind.OPTIONAL_TEXT},
        notes={"key": _KEY},
        tool=Tool("create_thread", "Create a thread with a title.", answer_id="thread_id"),
    ),
    entry(
        "Send",
        RunActions.send,
        written("message_id"),
        kinds={"thread_id": Kind.NAME},
        tool=Tool(
            "send",
            "Send a message to a thread and ask for its turn (only for rules the operator "
            "allows; post a notice otherwise).",
            answer_id="message_id",
        ),
    ),
    entry(
        "Read",
        RunActions.read,
        as_is(_read),
        kinds={"artifact_id": Kind.NAME, "thread_id": Kind.NAME},
        notes={"messages.kind": {"enum": ["notice", "message"]}},
        tool=Tool(
            "read",
            "Read an artifact (name artifact_id) or a thread's messages (name thread_id).",
        ),
    ),
    entry("EndAttempt", RunActions.end_attempt, by_name()),
    entry("ExtendLease", RunActions.extend_lease, as_is(_lease), required=("lease_deadline",)),
    entry(
        "BeginStep",
        RunActions.begin_step,
        written("step_id"),
        kinds={"tool": Kind.NAME, "key": Kind.OPTIONAL_TEXT},
        notes={"key": _KEY},
        bounded_by_caller=True,
    ),
    entry("EndStep", RunActions.end_step, written(), kinds={"step_id": Kind.NAME}),
    entry("AbortStep", RunActions.abort_step, written(), kinds={"step_id": Kind.NAME}),
)

BY_RPC: Mapping[str, Operation] = {op.rpc: op for op in TABLE}
TOOLS: Mapping[str, Operation] = {op.tool.name: op for op in TABLE if op.tool is not None}
