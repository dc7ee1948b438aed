"""Least privilege on a PostgreSQL ledger, on the real server.

`actonce audit migrate` creates the schema as the owner and grants a writer role what a
sidecar needs: the writer appends, and fences and binds runs of their own rule through the
ledger's functions; it is refused any UPDATE or DELETE of an event, any checkpoint, any
decision, and any fence or bind written around the functions. Decisions are an operator
role's alone, and `audit verify` names a decision whose author is no operator. A sidecar
started on a ledger it cannot use says why in one line and exits 2.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import psycopg
import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc
from actonce_api.v1 import types_pb2

from sidecar.cli import main
from sidecar.ledger.base import AuditEvent, Phase
from tests.harness import free_port, refusal, sidecar_config, spawn_sidecar
from tests.helpers import postgres as pg
from tests.helpers.env import scrubbed_env
from tests.ledger.support import LedgerPlace
from tests.ledger.test_retention import (  # events as the sidecar writes them
    begin,
    finished_run,
    step_in_doubt,
)


@dataclass(frozen=True)
class Roles:
    owner: str  # the DSN of the ledger's owner (the server's superuser here)
    writer: str  # the same database as the writer role
    role: str
    operator: str  # the same database as the operator role
    operator_role: str


def _role_dsn(dsn: str, role: str) -> str:
    return re.sub(r"://[^@/]+@", f"://{role}@", dsn, count=1)


def _audit(*args: str) -> tuple[int, str, str]:
    """`actonce audit ARGS` in this process, through the command line's entry point."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(["audit", *args])
            code = 0
        except SystemExit as exit_:
            code = int(exit_.code or 0)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def roles() -> Iterator[Roles]:
    owner = pg.fresh_database("roles")
    role = f"writer_{secrets.token_hex(4)}"
    operator = f"operator_{secrets.token_hex(4)}"
    with psycopg.connect(owner, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
        conn.execute(f'CREATE ROLE "{operator}" LOGIN')
        # As PostgreSQL 15 does by default: only the owner creates in the schema.
        conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
    try:
        yield Roles(owner, _role_dsn(owner, role), role, _role_dsn(owner, operator), operator)
    finally:
        pg.drop_database(owner)
        with psycopg.connect(pg.server_dsn(), autocommit=True) as conn:
            conn.execute(f'DROP ROLE IF EXISTS "{role}"')
            conn.execute(f'DROP ROLE IF EXISTS "{operator}"')


def _migrate(roles: Roles) -> None:
    code, out, err = _audit("migrate", "--writer-role", roles.role, "--operator-role",
                            roles.operator_role, "--audit-dsn", roles.owner)  # fmt: skip
    assert code == 0, err
    assert "schema at version" in out and roles.role in out and roles.operator_role in out


def test_the_writer_role_may_append_but_never_update_or_delete_an_event(
    roles: Roles, tmp_path: Path
) -> None:
    _migrate(roles)
    LedgerPlace(None, roles.writer).append(*finished_run("r1"))
    with psycopg.connect(roles.writer, autocommit=True) as conn:
        assert conn.execute("SELECT COUNT(*) FROM audit_events").fetchone() == (4,)
        for statement in (
            "UPDATE audit_events SET derived_id = 'art_forged' WHERE seq = 2",
            "DELETE FROM audit_events WHERE seq = 1",
            "INSERT INTO audit_checkpoints (seq, hash, pruned_at, cut_before, events) "
            "VALUES (4, 'x', 'now', 'now', 4)",
            "DROP TABLE audit_events",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
    code, out, _err = _audit("verify", "--audit-dsn", roles.writer)
    assert code == 0 and "ledger intact: 4 events" in out
    # Pruning is the owner's: the writer is refused, and nothing is removed.
    code, _out, err = _audit("prune", "--before", "0h", "--export", str(tmp_path / "e.jsonl"),
                             "--audit-dsn", roles.writer)  # fmt: skip
    assert code == 2 and "permission denied" in err, err
    with psycopg.connect(roles.owner, autocommit=True) as conn:
        assert conn.execute("SELECT COUNT(*) FROM audit_events").fetchone() == (4,)


def _decision_row(seq: int) -> str:
    """A decision on the payments charge, as a holder of the writer DSN would insert it."""
    return (
        "INSERT INTO audit_events (seq, ts, run_id, attempt_id, rpc, phase, rule, checkpoint, "
        "write_type, derived_id, request_id, occurrence, digest, outcome, reason, "
        "failure_class, detail, prev_hash, hash) VALUES "
        f"({seq}, 'now', 'pay-1', 'p1', 'Resolve', 'decision', 'triage', '', 'step', "
        "'stp_charge', '', 0, '', '', '', '', "
        '\'{"decision":"did_not_run","by":"alice@corp"}\', \'x\', \'y\')'
    )


def test_the_writer_dsn_can_neither_decide_nor_fence_nor_bind_another_rules_run(
    roles: Roles,
) -> None:
    _migrate(roles)
    # The payments pod's run, its charge in doubt, as its sidecar wrote it (as the writer).
    LedgerPlace(None, roles.writer).append(
        begin("pay-1", "p1"), step_in_doubt("pay-1", "p1", "stp_charge")
    )
    # Holding only a pod's writer DSN, another rule's in-doubt charge cannot be decided...
    decide = ("resolve", "stp_charge", "--did-not-run", "--by", "alice@corp", "--reason", "x")
    code, _out, err = _audit(*decide, "--audit-dsn", roles.writer)
    assert code == 1 and f"role {roles.role} may not record a decision" in err, err
    with psycopg.connect(roles.writer, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="may not record"):
            conn.execute(_decision_row(3))  # ...nor by hand
        # ...nor its run fenced or moved to another rule, around the functions...
        for statement in (
            "UPDATE audit_runs SET attempt_id = 'mine' WHERE run_id = 'pay-1'",
            "INSERT INTO audit_runs (run_id, attempt_id) VALUES ('pay-2', 'mine')",
            "INSERT INTO audit_scopes (run_id, scope, attempt_id) VALUES ('pay-1', 's', 'm')",
            "UPDATE audit_run_rules SET rule = 'chat' WHERE run_id = 'pay-1'",
            "INSERT INTO audit_run_rules (run_id, rule) VALUES ('pay-2', 'chat')",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
        # ...or through them, under a rule the run does not have.
        for call in (
            "SELECT audit_fence_run('pay-1', 'mine', 'chat')",
            "SELECT audit_fence_scope('pay-1', 's', 'mine', 'chat')",
            "SELECT audit_bind_run('pay-1', 'chat')",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="belongs to rule"):
                conn.execute(call)
        assert conn.execute("SELECT attempt_id FROM audit_runs").fetchall() == [("p1",)]
        assert conn.execute("SELECT run_id, rule FROM audit_run_rules").fetchall() == [
            ("pay-1", "triage")
        ]
        assert conn.execute("SELECT COUNT(*) FROM audit_scopes").fetchone() == (0,)
    # The sidecar's own scoped begin still fences its scope, as the writer.
    scoped = AuditEvent("pay-1", "p2", "BeginAttempt", Phase.ATTEMPT_BEGIN, rule="triage",
                        scope="tool-1")  # fmt: skip
    LedgerPlace(None, roles.writer).append(scoped)
    with psycopg.connect(roles.owner, autocommit=True) as conn:
        assert conn.execute("SELECT run_id, scope, attempt_id FROM audit_scopes").fetchall() == [
            ("pay-1", "tool-1", "p2")
        ]
    # The operator decides; verify names who did.
    code, out, err = _audit(*decide, "--audit-dsn", roles.operator)
    assert code == 0 and f"by {roles.operator_role}" in out, err
    code, out, _err = _audit("verify", "--audit-dsn", roles.writer)
    assert code == 0 and "decisions: 1 appended by operator roles" in out, out
    # A decision row whose author is no operator (the trigger bypassed by the owner):
    # the chain is intact, and verify still says no operator made it.
    with psycopg.connect(roles.owner, autocommit=True) as conn:
        conn.execute("UPDATE audit_events SET author = %s WHERE phase = 'decision'", (roles.role,))
    code, out, _err = _audit("verify", "--audit-dsn", roles.owner)
    assert code == 1 and "ledger intact" in out, out
    assert f"was appended by role {roles.role}, which is not an operator" in out


def test_migrate_refuses_a_writer_role_that_may_decide(roles: Roles) -> None:
    with psycopg.connect(roles.owner, autocommit=True) as conn:
        conn.execute(f'GRANT "{roles.operator_role}" TO "{roles.role}"')
    code, _out, err = _audit("migrate", "--writer-role", roles.role, "--operator-role",
                             roles.operator_role, "--audit-dsn", roles.owner)  # fmt: skip
    assert code == 2 and "a writer must not be able to decide" in err, err


def test_a_sidecar_runs_fully_as_the_writer_role(roles: Roles, tmp_path: Path) -> None:
    _migrate(roles)
    dsn_file = tmp_path / "dsn"
    dsn_file.write_text(roles.writer + "\n")
    config = sidecar_config(tmp_path / "data")
    log = tmp_path / "writer.log"
    running = spawn_sidecar(config, log, "--audit-dsn-file", str(dsn_file))
    try:
        with grpc.insecure_channel(running.target) as channel:
            stub = pb_grpc.RunActionsServiceStub(channel)
            first = stub.BeginAttempt(pb.BeginAttemptRequest(run_id="r", rule="billing",
                                                             checkpoint="cp")).attempt_id  # fmt: skip
            made = stub.Create(pb.CreateRequest(attempt_id=first, kind="k", data_json='{"a":1}'))
            assert made.outcome == types_pb2.OUTCOME_APPLIED
            step = pb.BeginStepRequest(attempt_id=first, tool="charge", args_json="{}",
                                       effect=types_pb2.TOOL_EFFECT_NON_IDEMPOTENT_WRITE)  # fmt: skip
            began = stub.BeginStep(step)
            # A newer attempt fences the first (which dies in the charge: in doubt).
            second = stub.BeginAttempt(pb.BeginAttemptRequest(run_id="r", rule="billing",
                                                              checkpoint="cp")).attempt_id  # fmt: skip
            with pytest.raises(grpc.RpcError) as fenced:
                stub.Create(pb.CreateRequest(attempt_id=first, kind="k", data_json='{"a":2}'))
            assert refusal(fenced.value).reason == "ATTEMPT_FENCED"
            with pytest.raises(grpc.RpcError) as doubt:
                stub.BeginStep(pb.BeginStepRequest(attempt_id=second, tool="charge",
                                                   args_json="{}", effect=step.effect))  # fmt: skip
            assert refusal(doubt.value).reason == "IN_DOUBT"
            # A person decides, as the operator role: the writer role may not.
            decide = ("resolve", began.step_id, "--ran", "--result-json", '{"charge":"ch_1"}',
                      "--by", "dana", "--reason", "PSP says so")  # fmt: skip
            code, _out, err = _audit(*decide, "--audit-dsn", roles.writer)
            assert code == 1 and "may not record a decision" in err, err
            code, out, err = _audit(*decide, "--audit-dsn", roles.operator)
            assert code == 0, err
            assert f"by {roles.operator_role}" in out
            replay = stub.BeginStep(pb.BeginStepRequest(attempt_id=second, tool="charge",
                                                        args_json="{}", effect=step.effect))  # fmt: skip
            assert replay.outcome == types_pb2.OUTCOME_ALREADY_APPLIED
            assert json.loads(replay.result_json) == {"charge": "ch_1"}
            stub.EndAttempt(pb.EndAttemptRequest(attempt_id=second))
    finally:
        running.stop()
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    assert not [line for line in lines if line.get("event") == "ledger_owned_by_sidecar"]
    (serving,) = [line for line in lines if line.get("event") == "serving"]
    assert serving["ledger"] == roles.writer  # the DSN actually used (it holds no password)
    code, out, _err = _audit("verify", "--audit-dsn", roles.owner)
    assert code == 0, out
    assert "decisions: 1 appended by operator roles" in out
    with psycopg.connect(roles.owner, autocommit=True) as conn:
        (decision,) = conn.execute(
            "SELECT detail, author FROM audit_events WHERE phase = 'decision'"
        ).fetchall()
    # Who decided is the role PostgreSQL authenticated; the name typed is a note beside it.
    assert json.loads(decision[0])["by"] == roles.operator_role == decision[1]
    assert json.loads(decision[0])["by_note"] == "dana"


def test_a_sidecar_that_owns_the_ledger_says_so(roles: Roles, tmp_path: Path) -> None:
    secret = _role_dsn(roles.owner, "postgres:hunter2")  # trust auth ignores the password
    running = spawn_sidecar(sidecar_config(tmp_path / "data", audit_dsn=secret), tmp_path / "o")
    running.stop()
    lines = [json.loads(line) for line in (tmp_path / "o").read_text().splitlines()
             if line.startswith("{")]  # fmt: skip
    assert [line["role"] for line in lines if line.get("event") == "ledger_owned_by_sidecar"] == [
        "postgres"
    ]
    (serving,) = [line for line in lines if line.get("event") == "serving"]
    assert "hunter2" not in json.dumps(lines) and serving["ledger"] == roles.owner


def _serve(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "sidecar.cli", "serve", "--listen",
            f"127.0.0.1:{free_port()}", "--data-dir", str(tmp_path / "data"), *args]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=scrubbed_env())


def test_start_up_errors_are_one_line_and_exit_2(roles: Roles, tmp_path: Path) -> None:
    server = roles.owner.rsplit("/", 1)[0]
    dead = re.sub(r":\d+/", f":{free_port()}/", roles.owner, count=1)
    cases = {
        # A role that may not create the missing schema: the migration is named.
        "missing": (roles.writer, "audit migrate"),
        "unreachable": (dead, "cannot open the PostgreSQL ledger"),
        "no such role": (_role_dsn(roles.owner, "nobody_here"), "nobody_here"),
        "no such database": (f"{server}/no_such_db_{secrets.token_hex(3)}", "does not exist"),
    }
    for name, (dsn, says) in cases.items():
        done = _serve(tmp_path, "--audit-dsn", dsn)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2, (name, done.stderr)
        assert len(lines) == 1 and lines[0].startswith("actonce: error: cannot start:"), (
            name, done.stderr)  # fmt: skip
        assert says in lines[0], (name, lines[0])
    # A schema older than this sidecar needs, which the writer may not upgrade.
    _migrate(roles)
    with psycopg.connect(roles.owner, autocommit=True) as conn:
        conn.execute("DROP TABLE audit_schema")
    done = _serve(tmp_path, "--audit-dsn", roles.writer)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "at version 1" in done.stderr and "audit migrate" in done.stderr
    # A DSN file that is missing, or holds no DSN: one line too, naming the file, not a DSN.
    (tmp_path / "empty").write_text("\n")
    for path in (tmp_path / "absent", tmp_path / "empty"):
        done = _serve(tmp_path, "--audit-dsn-file", str(path))
        assert done.returncode == 2 and str(path) in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
