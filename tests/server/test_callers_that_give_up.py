"""Callers that give up: a repeat with the same request_id never makes a second copy.

Real ``actonce serve`` and ``actonce store`` processes. Every caller gives its calls
deadlines of a few milliseconds, so most are cut off somewhere in the write path (in
the intent, the store call or the outcome audit), and repeats each call with its
request_id until it is answered, as AIP-155 and every gRPC retry policy tell it to.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from actonce_api.store.v1 import artifact_store_pb2 as spb
from actonce_api.store.v1 import artifact_store_pb2_grpc as spb_grpc
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc
from actonce_api.v1 import types_pb2

from tests.harness import free_port, refusal
from tests.helpers import postgres as pg
from tests.server.processes import Served, start_cli, wait_for_status

CALLERS = 8
CREATES_PER_CALLER = 15


@dataclass
class Stack:
    """A standalone store and a sidecar that reaches it, both child processes."""

    store_target: str
    sidecar_target: str


@pytest.fixture
def stack(backend: str, tmp_path: Path) -> Iterator[Stack]:
    made: list[str] = []
    store_args: list[str] = ["--data-dir", str(tmp_path / "store")]
    ledger_args: list[str] = []
    if backend == "postgres":
        made += [pg.fresh_database("store"), pg.fresh_database("ledger")]
        store_args = ["--store-dsn", made[0]]
        ledger_args = ["--audit-dsn", made[1]]
    store_target = f"127.0.0.1:{free_port()}"
    sidecar_target = f"127.0.0.1:{free_port()}"
    running: list[Served] = []
    try:
        running.append(
            start_cli(tmp_path / "store.log", "store", "--listen", store_target,
                      "--log-format", "json", *store_args)
        )  # fmt: skip
        wait_for_status(store_target, "SERVING", served=running[0])
        running.append(
            start_cli(tmp_path / "sidecar.log", "serve", "--listen", sidecar_target,
                      "--store-target", store_target, "--data-dir", str(tmp_path / "sidecar"),
                      "--log-format", "json", *ledger_args)
        )  # fmt: skip
        wait_for_status(sidecar_target, "SERVING", served=running[1])
        yield Stack(store_target, sidecar_target)
    finally:
        for served in reversed(running):
            served.stop()
        for dsn in made:
            pg.drop_database(dsn)


def _until_answered(call: Callable[..., Any], request: Any, rng: random.Random) -> Any:
    """Repeat ``request`` with deadlines of a few ms, a little longer each time, until
    it is answered; every failure but a passed deadline fails the test."""
    timeout = rng.uniform(0.001, 0.006)
    while True:
        try:
            return call(request, timeout=timeout)
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                raise
        timeout = min(timeout * 1.3, 2.0)


def _artifacts(target: str, kind: str) -> list[spb.StoredArtifact]:
    """Every artifact of ``kind``, page after page."""
    held: list[spb.StoredArtifact] = []
    token = ""
    with grpc.insecure_channel(target) as channel:
        store = spb_grpc.ArtifactStoreServiceStub(channel)
        while True:
            page = store.ListArtifacts(spb.ListArtifactsRequest(kind=kind, page_token=token))
            held.extend(page.artifacts)
            token = page.next_page_token
            if not token:
                return held


def test_creates_repeated_after_their_deadline_land_once(stack: Stack) -> None:
    answers: dict[int, str] = {}
    failures: list[BaseException] = []

    def caller(index: int) -> None:
        rng = random.Random(index)
        try:
            with grpc.insecure_channel(stack.sidecar_target) as channel:
                stub = pb_grpc.RunActionsServiceStub(channel)
                attempt = stub.BeginAttempt(
                    pb.BeginAttemptRequest(run_id=f"run-{index}", rule="triage", checkpoint="c")
                ).attempt_id
                for n in range(CREATES_PER_CALLER):
                    number = index * CREATES_PER_CALLER + n
                    request = pb.CreateRequest(
                        attempt_id=attempt,
                        kind="given-up",
                        data_json=f'{{"n": {number}}}',
                        request_id=f"create-{number}",
                    )
                    answer = _until_answered(stub.Create, request, rng)
                    assert answer.outcome in (
                        types_pb2.OUTCOME_APPLIED,
                        types_pb2.OUTCOME_ALREADY_APPLIED,
                    )
                    answers[number] = answer.id
        except BaseException as error:  # reported by the test's thread below
            failures.append(error)

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(CALLERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert not failures, failures
    held = _artifacts(stack.store_target, "given-up")
    assert len(answers) == CALLERS * CREATES_PER_CALLER
    # One artifact per distinct Create, and each answer names the one the store holds.
    assert len(held) == CALLERS * CREATES_PER_CALLER
    assert {artifact.id for artifact in held} == set(answers.values())


def test_a_step_repeated_after_its_deadline_keeps_its_id_and_never_begins_twice(
    stack: Stack,
) -> None:
    # A BeginStep repeated with its request identity is the step's whole call repeated: the
    # caller gets the go-ahead once, or, when an earlier try began the step and the caller
    # may have sent it meanwhile, learns that it is in doubt (naming the same step); never a
    # second go-ahead for a non-idempotent step.
    rng = random.Random(7)
    tools = [f"pay-{n}" for n in range(12)]
    with grpc.insecure_channel(stack.sidecar_target) as channel:
        stub = pb_grpc.RunActionsServiceStub(channel)
        begin = pb.BeginAttemptRequest(run_id="run-steps", rule="triage", checkpoint="c")
        first = stub.BeginAttempt(begin).attempt_id
        step_ids: dict[str, str] = {}
        ended: set[str] = set()
        for tool in tools:
            request = pb.BeginStepRequest(
                attempt_id=first,
                tool=tool,
                effect=types_pb2.TOOL_EFFECT_NON_IDEMPOTENT_WRITE,
                args_json="{}",
                request_id=f"begin-{tool}",
            )
            try:
                answer = _until_answered(stub.BeginStep, request, rng)
            except grpc.RpcError as error:
                step_ids[tool] = _in_doubt_step(error)
                continue
            assert answer.outcome == types_pb2.OUTCOME_APPLIED
            step_ids[tool] = answer.step_id
            end = pb.EndStepRequest(
                attempt_id=first, step_id=answer.step_id, result_json=f'{{"paid": "{tool}"}}',
                request_id=f"end-{tool}",
            )  # fmt: skip
            assert _until_answered(stub.EndStep, end, rng).outcome == types_pb2.OUTCOME_APPLIED
            ended.add(tool)
            # The same identity again, once the step ended: its result, not a new go-ahead.
            again = stub.BeginStep(request)
            assert (again.outcome, again.result_json) == (
                types_pb2.OUTCOME_ALREADY_APPLIED,
                f'{{"paid":"{tool}"}}',
            )
        # The run's next attempt finds each step ended, or in doubt: none begun twice.
        second = stub.BeginAttempt(begin).attempt_id
        for tool in tools:
            retry = pb.BeginStepRequest(
                attempt_id=second, tool=tool,
                effect=types_pb2.TOOL_EFFECT_NON_IDEMPOTENT_WRITE, args_json="{}",
            )  # fmt: skip
            if tool not in ended:
                with pytest.raises(grpc.RpcError) as caught:
                    stub.BeginStep(retry)
                assert _in_doubt_step(caught.value) == step_ids[tool]
                continue
            again = stub.BeginStep(retry)
            assert (again.step_id, again.outcome, again.result_json) == (
                step_ids[tool],
                types_pb2.OUTCOME_ALREADY_APPLIED,
                f'{{"paid":"{tool}"}}',
            )


def _in_doubt_step(error: grpc.RpcError) -> str:
    """The step an IN_DOUBT refusal names; any other refusal fails the test."""
    got = refusal(error)
    assert got.reason == "IN_DOUBT", (got.reason, got.message)
    return str(got.metadata["step_id"])
