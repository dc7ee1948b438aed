"""Security checks: loopback by default, no payload in any log line, no way around the send
allowlist, and a hand-edited ledger caught by ``actonce audit verify``."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import grpc
import psycopg
import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc
from actonce_api.v1 import types_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaos.store_snapshot import read_postgres_store, read_sqlite_store
from sidecar import defaults
from sidecar.config import Config
from tests.conftest import MakeConfig
from tests.faults.support import outcome_of, spawn_store
from tests.harness import (
    Refusal,
    RunningSidecar,
    sidecar_config,
    spawn_sidecar,
    start_sidecar,
)
from tests.helpers.env import scrubbed_env
from tests.helpers.health import wait_serving
from tests.helpers.locks import ledger_locked

ROOT = Path(__file__).resolve().parents[2]


# -- loopback by default -----------------------------------------------------------------


def _listening(pid: int) -> set[tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]]:
    """The (address, port) pairs process ``pid`` listens on, read from /proc."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(FileNotFoundError):  # closed while we looked
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found: set[tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]] = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:  # LISTEN
                hexaddr, port = local.split(":")
                raw = bytes.fromhex(hexaddr)
                # /proc writes each 32-bit word in host (little-endian) order.
                packed = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
                address = ipaddress.ip_address(packed)
                found.add((address, int(port, 16)))
    return found


def _loopback(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback  # ::ffff:127.0.0.1, gRPC's dual-stack spelling
    return address.is_loopback


def test_the_default_listener_is_loopback_only(tmp_path: Path) -> None:
    assert defaults.LISTEN.startswith("127.0.0.1:") and Config().listen == defaults.LISTEN
    assert Config().health_listen is None and Config().metrics_listen is None
    # `actonce serve` with no --listen, as an operator starts it.
    env = scrubbed_env()
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "sidecar.cli", "serve"], cwd=tmp_path,
                                   env=env, stdout=out, stderr=out)  # fmt: skip
    try:
        try:
            wait_serving(defaults.LISTEN, process, timeout=20)
        except RuntimeError:
            if "cannot start" in log.read_text():
                pytest.skip(f"{defaults.LISTEN} is taken by another server on this machine")
            raise
        listening = _listening(process.pid)
        assert listening, "the sidecar listens nowhere"
        assert all(_loopback(address) for address, _port in listening), listening
        assert 50051 in {port for _address, port in listening}
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(20)


# -- payloads never logged ----------------------------------------------------------------

MARK = "Pay1oad"  # every payload below carries it, and nothing else does
TEXTS = [f"{MARK}-notice-ünïcode-🚀", f"{MARK}-sent-to-the-pager", f"{MARK}-refused-send"]
DATA = {"title": f"{MARK}-artifact-title", "nested": {"secret": f"{MARK}-nested-value"}}
VALUE = f"{MARK}-edited-value"
ARGS = {"card": f"{MARK}-4111-1111"}
RESULT = {"charged": f"{MARK}-receipt"}
BAD_JSON = '{"' + MARK + '-dup": 1, "' + MARK + '-dup": 2}'


def _full_run(stub: Any, store_process: Any, config: Config, rule_ok: str) -> None:
    """Every RPC, its refusals and its faults, with payloads that say so."""
    attempt = stub.BeginAttempt(
        pb.BeginAttemptRequest(run_id="run-log", rule=rule_ok, checkpoint="c")
    ).attempt_id
    other = stub.BeginAttempt(
        pb.BeginAttemptRequest(run_id="run-log-2", rule="triage", checkpoint="c")
    ).attempt_id
    artifact = stub.Create(
        pb.CreateRequest(attempt_id=attempt, kind="k", data_json=json.dumps(DATA))
    ).id
    stub.Create(
        pb.CreateRequest(attempt_id=attempt, kind="k", data_json=json.dumps(DATA), propose=True)
    )
    thread = stub.CreateThread(pb.CreateThreadRequest(attempt_id=attempt, title="t")).thread_id
    stub.Notice(pb.NoticeRequest(attempt_id=attempt, thread_id=thread, text=TEXTS[0]))
    stub.Send(pb.SendRequest(attempt_id=attempt, thread_id=thread, text=TEXTS[1]))
    stub.Edit(
        pb.EditRequest(
            attempt_id=attempt, artifact_id=artifact, path="/title", value_json=json.dumps(VALUE)
        )
    )
    stub.Edit(
        pb.EditRequest(
            attempt_id=attempt,
            artifact_id=artifact,
            path="/p",
            value_json=json.dumps(VALUE),
            propose=True,
        )
    )
    step = stub.BeginStep(
        pb.BeginStepRequest(
            attempt_id=attempt,
            tool="charge",
            effect=types_pb2.TOOL_EFFECT_NON_IDEMPOTENT_WRITE,
            args_json=json.dumps(ARGS),
        )
    ).step_id
    stub.EndStep(
        pb.EndStepRequest(attempt_id=attempt, step_id=step, result_json=json.dumps(RESULT))
    )
    stub.Read(pb.ReadRequest(attempt_id=attempt, artifact_id=artifact))
    stub.Read(pb.ReadRequest(attempt_id=attempt, thread_id=thread))
    # Refusals: bad input naming a payload, a forbidden send, a patch that does not apply,
    # the ledger locked, the store gone.
    calls: list[tuple[Any, Any]] = [
        (stub.Create, pb.CreateRequest(attempt_id=attempt, kind="k", data_json=BAD_JSON)),
        (stub.Send, pb.SendRequest(attempt_id=other, thread_id=thread, text=TEXTS[2])),
        (
            stub.Edit,
            pb.EditRequest(
                attempt_id=attempt,
                artifact_id=artifact,
                path=f"/no/{MARK}",
                value_json=json.dumps(VALUE),
            ),
        ),
        (stub.Notice, pb.NoticeRequest(attempt_id=attempt, thread_id=f"thr_{MARK}", text=TEXTS[0])),
    ]
    for call, request in calls:
        outcome_of(call, request)
    with ledger_locked(config, by_another_process=True):
        outcome_of(
            stub.Notice, pb.NoticeRequest(attempt_id=attempt, thread_id=thread, text=TEXTS[0] + "!")
        )
    store_process.process.send_signal(signal.SIGKILL)
    store_process.process.wait(10)
    outcome_of(
        stub.Create,
        pb.CreateRequest(attempt_id=attempt, kind="k", data_json=json.dumps({**DATA, "x": 1})),
    )
    outcome_of(stub.Read, pb.ReadRequest(attempt_id=attempt, artifact_id=artifact))


def test_no_payload_appears_in_any_log_line(tmp_path: Path) -> None:
    store = spawn_store(tmp_path / "store", tmp_path / "store.log")
    config = sidecar_config(
        tmp_path / "sidecar", store_target=store.target, audit_busy_timeout_ms=200
    )
    sidecar = spawn_sidecar(config, tmp_path / "sidecar.log", "--log-level", "debug",
                            "--send-allowlist", "pager", "--audit-busy-timeout-ms", "200")  # fmt: skip
    channel = grpc.insecure_channel(sidecar.target)
    try:
        _full_run(pb_grpc.RunActionsServiceStub(channel), store, config, "pager")
    finally:
        channel.close()
        sidecar.process.send_signal(signal.SIGTERM)  # a drain logs too
        sidecar.process.wait(30)
        store.stop()
    lines = [line for name in ("sidecar.log", "store.log")
             for line in (tmp_path / name).read_text(errors="replace").splitlines()]  # fmt: skip
    # The run did log its writes, its refusals, the locked ledger and the outage.
    logged = "\n".join(lines)
    for reason in ("INVALID_ARGUMENT", "FORBIDDEN", "PATCH_FAILED", "NOT_FOUND",
                   "AUDIT_PERSISTENCE_FAILED", "STORE_UNAVAILABLE", "audit_append_failed"):  # fmt: skip
        assert reason in logged
    assert [line for line in lines if MARK in line or MARK.lower() in line.lower()] == []


# -- the send allowlist ---------------------------------------------------------------------


def _turns_and_messages(sc: RunningSidecar) -> tuple[list[str], set[str]]:
    rows = (read_postgres_store(sc.config.store_dsn) if sc.config.store_dsn
            else read_sqlite_store(sc.config.store_path))  # fmt: skip
    return rows.turn_requests, {kind for _thread, kind, _text in rows.messages.values()}


_RPCS = ["Create", "Edit", "Notice", "Send", "CreateThread", "BeginStep", "EndStep", "Read",
         "ExtendLease", "EndAttempt"]  # fmt: skip


@settings(max_examples=60, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip
@given(data=st.data())
def test_no_rpc_asks_for_a_turn_from_a_rule_off_the_allowlist(
    sidecar: RunningSidecar, data: Any
) -> None:
    # Rules that look like "pager" but are not it, and one that is not on the list at all.
    rule = data.draw(
        st.sampled_from(["triage", "Pager", "pager ", " pager", "pager\u200b", "pager,triage", "*"])
    )
    attempt = sidecar.begin(f"run-{rule!r}", rule=rule)
    thread = sidecar.stub.CreateThread(
        pb.CreateThreadRequest(attempt_id=attempt, title="t")
    ).thread_id
    for _ in range(data.draw(st.integers(1, 6))):
        rpc = data.draw(st.sampled_from(_RPCS))
        text = data.draw(st.sampled_from(["hi", "message", "send", "turn", "{}"]))
        request: Any = {
            "Create": pb.CreateRequest(
                attempt_id=attempt,
                kind=data.draw(st.sampled_from(["message", "turn_request", "k"])),
                data_json='{"kind":"message"}',
            ),
            "Edit": pb.EditRequest(
                attempt_id=attempt, artifact_id=thread, path="/kind", value_json='"message"'
            ),
            "Notice": pb.NoticeRequest(attempt_id=attempt, thread_id=thread, text=text),
            "Send": pb.SendRequest(
                attempt_id=attempt, thread_id=thread, text=text, request_id=text
            ),
            "CreateThread": pb.CreateThreadRequest(attempt_id=attempt, title=text),
            "BeginStep": pb.BeginStepRequest(
                attempt_id=attempt,
                tool=data.draw(st.sampled_from(["Send", "send", "RequestTurn"])),
                effect=types_pb2.TOOL_EFFECT_IDEMPOTENT_WRITE,
                args_json=json.dumps({"thread_id": thread, "text": text}),
                # Its own identity: an identical step without one would repeat the step still
                # running (and wait for it), which is not what this test is about.
                request_id=uuid.uuid4().hex,
            ),
            "EndStep": pb.EndStepRequest(attempt_id=attempt, step_id=thread, result_json="{}"),
            "Read": pb.ReadRequest(attempt_id=attempt, thread_id=thread),
            "ExtendLease": pb.ExtendLeaseRequest(attempt_id=attempt),
            "EndAttempt": pb.EndAttemptRequest(attempt_id=attempt),
        }[rpc]
        answer = outcome_of(getattr(sidecar.stub, rpc), request)
        if rpc == "Send":
            # Refused: FORBIDDEN, or UNKNOWN_ATTEMPT once the attempt was ended.
            assert isinstance(answer, Refusal), answer
            assert answer.reason in ("FORBIDDEN", "UNKNOWN_ATTEMPT"), answer
    turns, kinds = _turns_and_messages(sidecar)
    assert turns == [] and kinds <= {"notice"}


# -- a hand-edited ledger -------------------------------------------------------------------

TAMPERS = [
    (
        "an outcome rewritten",
        "UPDATE audit_events SET outcome = 'OUTCOME_ALREADY_APPLIED' WHERE seq = 4",
    ),
    ("an id swapped", "UPDATE audit_events SET derived_id = 'art_someone_else' WHERE seq = 4"),
    ("an event deleted", "DELETE FROM audit_events WHERE seq = 4"),
    ("the last events deleted", "DELETE FROM audit_events WHERE seq >= 4"),
    ("a run renamed", "UPDATE audit_events SET run_id = 'someone-else' WHERE seq = 4"),
]


@pytest.mark.parametrize(("what", "sql"), TAMPERS, ids=[t[0] for t in TAMPERS])
def test_a_ledger_edited_by_hand_is_caught_by_audit_verify(
    make_config: MakeConfig, tmp_path: Path, what: str, sql: str
) -> None:
    config = make_config(tmp_path / "data")
    sc = start_sidecar(config)
    try:
        attempt = sc.begin("run-tamper")
        for n in range(4):
            sc.stub.Create(
                pb.CreateRequest(attempt_id=attempt, kind="k", data_json=json.dumps({"n": n}))
            )
    finally:
        sc.stop()
    where = (
        ["--audit-dsn", config.audit_dsn]
        if config.audit_dsn
        else ["--audit-db", str(config.audit_path)]
    )

    def verify() -> subprocess.CompletedProcess[str]:
        env = scrubbed_env()
        return subprocess.run([sys.executable, "-m", "sidecar.cli", "audit", "verify", *where],
                              capture_output=True, text=True, env=env, timeout=60)  # fmt: skip

    intact = verify()
    assert intact.returncode == 0 and "ledger intact: 9 events" in intact.stdout
    if config.audit_dsn:
        with psycopg.connect(config.audit_dsn, autocommit=True) as conn:
            conn.execute(sql)
    else:
        with sqlite3.connect(config.audit_path) as lite:  # as an operator's sqlite3 shell would
            lite.execute(sql)
    time.sleep(0.01)
    caught = verify()
    assert caught.returncode == 1, caught
    assert "ledger TAMPERED: first bad event #4" in caught.stdout, caught.stdout
