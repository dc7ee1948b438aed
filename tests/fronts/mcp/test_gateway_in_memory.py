"""The gateway's behaviour, in seconds: the gateway itself over the core, its upstream the MCP
SDK's own server reached through an in-memory transport (the gateway's ``transports`` seam,
as httpx's MockTransport), and the core's in-memory ledger and store (tests/core/fakes.py).

What needs a real network or a real process (a refused port, a reset connection, a sidecar
killed mid-call) stays in the other test_gateway_*.py files, which spawn them.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx2
import pytest
from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

from sidecar.core.actions import RunActions
from sidecar.core.types import Outcome
from sidecar.errors import ActonceError
from sidecar.fronts.mcp.gateway import ANSWER_LIMIT_BYTES, Gateway
from sidecar.fronts.mcp.settings import ToolSpec, Upstream
from sidecar.ledger.base import Phase
from sidecar.rules.canonical import JsonValue
from sidecar.rules.effects import ToolEffect
from tests.core.fakes import MemoryLedger, MemoryStore, run_actions

WRITE = ToolEffect.NON_IDEMPOTENT_WRITE
EFFECTS = {
    "payments__charge": ToolSpec(WRITE),
    "payments__charge_keyed": ToolSpec(WRITE, key_argument="idempotency_key"),
    "payments__charge_unkeyed": ToolSpec(WRITE, key_argument="no_such_argument"),
    "payments__decline": ToolSpec(WRITE),
    "payments__send_mail": ToolSpec(WRITE, errors_mean_nothing_happened=True),
    "payments__large": ToolSpec(ToolEffect.READ_ONLY),
    "payments__slow": ToolSpec(WRITE),
    "payments__hold": ToolSpec(WRITE),
    "payments__balance": ToolSpec(ToolEffect.READ_ONLY),
}


@dataclass
class Payments:
    """The upstream, made with the MCP SDK's server: what each tool was called with."""

    calls: Counter[str] = field(default_factory=Counter)
    keys: list[str] = field(default_factory=list)
    # hold(): set once it charged, and what lets it answer.
    holding: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    def server(self) -> MCPServer:
        server = MCPServer("payments")

        @server.tool(annotations=ToolAnnotations(idempotent_hint=True, read_only_hint=False))
        async def charge(customer: str, cents: int) -> dict[str, Any]:
            """Charge a customer (hinting, wrongly, that it is idempotent)."""
            self.calls["charge"] += 1
            return {"charge_id": f"ch_{customer}_{cents}_{self.calls['charge']}"}

        @server.tool()
        async def charge_keyed(customer: str, cents: int, idempotency_key: str) -> dict[str, Any]:
            """Charge a customer once per key."""
            self.calls["charge_keyed"] += 1
            self.keys.append(idempotency_key)
            return {"charge_id": f"ch_{idempotency_key}"}

        @server.tool()
        async def charge_unkeyed(customer: str) -> dict[str, Any]:
            """A charge whose listing takes no key the effects file names."""
            self.calls["charge_unkeyed"] += 1
            return {"customer": customer}

        @server.tool()
        async def decline(customer: str) -> dict[str, Any]:
            """A charge the bank declines: an error answer."""
            self.calls["decline"] += 1
            raise ValueError(f"card of {customer} declined")

        @server.tool()
        async def send_mail(to: str) -> dict[str, Any]:
            """A mail the server refuses before sending: its errors mean nothing happened."""
            self.calls["send_mail"] += 1
            if self.calls["send_mail"] == 1:
                raise ValueError("mailbox busy, nothing sent")
            return {"sent": to}

        @server.tool(annotations=ToolAnnotations(read_only_hint=True))
        async def large() -> str:
            """An answer past the gateway's limit."""
            return "x" * (ANSWER_LIMIT_BYTES + 1)

        @server.tool()
        async def slow() -> dict[str, Any]:
            """A call that outlasts the gateway's deadline."""
            self.calls["slow"] += 1
            await asyncio.sleep(30)
            return {}

        @server.tool()
        async def hold(customer: str) -> dict[str, Any]:
            """A charge that answers only once the test lets it."""
            self.calls["hold"] += 1
            self.holding.set()
            await self.release.wait()
            return {"charged": customer}

        @server.tool(annotations=ToolAnnotations(read_only_hint=True))
        async def balance(customer: str) -> dict[str, Any]:
            """A customer's balance."""
            self.calls["balance"] += 1
            return {"customer": customer, "cents": 100}

        return server


@dataclass
class World:
    """A gateway over in-memory fakes, and its upstream."""

    gateway: Gateway
    actions: RunActions
    ledger: MemoryLedger
    payments: Payments

    async def begin(self, run_id: str = "run-1") -> str:
        attempt = await self.actions.begin_attempt(
            run_id=run_id, rule="billing", checkpoint="cp-0", lease_deadline=None
        )
        return attempt.attempt_id

    async def refused(self, attempt_id: str, tool: str, arguments: dict[str, Any]) -> str:
        with pytest.raises(ActonceError) as caught:
            await self.gateway.call(attempt_id, tool, arguments)
        return caught.value.reason

    def phases(self) -> list[str]:
        """The phases of the steps' events, in order."""
        return [e.event.phase for e in self.ledger.events if e.event.phase.startswith("step")]


Transport = Callable[[httpx2.AsyncBaseTransport], httpx2.AsyncBaseTransport]


@asynccontextmanager
async def world(
    *, deadline_seconds: float = 10.0, transport: Transport = lambda served: served
) -> AsyncIterator[World]:
    payments = Payments()
    server = payments.server()
    app = server.streamable_http_app(stateless_http=True, json_response=True)
    ledger = MemoryLedger()
    actions = run_actions(ledger, MemoryStore())
    served = transport(httpx2.ASGITransport(app=app))
    gateway = Gateway(
        actions,
        [Upstream("payments", "http://127.0.0.1:9/mcp")],
        EFFECTS,
        timeout_seconds=deadline_seconds,
        transports={"payments": served},
    )
    async with server.session_manager.run():
        yield World(gateway, actions, ledger, payments)


def run(test: Callable[[], Any]) -> None:
    asyncio.run(asyncio.wait_for(test(), 30))


def test_tools_are_listed_under_their_upstreams_name_with_the_operators_effect() -> None:
    async def test() -> None:
        async with world() as w:
            listed = {tool.name: tool for tool in await w.gateway.list_tools()}
            assert {"payments__charge", "payments__balance"} <= set(listed)
            description = listed["payments__charge"].description or ""
            assert "NON_IDEMPOTENT_WRITE" in description  # the file's word, not the hint
            assert "idempotency_key" not in listed["payments__charge_keyed"].input_schema.get(
                "properties", {}
            )  # the gateway fills it

    run(test)


def test_a_charge_runs_once_and_a_later_attempt_gets_its_recorded_result() -> None:
    async def test() -> None:
        async with world() as w:
            first = await w.gateway.call(
                await w.begin(), "payments__charge", {"customer": "ann", "cents": 500}
            )
            assert first.outcome is Outcome.APPLIED
            again = await w.gateway.call(
                await w.begin(), "payments__charge", {"customer": "ann", "cents": 500}
            )
            assert again.outcome is Outcome.ALREADY_APPLIED
            assert again.step_id == first.step_id
            assert again.result.structured_content == first.result.structured_content
            assert w.payments.calls["charge"] == 1

    run(test)


def test_a_read_only_tool_is_called_every_time() -> None:
    async def test() -> None:
        async with world() as w:
            attempt = await w.begin()
            for _ in range(2):
                await w.gateway.call(attempt, "payments__balance", {"customer": "ann"})
            assert w.payments.calls["balance"] == 2

    run(test)


def test_a_keyed_tool_gets_its_step_id_as_its_key_on_every_attempt() -> None:
    async def test() -> None:
        async with world() as w:
            called = await w.gateway.call(
                await w.begin(), "payments__charge_keyed", {"customer": "bo", "cents": 7}
            )
            assert w.payments.keys == [called.step_id]

    run(test)


def test_a_key_the_upstreams_listing_does_not_take_is_a_finding_and_no_key() -> None:
    async def test() -> None:
        async with world() as w:
            await w.gateway.list_tools()
            assert [f.tool for f in w.gateway.findings()] == ["payments__charge_unkeyed"]
            assert not w.gateway.spec_of("payments__charge_unkeyed").keyed
            await w.gateway.call(await w.begin(), "payments__charge_unkeyed", {"customer": "c"})
            assert w.payments.calls["charge_unkeyed"] == 1

    run(test)


def test_an_error_answer_is_an_error_and_leaves_the_step_unended() -> None:
    async def test() -> None:
        async with world() as w:
            called = await w.gateway.call(await w.begin(), "payments__decline", {"customer": "d"})
            assert called.outcome is None and called.result.is_error
            assert Phase.STEP_END not in w.phases()
            # It may have acted: the next attempt's call is in doubt, not sent again.
            reason = await w.refused(await w.begin(), "payments__decline", {"customer": "d"})
            assert reason == "IN_DOUBT"
            assert w.payments.calls["decline"] == 1

    run(test)


def test_an_error_that_means_nothing_happened_lets_the_call_be_sent_again() -> None:
    async def test() -> None:
        async with world() as w:
            refused = await w.gateway.call(await w.begin(), "payments__send_mail", {"to": "e"})
            assert refused.result.is_error
            sent = await w.gateway.call(await w.begin(), "payments__send_mail", {"to": "e"})
            assert sent.outcome is Outcome.APPLIED
            assert w.payments.calls["send_mail"] == 2

    run(test)


@dataclass
class _Refusing(httpx2.AsyncBaseTransport):
    """The upstream, until ``refuse`` is set: then every connection is refused."""

    served: httpx2.AsyncBaseTransport
    refuse: bool = False

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if self.refuse:
            raise httpx2.ConnectError("connection refused", request=request)
        return await self.served.handle_async_request(request)


def test_an_upstream_that_cannot_be_reached_is_not_sent_to_and_may_be_retried() -> None:
    async def test() -> None:
        async with world(transport=_Refusing) as w:
            await w.gateway.list_tools()  # listed while it answered
            transport = w.gateway.transports["payments"]
            assert isinstance(transport, _Refusing)
            transport.refuse = True
            charge = {"customer": "f", "cents": 1}
            reason = await w.refused(await w.begin(), "payments__charge", charge)
            assert reason == "UPSTREAM_UNAVAILABLE"
            assert w.payments.calls["charge"] == 0
            assert w.phases()[-1] == Phase.STEP_ABORT  # not sent: the step is aborted
            transport.refuse = False
            sent = await w.gateway.call(await w.begin(), "payments__charge", charge)
            assert sent.outcome is Outcome.APPLIED
            assert w.payments.calls["charge"] == 1

    run(test)


@dataclass
class _ResetOnCall(httpx2.AsyncBaseTransport):
    """Passes every request to the upstream, then drops the answer to a tools/call: sent,
    and no answer came back."""

    served: httpx2.AsyncBaseTransport
    seen: Mapping[str, int] = field(default_factory=dict)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        answer = await self.served.handle_async_request(request)
        if b'"tools/call"' in request.content:
            raise httpx2.ReadError("connection reset by peer", request=request)
        return answer


def test_a_call_sent_without_an_answer_is_in_doubt_and_never_sent_again() -> None:
    async def test() -> None:
        async with world(transport=_ResetOnCall) as w:
            reason = await w.refused(
                await w.begin(), "payments__charge", {"customer": "g", "cents": 1}
            )
            assert reason == "UPSTREAM_FAILED"
            assert w.payments.calls["charge"] == 1
            again = await w.refused(
                await w.begin(), "payments__charge", {"customer": "g", "cents": 1}
            )
            assert again == "IN_DOUBT"
            assert w.payments.calls["charge"] == 1

    run(test)


def test_an_answer_past_the_limit_is_refused_unread() -> None:
    async def test() -> None:
        async with world() as w:
            reason = await w.refused(await w.begin(), "payments__large", {})
            assert reason == "UPSTREAM_FAILED"

    run(test)


def test_a_call_past_its_deadline_was_sent_and_has_no_answer() -> None:
    async def test() -> None:
        async with world(deadline_seconds=0.5) as w:
            reason = await w.refused(await w.begin(), "payments__slow", {})
            assert reason == "UPSTREAM_FAILED"
            assert w.payments.calls["slow"] == 1

    run(test)


def test_a_call_under_way_is_settled_by_the_gateway_alone() -> None:
    """The agent's own AbortStep or EndStep of a gateway call still under way (its step id
    derived as docs/derived-ids.md says) is refused and records nothing: aborted, the call
    that charged would be sent again by the next try; only its answer says how it ended."""

    async def test() -> None:
        async with world() as w:
            attempt = await w.begin()
            arguments = {"customer": "hal"}
            call = asyncio.ensure_future(w.gateway.call(attempt, "payments__hold", arguments))
            await w.payments.holding.wait()
            (step_id,) = {
                e.event.derived_id for e in w.ledger.events if e.event.phase == Phase.STEP_PERMIT
            }
            before = w.phases()
            with pytest.raises(ActonceError) as aborted:
                await w.actions.abort_step(
                    attempt_id=attempt, step_id=step_id, reason="nothing happened", request_id=""
                )
            with pytest.raises(ActonceError) as ended:
                await w.actions.end_step(
                    attempt_id=attempt,
                    step_id=step_id,
                    result=JsonValue.of({"forged": True}, "result_json"),
                    request_id="",
                )
            assert aborted.value.reason == ended.value.reason == "INVALID_ARGUMENT"
            assert w.phases() == before
            w.payments.release.set()
            called = await call
            assert called.outcome is Outcome.APPLIED
            assert called.result.structured_content == {"charged": "hal"}
            again = await w.gateway.call(await w.begin(), "payments__hold", arguments)
            assert again.outcome is Outcome.ALREADY_APPLIED
            assert w.payments.calls["hold"] == 1

    run(test)
