"""A run belongs to the rule of its first attempt, across every sidecar sharing the ledger.

Two `actonce serve` processes share one ledger (one SQLite file, or PostgreSQL), one pinned
with `--rules payments` and one with `--rules chat`. The chat sidecar begins the payments
run `pay-7781` under `chat`: it is refused FORBIDDEN before anything is audited, reads no
step result of the run, and does not fence the payments sidecar's live attempt. Two first
attempts of one run begun at once under the two rules never both win.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc
from actonce_api.v1 import types_pb2

from sidecar.ledger.audit_command import open_reader
from tests.harness import ServerProcess, refusal, sidecar_config, spawn_sidecar
from tests.helpers import postgres as pg

NON_IDEMPOTENT = types_pb2.TOOL_EFFECT_NON_IDEMPOTENT_WRITE


def _charge(attempt_id: str) -> pb.BeginStepRequest:
    return pb.BeginStepRequest(
        attempt_id=attempt_id, tool="charge_card", effect=NON_IDEMPOTENT, args_json='{"eur":42}'
    )


@dataclass
class Pair:
    """The payments sidecar and the chat sidecar, and the ledger they share."""

    payments: ServerProcess
    chat: ServerProcess
    ledger: dict[str, Any]  # audit_dsn or audit_db, as `actonce audit` takes them

    def events(self, run_id: str) -> list[tuple[str, str, str]]:
        reader = open_reader(self.ledger)
        try:
            return [(s.event.rule, s.event.rpc, s.event.attempt_id)
                    for s in reader.events(run_id=run_id)]  # fmt: skip
        finally:
            reader.close()


@pytest.fixture(params=["sqlite", "postgres"])
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Pair]:
    made: list[str] = []
    sidecars: list[ServerProcess] = []
    try:
        for rule in ("payments", "chat"):
            extra: tuple[str, ...] = ("--rules", rule)
            if request.param == "postgres":
                if not made:
                    made.append(pg.fresh_database("ledger"))
                config = sidecar_config(tmp_path / rule, audit_dsn=made[0])
            else:
                config = sidecar_config(tmp_path / rule)
                extra += ("--audit-db", str(tmp_path / "shared" / "audit.db"))
            sidecars.append(spawn_sidecar(config, tmp_path / f"{rule}.log", *extra))
        ledger = {"audit_dsn": made[0]} if made else {"audit_db": tmp_path / "shared" / "audit.db"}
        yield Pair(sidecars[0], sidecars[1], ledger)
    finally:
        for running in sidecars:
            running.stop()
        for dsn in made:
            pg.drop_database(dsn)


def _stub(running: ServerProcess) -> tuple[grpc.Channel, pb_grpc.RunActionsServiceStub]:
    channel = grpc.insecure_channel(running.target)
    return channel, pb_grpc.RunActionsServiceStub(channel)


def _begin(stub: pb_grpc.RunActionsServiceStub, run_id: str, rule: str, scope: str = "") -> str:
    request = pb.BeginAttemptRequest(run_id=run_id, rule=rule, checkpoint="cp-1", scope=scope)
    return str(stub.BeginAttempt(request, timeout=10).attempt_id)


def test_a_sidecar_of_another_rule_cannot_begin_the_run_read_its_results_or_fence_it(
    pair: Pair,
) -> None:
    payments, chat = pair.payments, pair.chat
    pay_channel, pay = _stub(payments)
    chat_channel, chat_stub = _stub(chat)
    try:
        live = _begin(pay, "pay-7781", "payments")
        step = pay.BeginStep(_charge(live), timeout=10)
        result = json.dumps({"card_last4": "4242", "charge": "ch_1"})
        pay.EndStep(pb.EndStepRequest(attempt_id=live, step_id=step.step_id, result_json=result))
        audited = pair.events("pay-7781")

        for scope in ("", "tool-call-1"):  # a scoped attempt belongs to the run, and its rule
            with pytest.raises(grpc.RpcError) as caught:
                _begin(chat_stub, "pay-7781", "chat", scope)
            got = refusal(caught.value)
            assert got.code == grpc.StatusCode.PERMISSION_DENIED
            assert (got.reason, got.failure_class, got.domain) == (
                "FORBIDDEN", "PERMANENT", "actonce")  # fmt: skip
            assert {k: got.metadata[k] for k in ("run_id", "rule", "run_rule")} == {
                "run_id": "pay-7781", "rule": "chat", "run_rule": "payments"}  # fmt: skip

        # Nothing was audited for the refused begins: the run's events are as they were.
        assert pair.events("pay-7781") == audited
        assert {rule for rule, _rpc, _attempt in audited} == {"payments"}
        # The payments sidecar's attempt is still the run's newest: it goes on, unfenced,
        # and its ended step is still answered from the ledger, to it alone.
        again = pay.BeginStep(_charge(live), timeout=10)
        assert again.outcome == types_pb2.OUTCOME_APPLIED  # a second call of the tool, its own
        created = pay.Create(
            pb.CreateRequest(attempt_id=live, kind="receipt", data_json='{"n":1}'), timeout=10
        )
        assert created.outcome == types_pb2.OUTCOME_APPLIED
        retried = _begin(pay, "pay-7781", "payments")  # its own rule still begins it
        replay = pay.BeginStep(_charge(retried), timeout=10)
        assert replay.outcome == types_pb2.OUTCOME_ALREADY_APPLIED
        assert json.loads(replay.result_json)["card_last4"] == "4242"
    finally:
        pay_channel.close()
        chat_channel.close()


def test_first_attempts_under_two_rules_at_once_never_both_win(
    pair: Pair,
) -> None:
    payments, chat = pair.payments, pair.chat
    pay_channel, pay = _stub(payments)
    chat_channel, chat_stub = _stub(chat)
    runs = [f"race-{n}" for n in range(40)]

    def begin(side: tuple[pb_grpc.RunActionsServiceStub, str], run: str) -> str:
        stub, rule = side
        try:
            _begin(stub, run, rule)
            return rule
        except grpc.RpcError as error:
            got = refusal(error)
            assert (got.reason, got.metadata["rule"]) == ("FORBIDDEN", rule), got
            return ""

    try:
        with ThreadPoolExecutor(16) as pool:
            sides = [(pay, "payments"), (chat_stub, "chat")]
            futures = {run: [pool.submit(begin, side, run) for side in sides] for run in runs}
            winners = {run: [f.result(30) for f in both] for run, both in futures.items()}
        for run, (by_payments, by_chat) in winners.items():
            # Exactly one rule won each run; every later begin agrees with it.
            assert bool(by_payments) != bool(by_chat), (run, by_payments, by_chat)
            owner = by_payments or by_chat
            assert begin((pay, "payments"), run) == ("payments" if owner == "payments" else "")
            assert begin((chat_stub, "chat"), run) == ("chat" if owner == "chat" else "")
    finally:
        pay_channel.close()
        chat_channel.close()
