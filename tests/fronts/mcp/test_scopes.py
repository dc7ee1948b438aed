"""A tool call's scope over MCP: the header ``actonce-scope``, beside ``actonce-attempt-id``
naming the delivery, through the gateway in front of a real MCP server (payments).

MCP carries no tool call id, so the harness says which tool call a call belongs to: the
front makes each call in the scoped attempt of that tool call in the delivery, begun on
its first call. Two tool calls that make the same charge make two charges; a redelivery
whose tool calls keep their ids finds each charge made; a stale delivery's call is fenced
before the upstream is called.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MakeConfig
from tests.fronts.mcp.clients import _call, begin_over_http
from tests.fronts.mcp.test_gateway import serve
from tests.fronts.mcp.upstream import Payments

EFFECTS = {"payments__charge": "TOOL_EFFECT_NON_IDEMPOTENT_WRITE"}
ANN = {"customer": "ann", "cents": 500}


@pytest.fixture
def payments() -> Iterator[Payments]:
    upstream = Payments().start()
    try:
        yield upstream
    finally:
        upstream.stop()


def call_in_scope(url: str, delivery: str, scope: str, arguments: dict[str, Any]) -> Any:
    headers = {"actonce-attempt-id": delivery, "actonce-scope": scope}
    (answer,) = asyncio.run(_call(url, headers, [("payments__charge", arguments)]))
    return answer


def test_each_tool_call_is_its_own_scope_and_a_redelivery_finds_its_charges(
    make_config: MakeConfig, tmp_path: Path, payments: Payments
) -> None:
    sidecar, base = serve(make_config(tmp_path / "data"), tmp_path, payments, EFFECTS, "one")
    url = base + "/mcp"
    try:
        first = begin_over_http(base, "run-scopes", rule="billing", checkpoint="")
        # Two tool calls of one model turn charge Ann the same: two charges, neither lost.
        one = call_in_scope(url, first, "call-1", ANN)
        two = call_in_scope(url, first, "call-2", ANN)
        assert [one.meta["actonce/outcome"], two.meta["actonce/outcome"]] == [
            "OUTCOME_APPLIED", "OUTCOME_APPLIED",
        ]  # fmt: skip
        assert one.meta["actonce/step_id"] != two.meta["actonce/step_id"]
        assert payments.runs["ann:500"] == 2

        # The queue delivers the job again; its tool calls keep their ids (a checkpointer,
        # or durable model turns): each charge is found, none is made again.
        second = begin_over_http(base, "run-scopes", rule="billing", checkpoint="")
        again = [call_in_scope(url, second, scope, ANN) for scope in ("call-2", "call-1")]
        assert [a.meta["actonce/outcome"] for a in again] == ["OUTCOME_ALREADY_APPLIED"] * 2
        assert {a.meta["actonce/step_id"] for a in again} == {
            one.meta["actonce/step_id"], two.meta["actonce/step_id"],
        }  # fmt: skip

        # The stale delivery's next tool call is fenced before the upstream is called.
        stale = call_in_scope(url, first, "call-3", {"customer": "bob", "cents": 700})
        assert stale.is_error
        assert stale.structured_content["reason"] == "ATTEMPT_FENCED"
        assert payments.runs == {"ann:500": 2}
    finally:
        sidecar.stop()


def test_a_scope_names_a_delivery_this_sidecar_began(
    make_config: MakeConfig, tmp_path: Path, payments: Payments
) -> None:
    sidecar, base = serve(make_config(tmp_path / "data"), tmp_path, payments, EFFECTS, "one")
    try:
        unknown = call_in_scope(base + "/mcp", "att_unknown", "call-1", ANN)
        assert unknown.is_error
        assert unknown.structured_content["reason"] == "UNKNOWN_ATTEMPT"
        assert payments.runs == {}
    finally:
        sidecar.stop()
