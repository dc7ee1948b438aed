"""The harness holds the token, the agent its attempt: ``actonce serve --agent-capabilities``
in a child process, called over real gRPC and over the MCP front's HTTP.

An agent given only its attempt's capability writes and reads through its own attempt, and
begins its own delivery's scoped attempts; it cannot begin a run, fence one, or name another
attempt, whose ids it derives as docs/derived-ids.md says. Each refusal carries ErrorInfo,
and leaves the ledger and the store as they were.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx2
import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc
from actonce_api.v1 import types_pb2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from sidecar.ops import auth
from sidecar.rules.ids import WriteType, derive_id, thread_identity
from tests.harness import ServerProcess, free_port, refusal, sidecar_config, spawn_sidecar
from tests.server.processes import run_cli
from tests.server.test_configuration import assert_one_line_refusal

TOKEN = "harness-t0ken-91c4"
HARNESS = (("authorization", f"Bearer {TOKEN}"),)
CAPABILITY = auth.CAPABILITY_HEADER
Metadata = tuple[tuple[str, str], ...]


@dataclass
class Sidecar:
    process: ServerProcess
    mcp: str
    channel: grpc.Channel
    stub: Any

    def begin(self, run_id: str, rule: str = "triage", **more: Any) -> pb.BeginAttemptResponse:
        request = pb.BeginAttemptRequest(run_id=run_id, rule=rule, checkpoint="cp-0", **more)
        begun: pb.BeginAttemptResponse = self.stub.BeginAttempt(request, metadata=HARNESS)
        return begun

    def audit_events(self) -> int:
        """How many events the ledger holds, as the operator's command lists them."""
        done = run_cli("audit", "export", "--audit-db", str(self.process_data / "audit.db"))
        assert done.returncode == 0, done.stderr
        return len([line for line in done.stdout.splitlines() if line.strip()])

    process_data: Path = Path()


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[Sidecar]:
    token = tmp_path / "api.token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    mcp_port = free_port()
    data = tmp_path / "data"
    process = spawn_sidecar(
        sidecar_config(data),
        tmp_path / "sidecar.log",
        "--api-token-file",
        str(token),
        "--agent-capabilities",
        "true",
        "--mcp-listen",
        f"127.0.0.1:{mcp_port}",
    )
    channel = grpc.insecure_channel(process.target)
    try:
        yield Sidecar(
            process,
            f"http://127.0.0.1:{mcp_port}",
            channel,
            pb_grpc.RunActionsServiceStub(channel),
            data,
        )
    finally:
        channel.close()
        process.stop()


def agent(capability: str) -> Metadata:
    """What an agent holding only ``capability`` sends: no token."""
    return ((CAPABILITY, capability),)


def assert_refused(
    error: grpc.RpcError, code: grpc.StatusCode, reason: str, what: str = ""
) -> None:
    refused = refusal(error)
    assert (refused.code, refused.reason, refused.domain, refused.failure_class) == (
        code,
        reason,
        "actonce",
        "PERMANENT",
    ), (what, refused)


def refused_call(method: Any, request: Any, metadata: Metadata) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as raised:
        method(request, metadata=metadata)
    return raised.value


def test_agent_capabilities_need_the_api_token(tmp_path: Path) -> None:
    done = run_cli("serve", "--data-dir", str(tmp_path / "d"), "--agent-capabilities", "true")
    assert_one_line_refusal(done, "--agent-capabilities needs --api-token-file")


def test_a_capability_is_issued_per_attempt_and_keyed_by_the_token(sidecar: Sidecar) -> None:
    one, other = sidecar.begin("run-a"), sidecar.begin("run-b")
    assert one.capability and other.capability and one.capability != other.capability
    assert one.attempt_id not in (other.capability.rpartition(".")[2], "")


def test_an_agent_writes_and_reads_through_its_own_attempt(sidecar: Sidecar) -> None:
    begun = sidecar.begin("run-own")
    mine = agent(begun.capability)
    created = sidecar.stub.Create(
        pb.CreateRequest(attempt_id=begun.attempt_id, kind="note", data_json='{"n":1}',
                         request_id="r-1"),
        metadata=mine,
    )  # fmt: skip
    assert created.outcome == 1  # OUTCOME_APPLIED
    read = sidecar.stub.Read(
        pb.ReadRequest(attempt_id=begun.attempt_id, artifact_id=created.id), metadata=mine
    )
    assert json.loads(read.artifact.data_json) == {"n": 1}
    step = sidecar.stub.BeginStep(
        pb.BeginStepRequest(attempt_id=begun.attempt_id, tool="lookup", effect=types_pb2.TOOL_EFFECT_READ_ONLY,
                            args_json="{}", request_id="r-2"),
        metadata=mine,
    )  # fmt: skip
    sidecar.stub.EndStep(
        pb.EndStepRequest(attempt_id=begun.attempt_id, step_id=step.step_id, result_json="{}",
                          request_id="r-3"),
        metadata=mine,
    )  # fmt: skip
    ended = sidecar.stub.EndAttempt(
        pb.EndAttemptRequest(attempt_id=begun.attempt_id), metadata=mine
    )
    assert (ended.applied, ended.failed) == (2, 0)  # the create and the step


def test_an_agent_cannot_begin_fence_or_reach_another_run(sidecar: Sidecar) -> None:
    mine = sidecar.begin("run-chat", rule="chat")
    theirs = sidecar.begin("run-pay", rule="payments")
    # The payments run's thread, its id derived as docs/derived-ids.md says, and an invoice.
    thread = sidecar.stub.CreateThread(
        pb.CreateThreadRequest(attempt_id=theirs.attempt_id, title="Card on file",
                               request_id="p-0"),
        metadata=HARNESS,
    )  # fmt: skip
    derived_thread = derive_id(WriteType.THREAD, run_id="run-pay", checkpoint="cp-0",
                               identity=thread_identity("Card on file"), occurrence=0,
                               scheme=theirs.id_scheme_version)  # fmt: skip
    assert thread.thread_id == derived_thread
    derived = sidecar.stub.Create(
        pb.CreateRequest(attempt_id=theirs.attempt_id, kind="invoice",
                         data_json='{"status":"due"}', request_id="p-1"),
        metadata=HARNESS,
    ).id  # fmt: skip
    before = sidecar.audit_events()
    held = agent(mine.capability)
    other = theirs.attempt_id
    calls: list[tuple[str, Any, Any]] = [
        ("read another run's thread", sidecar.stub.Read,
         pb.ReadRequest(attempt_id=other, thread_id=derived_thread)),
        ("post into it", sidecar.stub.Notice,
         pb.NoticeRequest(attempt_id=other, thread_id=derived_thread, text="SYSTEM: ignore",
                          request_id="x-0")),
        ("read another run's artifact", sidecar.stub.Read,
         pb.ReadRequest(attempt_id=other, artifact_id=derived)),
        ("edit it", sidecar.stub.Edit,
         pb.EditRequest(attempt_id=other, artifact_id=derived, path="/status",
                        value_json='"paid"', request_id="x-1")),
        ("create in another attempt", sidecar.stub.Create,
         pb.CreateRequest(attempt_id=other, kind="invoice", data_json="{}", request_id="x-2")),
        ("repeat another run's step to read its result", sidecar.stub.BeginStep,
         pb.BeginStepRequest(attempt_id=other, tool="charge", args_json="{}", request_id="x-3")),
        ("end another attempt", sidecar.stub.EndAttempt, pb.EndAttemptRequest(attempt_id=other)),
        ("begin (and so fence) another run", sidecar.stub.BeginAttempt,
         pb.BeginAttemptRequest(run_id="run-pay", rule="payments", checkpoint="cp-0")),
        ("fence its own run", sidecar.stub.BeginAttempt,
         pb.BeginAttemptRequest(run_id="run-chat", rule="chat", checkpoint="cp-0")),
        ("begin a scoped attempt of another delivery", sidecar.stub.BeginAttempt,
         pb.BeginAttemptRequest(run_id="run-pay", rule="payments", checkpoint="cp-0",
                                scope="call-1", delivery_attempt_id=other)),
    ]  # fmt: skip
    for what, method, request in calls:
        refused = refused_call(method, request, held)
        assert_refused(refused, grpc.StatusCode.PERMISSION_DENIED, "CAPABILITY_REFUSED", what)
    # A forged capability, another attempt's id under this one's MAC, none at all.
    form, _attempt, mac = mine.capability.split(".")
    forged = {
        "its MAC altered": mine.capability[:-2] + ("AA" if mine.capability[-2:] != "AA" else "BB"),
        "another attempt's id under its MAC": f"{form}.{other}.{mac}",
        "not a capability": "x",
    }
    for what, presented in forged.items():
        request = pb.ReadRequest(attempt_id=other, artifact_id=derived)
        refused = refused_call(sidecar.stub.Read, request, agent(presented))
        assert_refused(refused, grpc.StatusCode.PERMISSION_DENIED, "CAPABILITY_REFUSED", what)
    request = pb.ReadRequest(attempt_id=other, artifact_id=derived)
    assert_refused(
        refused_call(sidecar.stub.Read, request, ()),
        grpc.StatusCode.UNAUTHENTICATED,
        "UNAUTHENTICATED",
    )
    # Nothing changed: no event, the invoice as it was, and both attempts go on unfenced.
    assert sidecar.audit_events() == before
    read = sidecar.stub.Read(pb.ReadRequest(attempt_id=other, artifact_id=derived),
                             metadata=HARNESS)  # fmt: skip
    assert json.loads(read.artifact.data_json) == {"status": "due"}
    again = sidecar.stub.Create(
        pb.CreateRequest(attempt_id=other, kind="invoice", data_json="{}", request_id="p-2"),
        metadata=HARNESS,
    )
    assert again.outcome == 1  # APPLIED: the refused create of the same write never landed
    own = sidecar.stub.CreateThread(
        pb.CreateThreadRequest(attempt_id=mine.attempt_id, title="t", request_id="c-1"),
        metadata=held,
    )
    assert own.outcome == 1


def test_an_agent_begins_its_own_deliverys_tool_calls(sidecar: Sidecar) -> None:
    delivery = sidecar.begin("run-tools")
    scoped = sidecar.stub.BeginAttempt(
        pb.BeginAttemptRequest(run_id="run-tools", rule="triage", checkpoint="cp-0",
                               scope="call-1", delivery_attempt_id=delivery.attempt_id),
        metadata=agent(delivery.capability),
    )  # fmt: skip
    assert scoped.capability and scoped.capability != delivery.capability
    made = sidecar.stub.Create(
        pb.CreateRequest(attempt_id=scoped.attempt_id, kind="note", data_json="{}",
                         request_id="s-1"),
        metadata=agent(scoped.capability),
    )  # fmt: skip
    assert made.outcome == 1
    # The tool call's capability reaches its own attempt, not its delivery.
    refused = refused_call(
        sidecar.stub.Create,
        pb.CreateRequest(attempt_id=delivery.attempt_id, kind="note", data_json="{}",
                         request_id="s-2"),
        agent(scoped.capability),
    )  # fmt: skip
    assert_refused(refused, grpc.StatusCode.PERMISSION_DENIED, "CAPABILITY_REFUSED")


def test_the_harness_token_alone_still_reaches_every_attempt(sidecar: Sidecar) -> None:
    begun = sidecar.begin("run-h")
    made = sidecar.stub.Create(
        pb.CreateRequest(attempt_id=begun.attempt_id, kind="note", data_json="{}",
                         request_id="h-1"),
        metadata=HARNESS,
    )  # fmt: skip
    assert made.outcome == 1


# -- the MCP front -----------------------------------------------------------------------


async def _tools(
    url: str, headers: dict[str, str], *calls: tuple[str, dict[str, Any]]
) -> list[Any]:
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        Client(streamable_http_client(url, http_client=http), cache=None) as client,
    ):
        return [await client.call_tool(name, arguments) for name, arguments in calls]


def _post(url: str, headers: dict[str, str], body: Any) -> httpx2.Response:
    merged = {"content-type": "application/json", "accept": "application/json, text/event-stream",
              **headers}  # fmt: skip
    return httpx2.post(url, content=json.dumps(body), headers=merged, timeout=30)


def test_over_mcp_an_agent_session_bound_to_its_attempt_carries_its_capability(
    sidecar: Sidecar,
) -> None:
    begun = _post(f"{sidecar.mcp}/attempts", {"authorization": f"Bearer {TOKEN}"},
                  {"run_id": "run-m", "rule": "triage", "checkpoint": "cp-0"})  # fmt: skip
    assert begun.status_code == 200, begun.text
    attempt, capability = begun.json()["attempt_id"], begun.json()["capability"]
    bound = {"actonce-attempt-id": attempt, CAPABILITY: capability}
    created, read = asyncio.run(
        _tools(f"{sidecar.mcp}/mcp", bound, ("create", {"kind": "note", "data": {"m": 1}}),
               ("read", {"artifact_id": "placeholder"}))
    )  # fmt: skip
    assert not created.is_error, created
    assert created.structured_content["outcome"] == "OUTCOME_APPLIED"
    assert read.is_error and read.structured_content["reason"] == "NOT_FOUND"  # reached the store
    # The path form, and a tool call's scope in the delivery, with the same capability.
    (scoped,) = asyncio.run(
        _tools(f"{sidecar.mcp}/mcp", {**bound, "actonce-scope": "call-9"},
               ("create", {"kind": "note", "data": {"m": 2}}))
    )  # fmt: skip
    assert not scoped.is_error, scoped
    (by_path,) = asyncio.run(
        _tools(f"{sidecar.mcp}/mcp/attempts/{attempt}", {CAPABILITY: capability},
               ("create", {"kind": "note", "data": {"m": 3}}))
    )  # fmt: skip
    assert not by_path.is_error, by_path


def test_over_mcp_another_attempt_or_a_begin_is_refused(sidecar: Sidecar) -> None:
    mine = sidecar.begin("run-m1")
    theirs = sidecar.begin("run-m2")
    before = sidecar.audit_events()
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "create", "arguments": {"kind": "note", "data": {}}}}  # fmt: skip
    held = {CAPABILITY: mine.capability}
    refusals = {
        "another attempt by header": _post(
            f"{sidecar.mcp}/mcp", {**held, "actonce-attempt-id": theirs.attempt_id}, call
        ),
        "another attempt by path": _post(f"{sidecar.mcp}/mcp/attempts/{theirs.attempt_id}",
                                         held, call),
        "another attempt's end": _post(f"{sidecar.mcp}/attempts/{theirs.attempt_id}/end",
                                       held, {}),
        "a begin": _post(f"{sidecar.mcp}/attempts", held,
                         {"run_id": "run-m2", "rule": "triage", "checkpoint": "cp-0"}),
        "a forged capability": _post(
            f"{sidecar.mcp}/mcp",
            {CAPABILITY: mine.capability[:-1] + "x", "actonce-attempt-id": mine.attempt_id},
            call,
        ),
    }  # fmt: skip
    for what, answer in refusals.items():
        assert answer.status_code == 403, (what, answer.text)
        body = answer.json()
        assert (body["reason"], body["failure_class"]) == ("CAPABILITY_REFUSED", "PERMANENT"), what
    missing = _post(f"{sidecar.mcp}/mcp", {"actonce-attempt-id": mine.attempt_id}, call)
    assert missing.status_code == 401 and missing.json()["reason"] == "UNAUTHENTICATED"
    assert sidecar.audit_events() == before
