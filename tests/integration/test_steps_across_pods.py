"""At most once for a non-idempotent step needs a ledger that outlives the pod.

A step begun on one sidecar that is then killed (SIGKILL: its pod is gone) is IN_DOUBT on
another sidecar that reads the same durable ledger, when a new attempt of the run makes the same
BeginStep there: PostgreSQL, or one SQLite file on a volume both reach. With a ledger of its own
per pod the other sidecar cannot know, and answers that the step may run: the condition the
README's guarantees and the Kubernetes base state.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc
from actonce_api.v1 import types_pb2

from tests.harness import ServerProcess, begin, refusal, sidecar_config, spawn_sidecar
from tests.helpers import postgres as pg

NON_IDEMPOTENT = types_pb2.TOOL_EFFECT_NON_IDEMPOTENT_WRITE


@pytest.fixture
def databases() -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    for dsn in made:
        pg.drop_database(dsn)


def _pods(ledger: str, tmp_path: Path, databases: list[str]) -> tuple[ServerProcess, ...]:
    """Two sidecars, as in two pods, with their ledgers as ``ledger`` says."""
    pods = []
    for name in ("pod-a", "pod-b"):
        data = tmp_path / name
        extra: tuple[str, ...] = ()
        if ledger == "postgres":
            if not databases:
                databases += [pg.fresh_database("ledger"), pg.fresh_database("store")]
            config = sidecar_config(data, audit_dsn=databases[0], store_dsn=databases[1])
        else:
            config = sidecar_config(data)
            if ledger == "one-sqlite-file":
                extra = ("--audit-db", str(tmp_path / "volume" / "audit.db"))
        pods.append(spawn_sidecar(config, tmp_path / f"{name}.log", *extra))
    return tuple(pods)


def _begin_step(target: str) -> pb.BeginStepResponse:
    with grpc.insecure_channel(target) as channel:
        stub = pb_grpc.RunActionsServiceStub(channel)
        attempt = begin(stub, "run-pay", "billing", "cp-1")
        request = pb.BeginStepRequest(
            attempt_id=attempt, tool="charge_card", effect=NON_IDEMPOTENT, args_json='{"eur":42}'
        )
        return stub.BeginStep(request, timeout=10)


@pytest.mark.parametrize("ledger", ["postgres", "one-sqlite-file"])
def test_a_step_begun_on_a_killed_pod_is_in_doubt_on_another_that_shares_the_ledger(
    ledger: str, tmp_path: Path, databases: list[str]
) -> None:
    first, second = _pods(ledger, tmp_path, databases)
    try:
        began = _begin_step(first.target)
        assert began.outcome == types_pb2.OUTCOME_APPLIED  # the agent now runs the payment...
        first.process.kill()  # ...and its pod dies before EndStep
        first.process.wait(10)
        with pytest.raises(grpc.RpcError) as caught:
            _begin_step(second.target)  # the run, retried on another pod
        got = refusal(caught.value)
        assert (got.reason, got.failure_class) == ("IN_DOUBT", "UNKNOWN")
        assert got.metadata["step_id"] == began.step_id
    finally:
        first.stop()
        second.stop()


def test_with_a_ledger_per_pod_the_other_pod_cannot_know_the_step_began(
    tmp_path: Path, databases: list[str]
) -> None:
    first, second = _pods("per-pod", tmp_path, databases)
    try:
        began = _begin_step(first.target)
        first.process.kill()
        first.process.wait(10)
        again = _begin_step(second.target)
        # The same step, answered "run it": the payment would be made twice.
        assert (again.outcome, again.step_id) == (types_pb2.OUTCOME_APPLIED, began.step_id)
    finally:
        first.stop()
        second.stop()
