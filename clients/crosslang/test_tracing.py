"""A write from each of the four clients is one trace, from the agent to the store.

Each agent (Python, Go, TypeScript, Java) sets up its language's OpenTelemetry SDK,
exporting over OTLP as the standard OTEL_* variables say, and makes one create inside a
span of its own, through its client as the client's README says to trace it. `actonce
serve` and the reference store (`actonce store`, a process of its own) export to the same
receiver: a real OTLP/gRPC trace service. The write's trace must hold, with one trace id
and each span the parent of the next: the agent's span, its client's call, the sidecar's
server span, its ledger appends and its store call, the store call's client span, and the
store's server span. The write's audit events record that trace and the sidecar's span.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.harness import free_port
from tests.helpers.otlp import OtlpReceiver, ReceivedSpan
from tests.server.processes import Served, run_cli, start_cli, wait_for_status

SERVER, CLIENT = 2, 3  # OTLP's span kinds
LANGUAGES = ["python", "go", "typescript", "java"]


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    yield receiver
    receiver.stop()


@dataclass
class TracedSidecar:
    target: str
    audit_db: Path


@pytest.fixture(scope="module")
def sidecar(
    receiver: OtlpReceiver, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TracedSidecar]:
    """`actonce serve` and the store it writes to, each its own process, both traced."""
    folder = tmp_path_factory.mktemp("traced")
    store_target = f"127.0.0.1:{free_port()}"
    api, probes = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    started: list[Served] = []
    try:
        store = start_cli(folder / "store.log", "store", "--listen", store_target,
                          "--data-dir", str(folder / "store"),
                          env=receiver.environment())  # fmt: skip
        started.append(store)
        wait_for_status(store_target, "SERVING", served=store)
        served = start_cli(folder / "sidecar.log", "serve", "--listen", api,
                           "--health-listen", probes, "--data-dir", str(folder / "data"),
                           "--store-target", store_target, env=receiver.environment())  # fmt: skip
        started.append(served)
        wait_for_status(probes, "SERVING", served=served)
        yield TracedSidecar(api, folder / "data" / "audit.db")
    finally:
        for process in started:
            process.stop()


@pytest.fixture(scope="module")
def agents(go_agents: Path, typescript_build: Path, java_classpath: str) -> dict[str, list[str]]:
    """Each client's tracing agent, built from the current sources (conftest.py)."""
    ts = typescript_build / "test"
    return {
        "python": [sys.executable, str(Path(__file__).with_name("trace_agent.py"))],
        "go": [str(go_agents / "traceagent")],
        "typescript": ["node", "--import", str(ts / "telemetry.js"), str(ts / "trace-agent.js")],
        "java": ["java", "-cp", java_classpath, "dev.actonce.client.TraceAgent"],
    }


def _child(spans: list[ReceivedSpan], parent: ReceivedSpan, name: str, kind: int) -> ReceivedSpan:
    """The one span of ``kind`` under ``parent`` whose name ends in ``name``."""
    found = [s for s in spans if s.parent_span_id == parent.span_id and s.kind == kind]
    found = [s for s in found if s.name.endswith(name)]
    assert len(found) == 1, (parent.name, name, [(s.name, s.kind, s.parent_span_id) for s in spans])
    return found[0]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("language", LANGUAGES)
def test_a_write_is_one_trace_from_the_agent_through_the_sidecar_to_the_store(
    language: str, agents: dict[str, list[str]], sidecar: TracedSidecar, receiver: OtlpReceiver
) -> None:
    run_id = f"traced-{language}-{uuid.uuid4()}"
    service = f"{language}-agent"
    env = receiver.environment(
        OTEL_SERVICE_NAME=service,
        # The Java SDK's autoconfiguration would also export metrics and logs by default.
        OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
    )
    mine = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run([*agents[language], sidecar.target, run_id], env={**mine, **env},
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    agent_said = json.loads(done.stdout.splitlines()[-1])
    trace_id, written = agent_said["trace_id"], agent_said["id"]

    # Each process exports on its own schedule: the chain is complete once the agent's span,
    # the sidecar's server span (it ends after the outcome's audit) and the store's server
    # span have all come.
    def complete(spans: list[ReceivedSpan]) -> bool:
        ours = [s for s in spans if s.trace_id == trace_id]
        return (
            any(s.service == "actonce-store" and s.kind == SERVER for s in ours)
            and any(s.service == "actonce-sidecar" and s.kind == SERVER for s in ours)
            and any(s.span_id == agent_said["span_id"] for s in ours)
        )

    spans = [s for s in receiver.wait_for(complete, timeout=60) if s.trace_id == trace_id]

    [agent] = [s for s in spans if s.span_id == agent_said["span_id"]]
    assert (agent.service, agent.parent_span_id) == (service, "")
    call = _child(spans, agent, "RunActionsService/Create", CLIENT)
    assert call.service == service
    server = _child(spans, call, "actonce.v1.RunActionsService/Create", SERVER)
    assert server.service == "actonce-sidecar"
    assert server.attributes["actonce.run_id"] == run_id
    assert server.attributes["actonce.derived_id"] == written
    appends = [s for s in spans if s.parent_span_id == server.span_id and s.name == "ledger.append"]
    assert len(appends) >= 2, [s.name for s in spans]  # the intent and the outcome
    store_call = _child(spans, server, "store.create_artifact", 1)
    store_client = _child(spans, store_call, "ArtifactStoreService/CreateArtifact", CLIENT)
    store_server = _child(spans, store_client, "ArtifactStoreService/CreateArtifact", SERVER)
    assert store_server.service == "actonce-store"

    # The audit events of the write point at the trace and at the sidecar's span.
    shown = run_cli("audit", "show", run_id, "--audit-db", str(sidecar.audit_db))
    assert shown.returncode == 0, shown.stderr
    lines = [line for line in shown.stdout.splitlines() if written in line]
    assert len(lines) == 2, shown.stdout  # intent, then APPLIED
    for line in lines:
        assert f"[trace {trace_id} span {server.span_id}]" in line, line
