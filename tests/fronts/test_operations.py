"""The API's one table: every RPC of the service has an entry whose fields are its request's
and its core method's keywords, and what the MCP front lists is generated from it."""

from __future__ import annotations

import inspect
import json
import os
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sidecar.fronts import operations
from sidecar.fronts.mcp import tools
from sidecar.fronts.operations import SERVICE, TABLE, Kind, entry, written

LISTING = Path(__file__).parent / "mcp" / "tools_listing.json"
# Keywords a core method takes from the front itself, not from a request's fields.
FROM_THE_FRONT = {"within_seconds"}
# Keywords a front passes only when it has more to say than the request (the gateway's wait,
# and that it sends a step's call itself and alone settles it).
NOT_FROM_REQUESTS = {"wait_seconds", "sent_by_sidecar", "by_sidecar"}


def _keywords(core: Callable[..., Any]) -> set[str]:
    """The keywords a core method takes, ``**start: Unpack[TypedDict]`` spelled out."""
    names: set[str] = set()
    for name, parameter in inspect.signature(core).parameters.items():
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            (bundle,) = typing.get_args(typing.get_type_hints(core)[name])
            names |= set(typing.get_type_hints(bundle))
        elif name != "self":
            names.add(name)
    return names - NOT_FROM_REQUESTS


def test_the_table_has_one_entry_per_rpc_of_the_service_in_its_order() -> None:
    assert [op.rpc for op in TABLE] == [m.name for m in SERVICE.methods]


@pytest.mark.parametrize("op", TABLE, ids=[op.rpc for op in TABLE])
def test_an_entrys_fields_are_its_requests_and_its_core_methods_keywords(
    op: operations.Operation,
) -> None:
    assert [f.name for f in op.fields] == [f.name for f in op.request.fields]
    extra = FROM_THE_FRONT if op.bounded_by_caller else set()
    assert {f.parameter for f in op.fields} | extra == _keywords(op.core)


def test_an_entry_naming_a_field_its_request_lacks_is_refused_as_the_table_is_built() -> None:
    with pytest.raises(ValueError, match="'knd' is not a field of its request"):
        entry("Create", TABLE[1].core, written("id"), kinds={"knd": Kind.NAME})
    with pytest.raises(ValueError, match="'versoin' is not a field"):
        entry("Create", TABLE[1].core, written("id"), notes={"versoin": "x"})


def test_a_json_field_is_a_json_value_named_without_its_suffix() -> None:
    create = operations.BY_RPC["Create"]
    data = next(f for f in create.fields if f.name == "data_json")
    assert (data.kind, data.parameter) == (Kind.DOCUMENT, "data")
    read = operations.BY_RPC["Read"]
    assert {f.name: f.oneof for f in read.fields} == {
        "attempt_id": "",
        "artifact_id": "target",
        "thread_id": "target",
    }


def test_the_mcp_tools_are_listed_as_they_were_promised() -> None:
    """The tools' names, arguments and answers are what models were given: a change of the
    table that changes them shows here (ACTONCE_WRITE_LISTING=1 writes the new listing)."""
    listed = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools.TOOLS]
    if os.environ.get("ACTONCE_WRITE_LISTING"):
        LISTING.write_text(json.dumps(listed, indent=1, sort_keys=True) + "\n")
    assert listed == json.loads(LISTING.read_text())
