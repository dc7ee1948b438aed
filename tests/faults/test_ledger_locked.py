"""The audit ledger locked by another process, on both backends.

Writes fail closed within the ledger's busy timeout (AUDIT_PERSISTENCE_FAILED, UNKNOWN) and
never reach the store; reads keep answering (their audit is fail-soft); when the other
process lets go, the same attempt goes on, with no restart.
"""

from __future__ import annotations

import time
from pathlib import Path

import grpc
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import types_pb2

from sidecar.ledger import inspect
from sidecar.ledger.audit_command import open_reader
from tests.conftest import MakeConfig
from tests.faults.support import data, outcome_of
from tests.harness import Refusal, start_sidecar
from tests.helpers.locks import ledger_locked


def test_a_ledger_locked_by_another_process_fails_writes_closed_and_reads_answer(
    make_config: MakeConfig, tmp_path: Path
) -> None:
    sc = start_sidecar(make_config(tmp_path / "data", audit_busy_timeout_ms=300))
    try:
        attempt = sc.begin("run-locked")
        kept = sc.stub.Create(pb.CreateRequest(attempt_id=attempt, kind="k", data_json=data(0)))
        thread = sc.stub.CreateThread(pb.CreateThreadRequest(attempt_id=attempt, title="t"))
        with ledger_locked(sc.config, by_another_process=True):
            started = time.monotonic()
            writes = [
                outcome_of(
                    sc.stub.Create,
                    pb.CreateRequest(attempt_id=attempt, kind="k", data_json=data(1)),
                ),
                outcome_of(
                    sc.stub.Notice,
                    pb.NoticeRequest(attempt_id=attempt, thread_id=thread.thread_id, text="x"),
                ),
                outcome_of(
                    sc.stub.Edit,
                    pb.EditRequest(
                        attempt_id=attempt, artifact_id=kept.id, path="/n", value_json="5"
                    ),
                ),
                outcome_of(
                    sc.stub.BeginStep,
                    pb.BeginStepRequest(
                        attempt_id=attempt,
                        tool="pay",
                        effect=types_pb2.TOOL_EFFECT_NON_IDEMPOTENT_WRITE,
                        args_json="{}",
                    ),
                ),
                outcome_of(
                    sc.stub.BeginAttempt,
                    pb.BeginAttemptRequest(run_id="run-other", rule="r", checkpoint="c"),
                ),
            ]
            elapsed = time.monotonic() - started
            read = outcome_of(sc.stub.Read, pb.ReadRequest(attempt_id=attempt, artifact_id=kept.id))
            messages = outcome_of(
                sc.stub.Read, pb.ReadRequest(attempt_id=attempt, thread_id=thread.thread_id)
            )
        for refused in writes:
            assert isinstance(refused, Refusal), refused
            assert (refused.code, refused.reason, refused.failure_class) == (
                grpc.StatusCode.INTERNAL,
                "AUDIT_PERSISTENCE_FAILED",
                "UNKNOWN",
            )
        assert elapsed < 5 * 3  # each within a few busy timeouts, not hung
        # Nothing reached the store: the intent could not be stored first.
        assert [a.id for a in sc.artifacts("k")] == [kept.id]
        assert sc.messages(thread.thread_id) == []
        # Reads answered all along.
        assert not isinstance(read, Refusal) and read.artifact.id == kept.id
        assert not isinstance(messages, Refusal) and list(messages.messages) == []
        # The lock is gone: the same attempt goes on, and each write lands once.
        again = sc.stub.Create(pb.CreateRequest(attempt_id=attempt, kind="k", data_json=data(1)))
        assert again.outcome == types_pb2.OUTCOME_APPLIED
        edit = sc.stub.Edit(
            pb.EditRequest(attempt_id=attempt, artifact_id=kept.id, path="/n", value_json="5")
        )
        assert edit.outcome == types_pb2.OUTCOME_APPLIED
        assert len(sc.artifacts("k")) == 2
        reader = open_reader({"audit_dsn": sc.config.audit_dsn, "audit_db": sc.config.audit_path})
        try:
            assert inspect.verify(reader).intact
        finally:
            reader.close()
    finally:
        sc.stop()
