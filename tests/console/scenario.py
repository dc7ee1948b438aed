"""A ledger that needs a person, made by real sidecar processes, and a console over it.

Run ``run-refund``: attempt 1 creates a ticket and a thread, posts a notice and
begins a non-idempotent step (``charge_card``); the sidecar is killed with
SIGKILL before the step ends. Attempt 2, on a new sidecar, finds every write
already applied and is refused IN_DOUBT at the step. Run ``run-digest`` went
through in one attempt.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc
from actonce_api.v1 import types_pb2
from google.protobuf import timestamp_pb2

from sidecar.config import Config
from tests.harness import free_port, spawn_sidecar
from tests.server.processes import Served, start_cli

RUN = "run-refund"
TOKEN = "op-token-7f3a9c"


@dataclass
class Agent:
    """One attempt of a run, as an agent drives it over gRPC."""

    stub: pb_grpc.RunActionsServiceStub
    attempt_id: str

    def create(self, data: str) -> pb.CreateResponse:
        return self.stub.Create(
            pb.CreateRequest(attempt_id=self.attempt_id, kind="ticket", data_json=data)
        )

    def thread(self, title: str) -> pb.CreateThreadResponse:
        return self.stub.CreateThread(
            pb.CreateThreadRequest(attempt_id=self.attempt_id, title=title)
        )

    def notice(self, thread_id: str, text: str) -> pb.NoticeResponse:
        return self.stub.Notice(
            pb.NoticeRequest(attempt_id=self.attempt_id, thread_id=thread_id, text=text)
        )

    def charge(self) -> pb.BeginStepResponse:
        return self.stub.BeginStep(
            pb.BeginStepRequest(
                attempt_id=self.attempt_id, tool="charge_card",
                effect=types_pb2.TOOL_EFFECT_NON_IDEMPOTENT_WRITE,
                args_json='{"amount": 4200, "card": "tok_visa_4242"}',
            )
        )  # fmt: skip

    def end(self) -> None:
        self.stub.EndAttempt(pb.EndAttemptRequest(attempt_id=self.attempt_id))


@contextmanager
def agent(config: Config, log: Path, run_id: str, rule: str) -> Iterator[tuple[Agent, object]]:
    sidecar = spawn_sidecar(config, log)
    channel = grpc.insecure_channel(sidecar.target)
    try:
        stub = pb_grpc.RunActionsServiceStub(channel)
        lease = timestamp_pb2.Timestamp()
        lease.FromDatetime(datetime.now(UTC) + timedelta(minutes=15))
        attempt = stub.BeginAttempt(
            pb.BeginAttemptRequest(
                run_id=run_id, rule=rule, checkpoint="cp-inbox-17", lease_deadline=lease
            )
        ).attempt_id
        yield Agent(stub, attempt), sidecar
    finally:
        channel.close()
        sidecar.stop()


def make_ledger(config: Config, tmp: Path) -> str:
    """Make the two runs; return the step id left in doubt."""
    log = tmp / "sidecar.log"
    with agent(config, log, "run-digest", "digest") as (a, _):
        t = a.thread("Weekly digest")
        a.notice(t.thread_id, "Digest ready")
        a.create('{"title": "Digest 48"}')
        a.end()
    with agent(config, log, RUN, "billing") as (a, sidecar):
        a.create('{"title": "Refund order 1182", "amount": 4200}')
        t = a.thread("Refund order 1182")
        a.notice(t.thread_id, "Refund approved, charging the card")
        step = a.charge()
        assert step.outcome == types_pb2.OUTCOME_APPLIED
        sidecar.process.kill()  # type: ignore[attr-defined]  # SIGKILL between BeginStep and EndStep
        sidecar.process.wait(10)  # type: ignore[attr-defined]
    with agent(config, log, RUN, "billing") as (a, _):
        assert a.create('{"title": "Refund order 1182", "amount": 4200}').outcome == (
            types_pb2.OUTCOME_ALREADY_APPLIED
        )
        t = a.thread("Refund order 1182")
        a.notice(t.thread_id, "Refund approved, charging the card")
        try:
            a.charge()
            raise AssertionError("the step was not in doubt")
        except grpc.RpcError:
            pass
        a.end()
    return str(step.step_id)


def finish_run(config: Config, tmp: Path) -> pb.BeginStepResponse:
    """Attempt 3, after the decision: the step answers from it, the run goes on."""
    with agent(config, tmp / "sidecar.log", RUN, "billing") as (a, _):
        a.create('{"title": "Refund order 1182", "amount": 4200}')
        step = a.charge()
        a.create('{"title": "Refund order 1182: done", "charge": "ch_3PqL"}')
        a.end()
    return step


@dataclass
class Console:
    served: Served
    url: str

    def stop(self) -> None:
        self.served.stop()


def start_console(
    config: Config,
    tmp: Path,
    *,
    token: bool = True,
    flags: Sequence[str] = (),
    api_token: str | None = None,
) -> Console:
    port = free_port()
    args = ["console", "--listen", f"127.0.0.1:{port}", "--log-format", "json", *flags]
    if token:
        token_file = tmp / "console.token"
        token_file.write_text(TOKEN + "\n")
        args += ["--token-file", str(token_file)]
    probe_headers = {}
    if api_token is not None:
        api_token_file = tmp / "api.token"
        api_token_file.write_text(api_token + "\n")
        args += ["--api-token-file", str(api_token_file)]
        probe_headers["Authorization"] = f"Bearer {api_token}"
    args += ["--audit-dsn", config.audit_dsn] if config.audit_dsn else [
        "--audit-db", str(config.audit_path)]  # fmt: skip
    served = start_cli(tmp / "console.log", *args)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if served.process.poll() is not None:
            raise AssertionError(f"the console exited: {served.log()[-2000:]}")
        try:
            probe = urllib.request.Request(f"{url}/api/status", headers=probe_headers)
            with urllib.request.urlopen(probe, timeout=2) as answer:
                if b'"checking"' not in answer.read():
                    return Console(served, url)
        except OSError:
            pass
        time.sleep(0.1)
    served.stop()
    raise AssertionError(f"the console never answered: {served.log()[-2000:]}")
