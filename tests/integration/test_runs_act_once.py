"""ADR-0019's Decision, rule by rule, over real gRPC with the real reference store."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest
from actonce_api.store.v1 import artifact_store_pb2 as spb
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import types_pb2

from sidecar.rules.grants import parse_grants
from tests.conftest import MakeConfig
from tests.harness import RunningSidecar, refusal, start_sidecar

APPLIED = types_pb2.OUTCOME_APPLIED
ALREADY = types_pb2.OUTCOME_ALREADY_APPLIED
SKIPPED = types_pb2.OUTCOME_SKIPPED


def _create(sc: RunningSidecar, attempt: str, data: dict[str, Any], **kw: Any) -> Any:
    return sc.stub.Create(
        pb.CreateRequest(attempt_id=attempt, kind="ticket", data_json=json.dumps(data), **kw)
    )


def test_one_handle_per_attempt_serves_every_write_and_read(sidecar: RunningSidecar) -> None:
    attempt = sidecar.begin()
    created = _create(sidecar, attempt, {"title": "a"})
    thread = sidecar.stub.CreateThread(pb.CreateThreadRequest(attempt_id=attempt, title="T"))
    notice = sidecar.stub.Notice(
        pb.NoticeRequest(attempt_id=attempt, thread_id=thread.thread_id, text="hello")
    )
    edit = sidecar.stub.Edit(
        pb.EditRequest(
            attempt_id=attempt, artifact_id=created.id, path="/state", value_json='"open"'
        )
    )
    read = sidecar.stub.Read(pb.ReadRequest(attempt_id=attempt, artifact_id=created.id))
    messages = sidecar.stub.Read(pb.ReadRequest(attempt_id=attempt, thread_id=thread.thread_id))
    assert [created.outcome, thread.outcome, notice.outcome, edit.outcome] == [APPLIED] * 4
    assert json.loads(read.artifact.data_json) == {"title": "a", "state": "open"}
    assert read.artifact.version == 2
    assert [(m.id, m.kind, m.text) for m in messages.messages] == [
        (notice.message_id, "notice", "hello")
    ]
    counts = sidecar.stub.EndAttempt(pb.EndAttemptRequest(attempt_id=attempt))
    assert (counts.applied, counts.already_applied, counts.skipped, counts.failed) == (4, 0, 0, 0)


def test_ids_are_derived_from_run_checkpoint_and_what_the_write_is(sidecar: RunningSidecar) -> None:
    first = _create(sidecar, sidecar.begin("run-1", checkpoint="cp-0"), {"a": 1, "b": 2.0}).id
    # Same run and checkpoint, key order and 2.0 vs 2 differ: the same write.
    again = _create(sidecar, sidecar.begin("run-1", checkpoint="cp-0"), {"b": 2, "a": 1})
    other_checkpoint = _create(sidecar, sidecar.begin("run-1", checkpoint="cp-1"), {"a": 1, "b": 2})
    other_run = _create(sidecar, sidecar.begin("run-2", checkpoint="cp-0"), {"a": 1, "b": 2})
    other_data = _create(sidecar, sidecar.begin("run-1", checkpoint="cp-0"), {"a": 1, "b": 3})
    assert again.id == first and again.outcome == ALREADY
    assert len({first, other_checkpoint.id, other_run.id, other_data.id}) == 4


def _plan(thread_id: str, artifact_id: str) -> list[tuple[str, Any]]:
    """A run's writes; two of them deliberately identical."""
    return [
        ("Create", pb.CreateRequest(kind="ticket", data_json='{"n":1}')),
        ("Create", pb.CreateRequest(kind="ticket", data_json='{"n":1}')),
        ("Create", pb.CreateRequest(kind="ticket", data_json='{"n":2}')),
        ("Create", pb.CreateRequest(kind="ticket", data_json='{"n":3}', propose=True)),
        ("Notice", pb.NoticeRequest(thread_id=thread_id, text="one")),
        ("Notice", pb.NoticeRequest(thread_id=thread_id, text="two")),
        ("Send", pb.SendRequest(thread_id=thread_id, text="your turn")),
        ("Edit", pb.EditRequest(artifact_id=artifact_id, path="/owner", value_json='"ann"')),
        ("Edit", pb.EditRequest(artifact_id=artifact_id, path="/x", value_json="7", propose=True)),
        ("CreateThread", pb.CreateThreadRequest(title="side")),
    ]


def _call(sc: RunningSidecar, attempt: str, rpc: str, request: Any) -> tuple[str, int]:
    request.attempt_id = attempt
    answer = getattr(sc.stub, rpc)(request)
    ident = (
        getattr(answer, "id", "")
        or getattr(answer, "message_id", "")
        or getattr(answer, "thread_id", "")
        or getattr(answer, "proposal_id", "")
        or f"edit:{request.path}"
    )
    return ident, answer.outcome


def _setup(sc: RunningSidecar, rule: str = "pager") -> tuple[str, str]:
    """A thread and an artifact made by a run of ``rule``: its runs reach them."""
    setup = sc.begin("setup-run", rule=rule)
    thread = sc.stub.CreateThread(pb.CreateThreadRequest(attempt_id=setup, title="ops")).thread_id
    artifact = _create(sc, setup, {"owner": None}).id
    return thread, artifact


@pytest.mark.parametrize("how", ["shuffled", "concurrent"])
def test_a_retried_attempt_makes_the_same_writes_with_the_same_ids(
    sidecar: RunningSidecar, how: str
) -> None:
    thread, artifact = _setup(sidecar)
    plan = _plan(thread, artifact)
    first = sidecar.begin("run-r", rule="pager", checkpoint="cp-3")
    ids_first = sorted(_call(sidecar, first, rpc, req)[0] for rpc, req in _plan(thread, artifact))
    retry = sidecar.begin("run-r", rule="pager", checkpoint="cp-3")
    order = list(range(len(plan)))
    random.Random(7).shuffle(order)
    if how == "shuffled":
        answers = [_call(sidecar, retry, *plan[i]) for i in order]
    else:
        # At once, two identical calls are one call unless each has its own request_id.
        for i, (_rpc, request) in enumerate(plan):
            request.request_id = f"call-{i}"
        with ThreadPoolExecutor(max_workers=len(plan)) as pool:
            answers = list(pool.map(lambda i: _call(sidecar, retry, *plan[i]), order))
    assert sorted(ident for ident, _ in answers) == ids_first
    outcomes = [outcome for _, outcome in answers]
    # The direct edit's value is already there: skipped; every other write was made before.
    assert outcomes.count(SKIPPED) == 1
    assert outcomes.count(ALREADY) == len(plan) - 1
    # The store holds each write once: two identical creates are two objects, not four.
    tickets = [json.loads(a.data_json) for a in sidecar.artifacts("ticket")]
    assert sorted(t.get("n", 0) for t in tickets) == [0, 1, 1, 2]
    assert [m.text for m in sidecar.messages(thread)] == ["one", "two", "your turn"]
    artifact_now = sidecar.store.GetArtifact(spb.GetArtifactRequest(artifact_id=artifact)).artifact
    assert artifact_now.version == 2


def test_a_create_made_before_answers_the_version_the_store_holds(sidecar: RunningSidecar) -> None:
    first = sidecar.begin("run-v", checkpoint="cp-1")
    made = _create(sidecar, first, {"n": 1})
    assert (made.outcome, made.version) == (APPLIED, 1)
    edit = pb.EditRequest(attempt_id=first, artifact_id=made.id, path="/n", value_json="2")
    assert sidecar.stub.Edit(edit).version == 2
    # Redelivered, the run makes the create again: it finds the artifact and says its
    # version, as a read would, not the 0 of "no version".
    again = _create(sidecar, sidecar.begin("run-v", checkpoint="cp-1"), {"n": 1})
    assert (again.id, again.outcome, again.version) == (made.id, ALREADY, 2)


def test_two_identical_writes_in_one_attempt_make_two_distinct_objects(
    sidecar: RunningSidecar,
) -> None:
    thread, _ = _setup(sidecar, rule="triage")
    attempt = sidecar.begin("run-twice")
    a = _create(sidecar, attempt, {"same": True})
    b = _create(sidecar, attempt, {"same": True})
    n1 = sidecar.stub.Notice(pb.NoticeRequest(attempt_id=attempt, thread_id=thread, text="x"))
    n2 = sidecar.stub.Notice(pb.NoticeRequest(attempt_id=attempt, thread_id=thread, text="x"))
    assert a.id != b.id and n1.message_id != n2.message_id
    assert [a.outcome, b.outcome, n1.outcome, n2.outcome] == [APPLIED] * 4
    assert len([x for x in sidecar.artifacts("ticket") if x.data_json == '{"same":true}']) == 2


def test_two_attempts_of_one_run_at_the_same_time_land_each_write_once(
    sidecar: RunningSidecar,
) -> None:
    """The newer attempt fences the older: the older's later writes are refused
    (ATTEMPT_FENCED, RETRYABLE) and the store still holds each write once."""
    thread, artifact = _setup(sidecar)
    older = sidecar.begin("run-dup", rule="pager", checkpoint="c")
    plan = _plan(thread, artifact)
    newer_began = threading.Event()
    older_results: list[tuple[str, Any]] = []

    def run_older() -> None:
        for index, (rpc, request) in enumerate(_plan(thread, artifact)):
            if index == 3:
                newer_began.wait(10)
            try:
                older_results.append(("ok", _call(sidecar, older, rpc, request)))
            except grpc.RpcError as error:
                older_results.append(("refused", refusal(error)))

    with ThreadPoolExecutor(max_workers=1) as pool:
        done = pool.submit(run_older)
        while len(older_results) < 3:
            time.sleep(0.01)
        newer = sidecar.begin("run-dup", rule="pager", checkpoint="c")
        newer_began.set()
        newer_results = [_call(sidecar, newer, rpc, req) for rpc, req in plan]
        done.result(30)
    assert [kind for kind, _ in older_results] == ["ok"] * 3 + ["refused"] * (len(plan) - 3)
    for _, got in older_results[3:]:
        assert (got.reason, got.failure_class) == ("ATTEMPT_FENCED", "RETRYABLE")
    assert [o for _, o in newer_results[:3]] == [ALREADY] * 3
    assert [o for _, o in newer_results[3:]] == [APPLIED] * (len(plan) - 3)
    tickets = [json.loads(a.data_json) for a in sidecar.artifacts("ticket")]
    assert sorted(t.get("n", 0) for t in tickets) == [0, 1, 1, 2]
    assert len(sidecar.messages(thread)) == 3


def test_a_refusal_counts_as_done_only_when_the_only_problem_is_a_used_id(
    sidecar: RunningSidecar,
) -> None:
    artifact = _create(sidecar, sidecar.begin("setup"), {"x": 0}).id
    request = pb.EditRequest(artifact_id=artifact, path="/x", value_json="1", propose=True)
    first = sidecar.begin("run-p", checkpoint="c")
    request.attempt_id = first
    proposed = sidecar.stub.Edit(request)
    assert proposed.outcome == APPLIED and proposed.proposal_id.startswith("prp_")
    request.attempt_id = sidecar.begin("run-p", checkpoint="c")
    again = sidecar.stub.Edit(request)
    assert (again.outcome, again.proposal_id) == (ALREADY, proposed.proposal_id)
    # Archived meanwhile: not a used id alone, so the run fails (PERMANENT).
    sidecar.store.ArchiveArtifact(spb.ArchiveArtifactRequest(artifact_id=artifact))
    request.attempt_id = sidecar.begin("run-p", checkpoint="c")
    with pytest.raises(grpc.RpcError) as caught:
        sidecar.stub.Edit(request)
    got = refusal(caught.value)
    assert (got.reason, got.failure_class) == ("INVALID_STATE", "PERMANENT")


def test_an_edit_of_an_archived_artifact_is_refused_before_it_is_tried(
    sidecar: RunningSidecar,
) -> None:
    artifact = _create(sidecar, sidecar.begin("setup"), {"x": 0}).id
    sidecar.store.ArchiveArtifact(spb.ArchiveArtifactRequest(artifact_id=artifact))
    attempt = sidecar.begin("run-a")
    with pytest.raises(grpc.RpcError) as caught:
        sidecar.stub.Edit(
            pb.EditRequest(attempt_id=attempt, artifact_id=artifact, path="/x", value_json="1")
        )
    got = refusal(caught.value)
    assert (got.code, got.reason, got.failure_class) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "INVALID_STATE",
        "PERMANENT",
    )
    stored = sidecar.store.GetArtifact(spb.GetArtifactRequest(artifact_id=artifact)).artifact
    assert (stored.version, stored.data_json) == (1, '{"x":0}')


def test_no_read_back_a_notice_is_posted_once_by_the_stores_refusal(
    sidecar: RunningSidecar,
) -> None:
    thread, _ = _setup(sidecar, rule="triage")
    ids = set()
    for _ in range(3):
        attempt = sidecar.begin("run-n", checkpoint="c")
        ids.add(
            sidecar.stub.Notice(
                pb.NoticeRequest(attempt_id=attempt, thread_id=thread, text="deploy started")
            ).message_id
        )
    assert len(ids) == 1
    assert [m.text for m in sidecar.messages(thread)] == ["deploy started"]
    # No read-back: the ledger holds no read of the thread, only the writes.
    reads = [e for e in sidecar.audit("run-n") if e.event.phase == "read"]
    assert reads == []


def test_an_edit_sets_one_value_and_repeating_it_changes_nothing_not_even_the_version(
    sidecar: RunningSidecar,
) -> None:
    artifact = _create(sidecar, sidecar.begin("setup"), {"tags": {"a": 1}}).id
    edit = pb.EditRequest(artifact_id=artifact, path="/tags/b", value_json="2.0")
    edit.attempt_id = sidecar.begin("run-e")
    assert (sidecar.stub.Edit(edit).outcome, sidecar.stub.Edit(edit).outcome) == (APPLIED, SKIPPED)
    edit.attempt_id = sidecar.begin("run-e")
    edit.value_json = "2"  # JSON-equal to 2.0
    repeat = sidecar.stub.Edit(edit)
    stored = sidecar.store.GetArtifact(spb.GetArtifactRequest(artifact_id=artifact)).artifact
    assert (repeat.outcome, repeat.version, stored.version) == (SKIPPED, 2, 2)
    assert json.loads(stored.data_json) == {"tags": {"a": 1, "b": 2}}


def test_an_append_is_refused_a_rule_names_each_entry(sidecar: RunningSidecar) -> None:
    artifact = _create(sidecar, sidecar.begin("setup"), {"items": []}).id
    with pytest.raises(grpc.RpcError) as caught:
        sidecar.stub.Edit(
            pb.EditRequest(
                attempt_id=sidecar.begin(), artifact_id=artifact, path="/items/-", value_json="1"
            )
        )
    got = refusal(caught.value)
    assert (got.reason, got.failure_class, got.fields) == ("INVALID_ARGUMENT", "REFUSED", ["path"])


def test_an_edit_made_by_proposal_derives_its_proposal_id(sidecar: RunningSidecar) -> None:
    artifact = _create(sidecar, sidecar.begin("setup"), {"x": 0}).id
    answers = []
    for checkpoint in ("c", "c", "d"):
        answers.append(
            sidecar.stub.Edit(
                pb.EditRequest(
                    attempt_id=sidecar.begin("run-prop", checkpoint=checkpoint),
                    artifact_id=artifact,
                    path="/x",
                    value_json="5",
                    propose=True,
                )
            )
        )
    assert answers[0].proposal_id == answers[1].proposal_id != answers[2].proposal_id
    proposal = sidecar.store.GetProposal(spb.GetProposalRequest(proposal_id=answers[0].proposal_id))
    assert json.loads(proposal.patch_json) == [{"op": "add", "path": "/x", "value": 5}]
    stored = sidecar.store.GetArtifact(spb.GetArtifactRequest(artifact_id=artifact)).artifact
    assert stored.version == 1  # a proposal changes nothing until accepted


@pytest.fixture
def posting_sidecar(make_config: MakeConfig, tmp_path: Path) -> Iterator[RunningSidecar]:
    """Send allowed to pager, and triage granted posting into pager's threads."""
    grants = parse_grants('{"grants": [{"rule": "triage", "owner": "pager", "threads": ["post"]}]}')
    config = make_config(tmp_path / "data", send_allowlist=frozenset({"pager"}), grants=grants)
    running = start_sidecar(config)
    try:
        yield running
    finally:
        running.stop()


def test_notices_by_default_send_only_for_a_rule_on_the_allowlist(
    posting_sidecar: RunningSidecar,
) -> None:
    sidecar = posting_sidecar
    thread, _ = _setup(sidecar)
    notice = sidecar.stub.Notice(
        pb.NoticeRequest(attempt_id=sidecar.begin(rule="triage"), thread_id=thread, text="fyi")
    )
    with pytest.raises(grpc.RpcError) as caught:
        sidecar.stub.Send(
            pb.SendRequest(attempt_id=sidecar.begin(rule="triage"), thread_id=thread, text="go")
        )
    got = refusal(caught.value)
    assert (got.code, got.reason, got.failure_class) == (
        grpc.StatusCode.PERMISSION_DENIED,
        "FORBIDDEN",
        "PERMANENT",
    )
    sent = sidecar.stub.Send(
        # A run of the pager rule (a run belongs to the rule it began under).
        pb.SendRequest(attempt_id=sidecar.begin("run-2", rule="pager"), thread_id=thread, text="go")
    )
    kinds = [(m.kind, m.text) for m in sidecar.messages(thread)]
    assert kinds == [("notice", "fyi"), ("message", "go")]  # the refused send never landed
    turns = sidecar.store.ListTurnRequests(spb.ListTurnRequestsRequest(thread_id=thread))
    assert list(turns.message_ids) == [sent.message_id]
    assert notice.message_id not in turns.message_ids
