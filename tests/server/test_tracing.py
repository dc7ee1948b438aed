"""OpenTelemetry traces: one trace from the agent through the sidecar to the store,
exported over OTLP to a real receiver (tests.helpers.otlp), and linked to the audit.

The agent here is the Python client with a tracer of the test's own (grpc's client
instrumentation, as an agent would install it); the sidecar and the reference store
trace because the OTEL_* variables ask them to.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast
from unittest import mock

import grpc
import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_client import ActonceError, Client, Effect
from mcp import Client as McpClient
from opentelemetry import propagate
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.grpc import client_interceptor
from opentelemetry.instrumentation.grpc.grpcext import intercept_channel
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind
from starlette.testclient import TestClient

from sidecar.console.app import create_app
from sidecar.console.chain import ChainWatch
from sidecar.ledger.audit_command import open_reader
from sidecar.ledger.base import Phase
from sidecar.ledger.operator import open_operator_ledger
from sidecar.ops import tracing_settings
from sidecar.ops.tracing import SIDECAR_SERVICE, STORE_SERVICE, Tracing
from tests.harness import (
    RunningSidecar,
    RunningStore,
    free_port,
    sidecar_config,
    start_sidecar,
    start_store,
)
from tests.helpers.otlp import OtlpReceiver, ReceivedSpan

SERVER = SpanKind.SERVER.value + 1  # OTLP numbers its kinds from 1 (UNSPECIFIED = 0)
CLIENT = SpanKind.CLIENT.value + 1

# The instrumentation's own channel wrapper and interceptor (the package has no type hints).
_client_interceptor = cast(Callable[..., object], client_interceptor)
_intercept_channel = cast(Callable[[grpc.Channel, object], grpc.Channel], intercept_channel)

# Texts that travel as payloads: none may leave in a span.
DATA_TEXT = "pelican-data-7f3a"
NOTICE_TEXT = "heron-notice-91bc"
TITLE_TEXT = "ibis-title-c0de"
EDIT_TEXT = "egret-edit-55aa"
ARGS_TEXT = "stork-args-e4e4"
RESULT_TEXT = "crane-result-3b3b"
PAYLOADS = (DATA_TEXT, NOTICE_TEXT, TITLE_TEXT, EDIT_TEXT, ARGS_TEXT, RESULT_TEXT)


@pytest.fixture
def traced(otlp_receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch) -> OtlpReceiver:
    """This test's processes trace, to the receiver: only the standard variables."""
    for name in [name for name in os.environ if name.startswith("OTEL_")]:
        monkeypatch.delenv(name)
    for name, value in otlp_receiver.environment().items():
        monkeypatch.setenv(name, value)
    return otlp_receiver


class Agent:
    """The agent's side: its own tracer, and grpc's client interceptor from
    opentelemetry-instrumentation-grpc on the channel its client opens (what
    ``GrpcInstrumentorClient`` does, with this tracer rather than the process's)."""

    def __init__(self, receiver: OtlpReceiver) -> None:
        self.provider = TracerProvider(resource=Resource({"service.name": "agent"}))
        self.provider.add_span_processor(
            SimpleSpanProcessor(OTLPSpanExporter(endpoint=receiver.endpoint, insecure=True))
        )
        self.tracer = self.provider.get_tracer("agent")

    def client(self, running: RunningSidecar) -> Client:
        plain = grpc.insecure_channel
        interceptor = _client_interceptor(tracer_provider=self.provider)

        def traced_channel(*args: Any, **kwargs: Any) -> grpc.Channel:
            return _intercept_channel(plain(*args, **kwargs), interceptor)

        with mock.patch.object(grpc, "insecure_channel", traced_channel):
            return Client(f"127.0.0.1:{running.port}")

    def close(self) -> None:
        self.provider.shutdown()


@pytest.fixture
def agent(traced: OtlpReceiver) -> Iterator[Agent]:
    made = Agent(traced)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def traced_store(traced: OtlpReceiver, tmp_path: Path) -> Iterator[RunningStore]:
    """A reference store of its own, tracing as `actonce store` does."""
    traces = Tracing.from_environment(STORE_SERVICE)
    assert traces is not None
    store = start_store(tmp_path / "store", interceptors=traces.store_server_interceptors())
    try:
        yield store
    finally:
        store.stop()
        traces.shutdown()


def _one(spans: list[ReceivedSpan], **match: object) -> ReceivedSpan:
    found = [s for s in spans if all(getattr(s, k) == v for k, v in match.items())]
    assert len(found) == 1, f"{match} in {sorted((s.service, s.name, s.kind) for s in spans)}"
    return found[0]


def _children(spans: list[ReceivedSpan], parent: ReceivedSpan, name: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.parent_span_id == parent.span_id and s.name == name]


def test_a_write_is_one_trace_from_the_agent_through_the_sidecar_to_the_store(
    agent: Agent, traced: OtlpReceiver, traced_store: RunningStore, tmp_path: Path
) -> None:
    running = start_sidecar(sidecar_config(tmp_path / "data", store_target=traced_store.target))
    try:
        client = agent.client(running)
        with agent.tracer.start_as_current_span("agent.create") as root:
            attempt = client.begin("run-traced", "triage")
            created = attempt.create("note", {"text": DATA_TEXT})
        trace_id = format(root.get_span_context().trace_id, "032x")
        client.close()
        events = running.audit("run-traced")
    finally:
        running.stop()

    # agent.create, 2 client spans, 2 server spans, 3 appends, the store's 3 spans, a commit
    spans = traced.wait_for_trace(trace_id, count=12)
    client_span = _one(spans, name="/actonce.v1.RunActionsService/Create", service="agent")
    assert client_span.kind == CLIENT
    server = _one(spans, name="actonce.v1.RunActionsService/Create", service=SIDECAR_SERVICE)
    assert (server.kind, server.parent_span_id) == (SERVER, client_span.span_id)
    assert server.attributes["rpc.system"] == "grpc"
    assert server.attributes["rpc.service"] == "actonce.v1.RunActionsService"
    assert server.attributes["rpc.method"] == "Create"
    assert server.attributes["rpc.grpc.status_code"] == 0
    # Today's networking names, not the net.peer.* that the instrumentation makes.
    assert server.attributes["network.peer.address"] == "127.0.0.1"
    assert isinstance(server.attributes["network.peer.port"], int)
    assert (server.attributes["network.transport"], server.attributes["network.type"]) == (
        "tcp",
        "ipv4",
    )
    assert not [k for k in server.attributes if k.startswith("net.")], server.attributes
    assert {k: server.attributes[k] for k in (
        "actonce.run_id", "actonce.attempt_id", "actonce.write_type", "actonce.derived_id",
        "actonce.outcome")} == {
        "actonce.run_id": "run-traced", "actonce.attempt_id": attempt.id,
        "actonce.write_type": "create", "actonce.derived_id": created.id,
        "actonce.outcome": "OUTCOME_APPLIED"}  # fmt: skip

    appends = _children(spans, server, "ledger.append")
    assert sorted(a.attributes["actonce.phase"] for a in appends) == ["intent", "outcome"]
    assert all(a.attributes["actonce.derived_id"] == created.id for a in appends)
    # Each append's group commit is a span in the trace of its first traced append,
    # linked to every traced append it carried.
    commits = [s for s in spans if s.name == "ledger.commit"]
    for append in appends:
        assert any((trace_id, append.span_id) in c.links for c in commits), append.attributes
    assert {c.parent_span_id for c in commits} <= {s.span_id for s in spans}

    children = _children(spans, server, "store.create_artifact")
    assert len(children) == 1
    store_call = children[0]
    assert store_call.attributes["actonce.store.id"] == created.id
    store_client = _one(spans, kind=CLIENT, service=SIDECAR_SERVICE)
    assert store_client.parent_span_id == store_call.span_id
    assert store_client.name == "/actonce.store.v1.ArtifactStoreService/CreateArtifact"
    host, _, port = traced_store.target.rpartition(":")
    assert (store_client.attributes["server.address"], store_client.attributes["server.port"]) == (
        host,
        int(port),
    )
    assert store_client.attributes["rpc.system"] == "grpc"
    store_server = _one(spans, service=STORE_SERVICE)
    assert (store_server.kind, store_server.parent_span_id) == (SERVER, store_client.span_id)
    assert store_server.attributes["network.peer.address"] == "127.0.0.1"
    assert not [k for k in store_server.attributes if k.startswith("net.")]

    # The audit events of the write name the trace, and the call's span within it.
    written = [e.event for e in events if e.event.derived_id == created.id]
    assert [e.phase for e in written] == [Phase.INTENT, Phase.OUTCOME]
    assert {(e.trace_id, e.span_id) for e in written} == {(trace_id, server.span_id)}
    begun = _one(spans, name="actonce.v1.RunActionsService/BeginAttempt", service=SIDECAR_SERVICE)
    assert (events[0].event.trace_id, events[0].event.span_id) == (trace_id, begun.span_id)
    assert DATA_TEXT.encode() not in traced.exported_bytes()


def test_a_refusal_is_told_on_the_call_span(
    agent: Agent, traced: OtlpReceiver, tmp_path: Path
) -> None:
    running = start_sidecar(sidecar_config(tmp_path / "data"))
    try:
        client = agent.client(running)
        with agent.tracer.start_as_current_span("agent.edit") as root:
            attempt = client.begin("run-refused", "triage")
            with pytest.raises(ActonceError) as refused:
                attempt.edit("art_missing", "/title", "x")
        client.close()
        events = running.audit("run-refused")
    finally:
        running.stop()
    assert refused.value.reason == "NOT_FOUND"
    trace_id = format(root.get_span_context().trace_id, "032x")
    spans = traced.wait_for(
        lambda spans: any(
            s.name == "actonce.v1.RunActionsService/Edit" and s.trace_id == trace_id for s in spans
        )
    )
    server = _one(spans, name="actonce.v1.RunActionsService/Edit", service=SIDECAR_SERVICE)
    assert server.attributes["actonce.reason"] == "NOT_FOUND"
    assert server.attributes["actonce.failure_class"] == "REFUSED"
    assert server.attributes["rpc.grpc.status_code"] == 5  # NOT_FOUND
    failed = [e.event for e in events if e.event.phase == Phase.OUTCOME]
    assert [(e.reason, e.trace_id) for e in failed] == [("NOT_FOUND", trace_id)]


def test_no_payload_leaves_in_any_span(agent: Agent, traced: OtlpReceiver, tmp_path: Path) -> None:
    # The embedded store: its calls are in-process, each within a store span of the call.
    running = start_sidecar(sidecar_config(tmp_path / "data", send_allowlist=frozenset({"triage"})))
    try:
        client = agent.client(running)
        with agent.tracer.start_as_current_span("agent.run") as root:
            attempt = client.begin("run-payloads", "triage")
            created = attempt.create("note", {"text": DATA_TEXT})
            attempt.edit(created.id, "/text", EDIT_TEXT)
            thread = attempt.create_thread(TITLE_TEXT)
            attempt.notice(thread.id, NOTICE_TEXT)
            attempt.send(thread.id, NOTICE_TEXT + "-sent")
            step = attempt.begin_step("lookup", Effect.IDEMPOTENT_WRITE, {"q": ARGS_TEXT})
            attempt.end_step(step.id, {"answer": RESULT_TEXT})
            attempt.read_artifact(created.id)
            attempt.read_thread(thread.id)
            attempt.end()
        client.close()
    finally:
        running.stop()
    trace_id = format(root.get_span_context().trace_id, "032x")
    spans = traced.wait_for_trace(trace_id, count=30)
    embedded = [s for s in spans if s.name == "store.post_message"]
    assert len(embedded) == 2 and all(s.trace_id == trace_id for s in embedded)
    exported = traced.exported_bytes()
    assert exported, "nothing was exported"
    for text in PAYLOADS:
        assert text.encode() not in exported, text
    for span in spans:
        for value in span.attributes.values():
            assert not any(text in str(value) for text in PAYLOADS), (span.name, value)


def test_a_call_with_no_trace_starts_one_and_the_operator_can_follow_it(
    traced: OtlpReceiver, tmp_path: Path
) -> None:
    # A caller that does not trace: the sidecar's own span is the root of the trace.
    running = start_sidecar(sidecar_config(tmp_path / "data"))
    try:
        running.begin("run-root")
        events = running.audit("run-root")
    finally:
        running.stop()
    trace_id = events[0].event.trace_id
    assert len(trace_id) == 32 and trace_id != "0" * 32
    spans = traced.wait_for_trace(trace_id, count=2)
    server = _one(spans, name="actonce.v1.RunActionsService/BeginAttempt")
    assert server.parent_span_id == "" and server.span_id == events[0].event.span_id
    # The operator sees both in the run's timeline, and the chain still verifies.
    audit = [sys.executable, "-m", "sidecar.cli", "audit"]
    flags = ["--audit-db", str(running.config.audit_path)]
    shown = subprocess.run([*audit, "show", "run-root", *flags], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert f"[trace {trace_id} span {server.span_id}]" in shown.stdout.splitlines()[0]
    verified = subprocess.run([*audit, "verify", *flags], capture_output=True, text=True)
    assert verified.returncode == 0 and "ledger intact" in verified.stdout
    # The console links the event to the trace viewer, and its JSON names both ids.
    ledger = open_operator_ledger(running.config.audit_path, None)
    chain = ChainWatch(lambda: open_reader({"audit_db": running.config.audit_path}))
    try:
        app = create_app(
            ledger,
            token=None,
            chain=chain,
            trace_url_template="http://jaeger:16686/trace/{trace_id}",
        )
        with TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 5000)) as local:
            page = local.get("/runs/run-root").text
            api = local.get("/api/runs/run-root").json()
    finally:
        ledger.close()
    assert f'href="http://jaeger:16686/trace/{trace_id}"' in page
    assert (api["events"][0]["trace_id"], api["events"][0]["span_id"]) == (
        trace_id,
        server.span_id,
    )


def test_the_console_takes_only_a_trace_url_template_that_names_the_trace(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sidecar.cli", "console", "--audit-db", str(tmp_path / "a.db"),
         "--trace-url-template", "http://jaeger:16686/trace/"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "actonce: error: --trace-url-template='http://jaeger:16686/trace/' is not valid: "
        "names no {trace_id}"
    )


def test_latency_histograms_carry_the_trace_as_an_exemplar_in_openmetrics(
    agent: Agent, traced: OtlpReceiver, tmp_path: Path
) -> None:
    port = free_port()
    running = start_sidecar(sidecar_config(tmp_path / "data", metrics_listen=f"127.0.0.1:{port}"))
    try:
        client = agent.client(running)
        with agent.tracer.start_as_current_span("agent.begin") as root:
            client.begin("run-exemplar", "triage")
        client.close()
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/metrics",
            headers={"Accept": "application/openmetrics-text; version=1.0.0"},
        )
        with urllib.request.urlopen(request, timeout=5) as answer:
            assert answer.headers["Content-Type"].startswith("application/openmetrics-text")
            text = answer.read().decode()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            plain = answer.read().decode()
    finally:
        running.stop()
    trace_id = format(root.get_span_context().trace_id, "032x")
    lines = [
        line
        for line in text.splitlines()
        if line.startswith("actonce_request_seconds_bucket") and 'rpc="BeginAttempt"' in line
    ]
    with_exemplar = [line for line in lines if " # {" in line]
    assert with_exemplar, lines
    assert all(f'trace_id="{trace_id}"' in line for line in with_exemplar)
    assert any(
        f'trace_id="{trace_id}"' in line
        for line in text.splitlines()
        if line.startswith("actonce_audit_append_seconds_bucket")
    )
    # The Prometheus text format has no exemplars: a plain scrape is as it was.
    assert trace_id not in plain


def test_with_no_otel_variable_the_sidecar_does_no_tracing_work(
    otlp_receiver: OtlpReceiver, tmp_path: Path
) -> None:
    # A process of its own, with no OTEL_* variable: the sidecar serves writes, and
    # neither OpenTelemetry's SDK nor the tracing module is ever loaded; nothing is
    # exported to the receiver that stands by.
    script = """
import asyncio, json, sys
from sidecar.config import Config
from sidecar.assembly.server import create_server
from actonce_api.v1 import run_actions_pb2 as pb, run_actions_pb2_grpc as pb_grpc
import grpc

async def main():
    sidecar, port = await create_server(Config(listen="127.0.0.1:0", data_dir=__import__("pathlib").Path(sys.argv[1])))
    await sidecar.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.RunActionsServiceStub(channel)
        begun = await stub.BeginAttempt(pb.BeginAttemptRequest(run_id="r", rule="triage"))
        await stub.Create(pb.CreateRequest(attempt_id=begun.attempt_id, kind="note", data_json="{}"))
    ledger = type(sidecar.ledger).__name__, type(sidecar.store).__name__
    await sidecar.stop(0)
    loaded = sorted(m for m in sys.modules if m.startswith(("opentelemetry.sdk", "sidecar.ops.tracing", "opentelemetry.instrumentation")))
    print(json.dumps({"tracing": sidecar.tracing is not None, "wrapped": ledger, "loaded": loaded}))

asyncio.run(main())
"""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "data")],
        capture_output=True, text=True, timeout=60, env=environment,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {
        "tracing": False,
        "wrapped": ["SqliteLedger", "TimedStore"],
        "loaded": [m for m in seen["loaded"] if m == "sidecar.ops.tracing_settings"],
    }
    assert otlp_receiver.spans() == []


@pytest.mark.parametrize(
    ("environ", "asked"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "a"}, False),
        ({"OTEL_TRACES_SAMPLER": "always_on"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4317"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, False),
    ],
)
def test_traces_are_on_only_when_the_environment_asks(environ: dict[str, str], asked: bool) -> None:
    assert tracing_settings.requested(environ) is asked


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("OTEL_TRACES_EXPORTER", "zipkin", "OTEL_TRACES_EXPORTER='zipkin' is not offered"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf", "traces leave over grpc"),
    ],
)
def test_a_way_of_exporting_not_offered_stops_start_up_with_one_line(
    variable: str, value: str, said: str, tmp_path: Path
) -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    environment |= {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", variable: value}
    done = subprocess.run(
        [sys.executable, "-m", "sidecar.cli", "serve", "--data-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=60, env=environment,
    )  # fmt: skip
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("actonce: error: ") and said in lines[0], lines


def test_serve_help_lists_the_variables_it_reads() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sidecar.cli", "serve", "--help"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    text = " ".join(done.stdout.split())
    for name in tracing_settings.READ:
        assert name in text, name


def test_an_mcp_call_continues_the_trace_its_meta_names(
    agent: Agent, traced: OtlpReceiver, tmp_path: Path
) -> None:
    running = start_sidecar(sidecar_config(tmp_path / "data", mcp_listen="127.0.0.1:0"))
    try:
        with agent.tracer.start_as_current_span("agent.tool") as caller:
            meta: dict[str, str] = {}
            propagate.inject(meta)
        attempt_id = running.begin("run-mcp")
        result = asyncio.run(
            _call_tool(
                f"http://127.0.0.1:{running.sidecar.mcp_port}/mcp/attempts/{attempt_id}",
                "create",
                {"kind": "note", "data": {"text": DATA_TEXT}},
                meta,
            )
        )
        events = running.audit("run-mcp")
    finally:
        running.stop()
    assert not result.is_error, result
    assert set(meta) == {"traceparent"}
    trace_id = format(caller.get_span_context().trace_id, "032x")
    spans = traced.wait_for_trace(trace_id, count=4)
    tool = _one(spans, name="tools/call create", service=SIDECAR_SERVICE)
    assert (tool.kind, tool.parent_span_id) == (
        SERVER,
        format(caller.get_span_context().span_id, "016x"),
    )
    assert tool.attributes["actonce.outcome"] == "OUTCOME_APPLIED"
    assert len(_children(spans, tool, "ledger.append")) == 2
    assert len(_children(spans, tool, "store.create_artifact")) == 1
    written = [e.event for e in events if e.event.phase in (Phase.INTENT, Phase.OUTCOME)]
    assert {(e.trace_id, e.span_id) for e in written} == {(trace_id, tool.span_id)}
    assert DATA_TEXT.encode() not in traced.exported_bytes()


async def _call_tool(url: str, name: str, arguments: dict[str, Any], meta: dict[str, str]) -> Any:
    async with McpClient(url, cache=None) as client:
        return await client.call_tool(name, arguments, meta=cast(Any, meta))


def test_a_call_not_sampled_makes_no_span_and_names_no_trace(
    traced: OtlpReceiver, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Traces on, and this sampler keeps none: the calls are served as ever, nothing is
    # exported, and no audit event points at a trace that nobody keeps.
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    running = start_sidecar(sidecar_config(tmp_path / "data"))
    try:
        assert running.sidecar.tracing is not None
        attempt = running.begin("run-unsampled")
        running.stub.Create(pb.CreateRequest(attempt_id=attempt, kind="note", data_json="{}"))
        events = running.audit("run-unsampled")
    finally:
        running.stop()  # flushes what the sidecar holds
    assert [e.event.phase for e in events] == [Phase.ATTEMPT_BEGIN, Phase.INTENT, Phase.OUTCOME]
    assert {(e.event.trace_id, e.event.span_id) for e in events} == {("", "")}
    assert traced.spans() == []


@pytest.mark.parametrize(
    ("bound", "reason", "failure_class"),
    [
        # Refused in the store, after the intent was audited.
        ("begun", "NOT_FOUND", "REFUSED"),
        # Refused before anything is audited: only the front can tell the span.
        ("unknown", "UNKNOWN_ATTEMPT", "RETRYABLE"),
    ],
)
def test_an_mcp_refusal_is_told_on_the_tool_span(
    agent: Agent,
    traced: OtlpReceiver,
    tmp_path: Path,
    bound: str,
    reason: str,
    failure_class: str,
) -> None:
    running = start_sidecar(sidecar_config(tmp_path / "data", mcp_listen="127.0.0.1:0"))
    try:
        with agent.tracer.start_as_current_span("agent.tool") as caller:
            meta: dict[str, str] = {}
            propagate.inject(meta)
        attempt_id = running.begin("run-mcp-refused") if bound == "begun" else "att_unknown"
        result = asyncio.run(
            _call_tool(
                f"http://127.0.0.1:{running.sidecar.mcp_port}/mcp/attempts/{attempt_id}",
                "edit",
                {"artifact_id": "art_missing", "path": "/title", "value": "x"},
                meta,
            )
        )
    finally:
        running.stop()
    assert result.is_error, result
    trace_id = format(caller.get_span_context().trace_id, "032x")
    spans = traced.wait_for(
        lambda spans: any(s.name == "tools/call edit" and s.trace_id == trace_id for s in spans)
    )
    tool = _one(spans, name="tools/call edit", service=SIDECAR_SERVICE)
    assert tool.attributes["actonce.reason"] == reason
    assert tool.attributes["actonce.failure_class"] == failure_class
    assert tool.attributes["error.type"] == "tool_error"


@pytest.mark.parametrize("files", ["one file", "two files"])
def test_a_write_with_the_embedded_store_is_one_trace_with_its_audit(
    agent: Agent, traced: OtlpReceiver, tmp_path: Path, files: str
) -> None:
    # One file: the write and its audit are one commit; two files (a folder made before the
    # store moved into the ledger's file): three one after another, as one job of the store's thread.
    data = tmp_path / "data"
    if files == "two files":
        data.mkdir(mode=0o700)
        (data / "store.db").touch(mode=0o600)
    running = start_sidecar(sidecar_config(data))
    try:
        client = agent.client(running)
        with agent.tracer.start_as_current_span("agent.create") as root:
            created = client.begin("run-embedded", "triage").create("note", {"text": DATA_TEXT})
        trace_id = format(root.get_span_context().trace_id, "032x")
        client.close()
        events = running.audit("run-embedded")
    finally:
        running.stop()
    assert (data / "store.db").exists() == (files == "two files")

    spans = traced.wait_for_trace(trace_id, count=8)
    server = _one(spans, name="actonce.v1.RunActionsService/Create", service=SIDECAR_SERVICE)
    appends = _children(spans, server, "ledger.append")
    assert sorted(a.attributes["actonce.phase"] for a in appends) == ["intent", "outcome"]
    assert all(a.attributes["actonce.derived_id"] == created.id for a in appends)
    [store_call] = _children(spans, server, "store.create_artifact")
    assert store_call.attributes["actonce.store.id"] == created.id
    written = [e.event for e in events if e.event.derived_id == created.id]
    assert [e.phase for e in written] == [Phase.INTENT, Phase.OUTCOME]
    assert {(e.trace_id, e.span_id) for e in written} == {(trace_id, server.span_id)}
    assert DATA_TEXT.encode() not in traced.exported_bytes()
