"""Scoped attempts, edit proposals keyed to their value, the id scheme a run keeps,
and AbortStep: on both backends, through a real sidecar."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path

import grpc
import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import types_pb2

from chaos.store_snapshot import read_postgres_store, read_sqlite_store
from sidecar.ledger import inspect
from sidecar.ledger.audit_command import open_reader
from sidecar.rules import canonical, ids
from tests.conftest import MakeConfig
from tests.harness import RunningSidecar, refusal, start_sidecar
from tests.helpers.locks import ledger_locked
from tests.server.processes import run_cli

APPLIED = types_pb2.OUTCOME_APPLIED
ALREADY = types_pb2.OUTCOME_ALREADY_APPLIED
NON_IDEMPOTENT = types_pb2.TOOL_EFFECT_NON_IDEMPOTENT_WRITE
READ_ONLY = types_pb2.TOOL_EFFECT_READ_ONLY


def _begin(sc: RunningSidecar, run_id: str, scope: str = "", checkpoint: str = "cp") -> str:
    answer = sc.stub.BeginAttempt(
        pb.BeginAttemptRequest(run_id=run_id, rule="triage", checkpoint=checkpoint, scope=scope)
    )
    return str(answer.attempt_id)


def _artifact(sc: RunningSidecar) -> str:
    made = sc.stub.Create(
        pb.CreateRequest(attempt_id=_begin(sc, "setup"), kind="ticket", data_json='{"p":"low"}')
    )
    return str(made.id)


def _propose(sc: RunningSidecar, attempt: str, artifact: str, value: str) -> pb.EditResponse:
    answer: pb.EditResponse = sc.stub.Edit(
        pb.EditRequest(
            attempt_id=attempt,
            artifact_id=artifact,
            path="/priority",
            value_json=json.dumps(value),
            propose=True,
        )
    )
    return answer


def _proposed_values(sc: RunningSidecar, artifact: str) -> list[str]:
    """Every value proposed for the artifact, read from the store's database."""
    rows = (read_postgres_store(sc.config.store_dsn) if sc.config.store_dsn
            else read_sqlite_store(sc.config.store_path))  # fmt: skip
    values = []
    for _kind, _data, artifact_id, patch_json, _base in rows.proposals.values():
        if artifact_id == artifact:
            (op,) = json.loads(patch_json)
            values.append(op["value"])
    return sorted(values)


def _notice(sc: RunningSidecar, attempt: str, thread: str, text: str) -> pb.NoticeResponse:
    request = pb.NoticeRequest(attempt_id=attempt, thread_id=thread, text=text)
    answer: pb.NoticeResponse = sc.stub.Notice(request)
    return answer


def _thread(sc: RunningSidecar) -> str:
    made = sc.stub.CreateThread(pb.CreateThreadRequest(attempt_id=_begin(sc, "setup"), title="t"))
    return str(made.thread_id)


def _refused(call: object) -> tuple[grpc.StatusCode, str, str]:
    assert callable(call)
    with pytest.raises(grpc.RpcError) as caught:
        call()
    got = refusal(caught.value)
    return got.code, got.reason, got.failure_class


# -- edit proposals: a draft for review, keyed to what it proposes --------------------------


def test_each_proposed_value_is_proposed_once_across_retries(sidecar: RunningSidecar) -> None:
    artifact = _artifact(sidecar)
    first = _propose(sidecar, _begin(sidecar, "run-p"), artifact, "high")
    second = _propose(sidecar, _begin(sidecar, "run-p"), artifact, "urgent")
    third = _begin(sidecar, "run-p")
    medium = _propose(sidecar, third, artifact, "medium")
    high_again = _propose(sidecar, third, artifact, "high")

    assert [first.outcome, second.outcome, medium.outcome] == [APPLIED] * 3
    assert (high_again.outcome, high_again.proposal_id) == (ALREADY, first.proposal_id)
    assert len({first.proposal_id, second.proposal_id, medium.proposal_id}) == 3
    assert _proposed_values(sidecar, artifact) == ["high", "medium", "urgent"]


def test_a_direct_edit_stays_keyed_by_its_path(sidecar: RunningSidecar) -> None:
    artifact = _artifact(sidecar)
    attempt = _begin(sidecar, "run-e")
    for value in ("high", "urgent"):
        sidecar.stub.Edit(
            pb.EditRequest(
                attempt_id=attempt, artifact_id=artifact, path="/priority",
                value_json=json.dumps(value),
            )
        )  # fmt: skip
    edits = [e.event for e in sidecar.audit("run-e") if e.event.phase == "intent"]
    expected = [
        ids.derive_id(
            ids.WriteType.EDIT, run_id="run-e", checkpoint="cp", occurrence=n, scheme=2,
            identity=ids.edit_identity(artifact, "/priority"),
        )
        for n in (0, 1)
    ]  # fmt: skip
    assert [e.derived_id for e in edits] == expected  # occurrences 0 and 1 of one key


def test_a_run_keeps_the_id_scheme_it_began_with_across_an_upgrade(
    make_config: MakeConfig, tmp_path: Path
) -> None:
    before = make_config(tmp_path / "data", id_scheme=1)
    sc = start_sidecar(before)
    try:
        artifact = _artifact(sc)
        first = _propose(sc, _begin(sc, "run-u"), artifact, "high")
    finally:
        sc.stop()
    # The upgrade: the same ledger and store, a sidecar that begins new runs on version 2.
    sc = start_sidecar(dataclasses.replace(before, id_scheme=2))
    try:
        retry = sc.stub.BeginAttempt(pb.BeginAttemptRequest(run_id="run-u", rule="triage",
                                                            checkpoint="cp"))  # fmt: skip
        assert retry.id_scheme_version == 1
        again = _propose(sc, retry.attempt_id, artifact, "high")
        assert (again.outcome, again.proposal_id) == (ALREADY, first.proposal_id)
        fresh = sc.stub.BeginAttempt(pb.BeginAttemptRequest(run_id="run-new", rule="triage"))
        assert fresh.id_scheme_version == 2
        scoped = sc.stub.BeginAttempt(
            pb.BeginAttemptRequest(run_id="run-u", rule="triage", scope="call_1")
        )
        assert scoped.id_scheme_version == 2  # a scope has no version-1 form
        assert _proposed_values(sc, artifact) == ["high"]
    finally:
        sc.stop()


# -- scopes: fencing per (run, scope), ids per scope ----------------------------------------


def test_sibling_scopes_and_unscoped_attempts_do_not_fence_each_other(
    sidecar: RunningSidecar,
) -> None:
    thread = _thread(sidecar)
    unscoped = _begin(sidecar, "run-f")
    call_1 = _begin(sidecar, "run-f", scope="call_1")
    call_2 = _begin(sidecar, "run-f", scope="call_2")
    # Each began after the others; none fences another.
    for attempt, text in ((unscoped, "u"), (call_1, "1"), (call_2, "2")):
        assert _notice(sidecar, attempt, thread, text).outcome == APPLIED
    # A new unscoped attempt fences the older unscoped one only.
    _begin(sidecar, "run-f")
    assert _refused(lambda: _notice(sidecar, unscoped, thread, "u2")) == (
        grpc.StatusCode.FAILED_PRECONDITION, "ATTEMPT_FENCED", "RETRYABLE")  # fmt: skip
    for attempt, text in ((call_1, "1b"), (call_2, "2b")):
        assert _notice(sidecar, attempt, thread, text).outcome == APPLIED


def test_a_new_attempt_of_a_scope_fences_that_scopes_older_attempt_only(
    sidecar: RunningSidecar,
) -> None:
    thread = _thread(sidecar)
    old = _begin(sidecar, "run-g", scope="call_1")
    sibling = _begin(sidecar, "run-g", scope="call_2")
    unscoped = _begin(sidecar, "run-g")
    new = _begin(sidecar, "run-g", scope="call_1")
    assert _refused(lambda: _notice(sidecar, old, thread, "x")) == (
        grpc.StatusCode.FAILED_PRECONDITION, "ATTEMPT_FENCED", "RETRYABLE")  # fmt: skip
    step = sidecar.stub.BeginStep
    assert (
        _refused(lambda: step(pb.BeginStepRequest(attempt_id=old, tool="t", args_json="{}")))[1]
        == "ATTEMPT_FENCED"
    )
    for attempt in (new, sibling, unscoped):
        assert _notice(sidecar, attempt, thread, "x").outcome == APPLIED


def test_the_same_write_in_two_scopes_is_two_writes_whatever_their_order(
    sidecar: RunningSidecar,
) -> None:
    thread = _thread(sidecar)
    first = {s: _notice(sidecar, _begin(sidecar, "run-w", scope=s), thread, "Charged.")
             for s in ("call_a", "call_b")}  # fmt: skip
    assert [a.outcome for a in first.values()] == [APPLIED, APPLIED]
    assert first["call_a"].message_id != first["call_b"].message_id
    # The run is retried and the tool calls run in the other order: each lands once.
    again = {s: _notice(sidecar, _begin(sidecar, "run-w", scope=s), thread, "Charged.")
             for s in ("call_b", "call_a")}  # fmt: skip
    for scope in first:
        assert (again[scope].outcome, again[scope].message_id) == (
            ALREADY, first[scope].message_id)  # fmt: skip
    assert [m.text for m in sidecar.messages(thread)] == ["Charged.", "Charged."]
    expected = ids.derive_id(
        ids.WriteType.NOTICE, run_id="run-w", checkpoint="cp", occurrence=0, scope="call_a",
        scheme=2, identity=ids.post_identity(thread, canonical.text_digest("Charged.")),
    )  # fmt: skip
    assert first["call_a"].message_id == expected


def test_a_scope_is_checked_like_a_name(sidecar: RunningSidecar) -> None:
    for scope in ("a\x00b", "x" * 513):
        code, reason, _ = _refused(
            lambda s=scope: sidecar.stub.BeginAttempt(
                pb.BeginAttemptRequest(run_id="r", rule="triage", scope=s)
            )
        )
        assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")


def test_the_audit_keeps_one_run_with_its_scopes(sidecar: RunningSidecar) -> None:
    thread = _thread(sidecar)
    _notice(sidecar, _begin(sidecar, "run-a"), thread, "run's own")
    _notice(sidecar, _begin(sidecar, "run-a", scope="call_1"), thread, "tool 1")
    _notice(sidecar, _begin(sidecar, "run-a", scope="call_2"), thread, "tool 2")
    events = sidecar.audit("run-a")
    assert {e.event.scope for e in events} == {"", "call_1", "call_2"}
    assert all(e.event.scope == "call_1" for e in events if e.event.attempt_id in {
        x.event.attempt_id for x in events if x.event.scope == "call_1"})  # fmt: skip
    reader = open_reader({"audit_dsn": sidecar.config.audit_dsn,
                          "audit_db": sidecar.config.audit_path})  # fmt: skip
    try:
        runs = [r for r in reader.runs() if r.run_id == "run-a"]
        out = io.StringIO()
        inspect.show_run(reader, "run-a", out)
        assert inspect.verify(reader).intact
    finally:
        reader.close()
    assert len(runs) == 1 and runs[0].attempts == 3
    text = out.getvalue()
    assert text.index("unscoped") < text.index("scope 'call_1'") < text.index("scope 'call_2'")


# -- AbortStep ------------------------------------------------------------------------------


def _step(
    sc: RunningSidecar, attempt: str, effect: types_pb2.ToolEffect.ValueType = NON_IDEMPOTENT
) -> pb.BeginStepResponse:
    answer: pb.BeginStepResponse = sc.stub.BeginStep(
        pb.BeginStepRequest(
            attempt_id=attempt, tool="charge", effect=effect, args_json='{"amount": 10}'
        )
    )
    return answer


def _abort(sc: RunningSidecar, attempt: str, step_id: str, request_id: str = "") -> int:
    answer = sc.stub.AbortStep(
        pb.AbortStepRequest(
            attempt_id=attempt, step_id=step_id, reason="connection refused", request_id=request_id
        )
    )
    return int(answer.outcome)


def _end(sc: RunningSidecar, attempt: str, step_id: str) -> int:
    answer = sc.stub.EndStep(
        pb.EndStepRequest(attempt_id=attempt, step_id=step_id, result_json='{"ok": true}')
    )
    return int(answer.outcome)


@pytest.mark.parametrize("scope", ["", "call_1"])
def test_an_aborted_step_runs_in_a_later_attempt(sidecar: RunningSidecar, scope: str) -> None:
    first = _begin(sidecar, "run-ab", scope=scope)
    began = _step(sidecar, first)
    assert _abort(sidecar, first, began.step_id) == APPLIED
    later = _begin(sidecar, "run-ab", scope=scope)
    again = _step(sidecar, later)
    assert (again.step_id, again.outcome) == (began.step_id, APPLIED)  # not IN_DOUBT
    assert _end(sidecar, later, again.step_id) == APPLIED
    done = _step(sidecar, _begin(sidecar, "run-ab", scope=scope))
    assert (done.outcome, json.loads(done.result_json)) == (ALREADY, {"ok": True})
    phases = [e.event.phase for e in sidecar.audit("run-ab") if e.event.derived_id == began.step_id]
    assert "step_abort" in phases


def test_a_step_begun_again_after_its_abort_keeps_its_id(sidecar: RunningSidecar) -> None:
    attempt = _begin(sidecar, "run-re")
    began = _step(sidecar, attempt)
    _abort(sidecar, attempt, began.step_id)
    # Tried again within the attempt (an in-process retry): the same step, the same id.
    again = _step(sidecar, attempt)
    assert (again.step_id, again.outcome) == (began.step_id, APPLIED)
    _end(sidecar, attempt, again.step_id)
    retry = _step(sidecar, _begin(sidecar, "run-re"))
    assert (retry.step_id, retry.outcome) == (began.step_id, ALREADY)


def test_a_try_refused_in_doubt_meanwhile_does_not_keep_an_aborted_step_in_doubt(
    sidecar: RunningSidecar,
) -> None:
    first = _begin(sidecar, "run-d")
    step_id = _step(sidecar, first).step_id
    # A newer attempt (which fences the first) is refused: the step is in doubt.
    assert _refused(lambda: _step(sidecar, _begin(sidecar, "run-d")))[1] == "IN_DOUBT"
    # The first attempt, fenced or not, declares that the effect did not happen.
    assert _abort(sidecar, first, step_id) == APPLIED
    again = _step(sidecar, _begin(sidecar, "run-d"))
    assert (again.step_id, again.outcome) == (step_id, APPLIED)


def test_end_after_abort_and_abort_after_end_are_refused(sidecar: RunningSidecar) -> None:
    attempt = _begin(sidecar, "run-x")
    aborted = _step(sidecar, attempt).step_id
    _abort(sidecar, attempt, aborted)
    assert _refused(lambda: _end(sidecar, attempt, aborted)) == (
        grpc.StatusCode.FAILED_PRECONDITION, "STEP_ABORTED", "REFUSED")  # fmt: skip
    other = _begin(sidecar, "run-y")
    ended = _step(sidecar, other).step_id
    _end(sidecar, other, ended)
    assert _refused(lambda: _abort(sidecar, other, ended)) == (
        grpc.StatusCode.FAILED_PRECONDITION, "STEP_ENDED", "REFUSED")  # fmt: skip
    # A step an earlier attempt ended cannot be aborted either.
    later = _begin(sidecar, "run-y")
    assert _step(sidecar, later).outcome == ALREADY
    assert _refused(lambda: _abort(sidecar, later, ended))[1] == "STEP_ENDED"
    assert _refused(lambda: _abort(sidecar, later, "stp_unknown"))[1] == "UNKNOWN_STEP"


def test_abort_step_replays_its_request_id(sidecar: RunningSidecar) -> None:
    attempt = _begin(sidecar, "run-r")
    step_id = _step(sidecar, attempt).step_id
    assert _abort(sidecar, attempt, step_id, request_id="req-1") == APPLIED
    assert _abort(sidecar, attempt, step_id, request_id="req-1") == APPLIED  # the first answer
    assert _abort(sidecar, attempt, step_id) == ALREADY  # another call: already aborted
    aborts = [e for e in sidecar.audit("run-r") if e.event.phase == "step_abort"]
    assert len(aborts) == 1 and aborts[0].event.detail["reason"] == "connection refused"


def test_an_abort_that_cannot_be_audited_fails_closed(
    make_config: MakeConfig, tmp_path: Path
) -> None:
    sc = start_sidecar(make_config(tmp_path / "data", audit_busy_timeout_ms=200))
    try:
        attempt = _begin(sc, "run-l")
        step_id = _step(sc, attempt).step_id
        with ledger_locked(sc.config):
            got = _refused(lambda: _abort(sc, attempt, step_id))
        assert got[1:] == ("AUDIT_PERSISTENCE_FAILED", "UNKNOWN")
        # Not aborted: a later attempt finds the step in doubt, never runs it again.
        assert _refused(lambda: _step(sc, _begin(sc, "run-l")))[1] == "IN_DOUBT"
    finally:
        sc.stop()


def test_an_aborted_step_is_not_left_to_a_person(sidecar: RunningSidecar) -> None:
    flags = (["--audit-dsn", sidecar.config.audit_dsn] if sidecar.config.audit_dsn
             else ["--audit-db", str(sidecar.config.audit_path)])  # fmt: skip
    attempt = _begin(sidecar, "run-op")
    aborted = _step(sidecar, attempt).step_id
    _abort(sidecar, attempt, aborted)
    assert run_cli("audit", "pending", *flags).returncode == 0
    other = _begin(sidecar, "run-op2")
    in_doubt = _step(sidecar, other).step_id  # begun, neither ended nor aborted
    # While its attempt is live the step is in flight, nobody's to decide; once the
    # attempt ends without ending it, it is in doubt.
    assert run_cli("audit", "pending", *flags).returncode == 0
    sidecar.stub.EndAttempt(pb.EndAttemptRequest(attempt_id=other))
    listed = run_cli("audit", "pending", *flags)
    assert listed.returncode == 3
    assert in_doubt in listed.stdout and aborted not in listed.stdout
    shown = run_cli("audit", "show", "run-op", *flags)
    assert f"AbortStep    {aborted}: step aborted ('connection refused')" in shown.stdout
