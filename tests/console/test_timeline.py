"""A run's events drawn as a timeline: entries, their states, the attempts' lanes."""

from __future__ import annotations

from sidecar.console.timeline import build
from sidecar.ledger.base import AuditEvent, StoredEvent


def stored(seq: int, attempt: str, phase: str, derived: str = "", **fields: object) -> StoredEvent:
    rpc = str(fields.pop("rpc", "Create"))
    ts = f"2026-11-30T08:00:{seq:02d}.000000+00:00"
    event = AuditEvent("run-1", attempt, rpc, phase, rule="triage", derived_id=derived, **fields)  # type: ignore[arg-type]
    return StoredEvent(seq, ts, event, "", "")


STEP = {"tool": "charge_card", "effect": "NON_IDEMPOTENT_WRITE"}


def test_writes_pair_intent_and_outcome_and_retries_show_already_applied() -> None:
    events = [
        stored(1, "a1", "attempt_begin", detail={"lease_deadline": "2026-11-30T09:00:00+00:00"}),
        stored(2, "a1", "intent", "art_1"),
        stored(4, "a1", "outcome", "art_1", outcome="OUTCOME_APPLIED"),
        stored(5, "a1", "step_begin", "stp_1", rpc="BeginStep", detail=STEP),
        stored(6, "a1", "outcome", "stp_1", rpc="BeginStep", outcome="OUTCOME_APPLIED"),
        stored(7, "a2", "attempt_begin"),
        stored(8, "a2", "intent", "art_1"),
        stored(9, "a2", "outcome", "art_1", outcome="OUTCOME_ALREADY_APPLIED"),
        stored(10, "a2", "step_begin", "stp_1", rpc="BeginStep", detail=STEP),
        stored(
            11,
            "a2",
            "outcome",
            "stp_1",
            rpc="BeginStep",
            reason="IN_DOUBT",
            failure_class="UNKNOWN",
        ),
        stored(12, "a2", "outcome", "", rpc="Send", reason="FORBIDDEN", failure_class="PERMANENT"),
        stored(
            13,
            "a2",
            "attempt_end",
            detail={"applied": 0, "already_applied": 1, "skipped": 0, "failed": 2, "front": "mcp"},
        ),
    ]
    view = build("run-1", events, {"stp_1"})
    first, second = view.attempts
    assert (first.number, first.fenced_by, first.lease_deadline[:16]) == (1, 2, "2026-11-30T09:00")
    assert (second.number, second.fenced_by, second.ended_ts != "") == (2, 0, True)
    # The end's detail also names the front it came through: the counts are the counts.
    assert second.counts == {"applied": 0, "already_applied": 1, "skipped": 0, "failed": 2}
    kinds = [(e.kind, e.state, e.attempt.number if e.attempt else 0) for e in view.entries]
    assert kinds == [
        ("attempt_begin", "", 1),
        ("write", "applied", 1),
        ("step", "in_doubt", 1),
        ("attempt_begin", "", 2),
        ("write", "already_applied", 2),
        ("step", "in_doubt_refused", 2),
        ("refusal", "refused", 2),
        ("attempt_end", "", 2),
    ]
    assert view.entries[1].elapsed_ms == 2000.0  # intent at :02, outcome at :04
    assert view.entries[3].fences == 1


def test_a_decided_step_shows_the_decision_and_no_longer_in_doubt() -> None:
    events = [
        stored(1, "a1", "attempt_begin"),
        stored(2, "a1", "step_begin", "stp_1", rpc="BeginStep", detail=STEP),
        stored(3, "a1", "outcome", "stp_1", rpc="BeginStep", outcome="OUTCOME_APPLIED"),
        stored(
            4,
            "a1",
            "decision",
            "stp_1",
            rpc="Resolve",
            detail={"decision": "ran", "by": "dana", "reason": "r", "result_json": '{"ok":true}'},
        ),
    ]
    events += [
        stored(5, "a2", "attempt_begin"),
        stored(6, "a2", "step_begin", "stp_1", rpc="BeginStep", detail=STEP),
        stored(7, "a2", "outcome", "stp_1", rpc="BeginStep", outcome="OUTCOME_ALREADY_APPLIED"),
    ]
    view = build("run-1", events, set())
    assert view.entries[-1].state == "already_applied" and view.entries[-1].by_decision
    view = build("run-1", events[:4], set())
    assert [(e.kind, e.state) for e in view.entries[1:]] == [
        ("step", "decided_ran"),
        ("decision", "ran"),
    ]
    assert view.entries[-1].result_json == '{"ok":true}'


def test_scoped_attempts_fence_only_their_own_scope_and_an_aborted_step_shows() -> None:
    events = [
        stored(1, "a1", "attempt_begin", scope="call_1"),
        stored(2, "b1", "attempt_begin", scope="call_2"),
        stored(3, "a1", "step_begin", "stp_1", rpc="BeginStep", detail=STEP, scope="call_1"),
        stored(4, "a1", "outcome", "stp_1", rpc="BeginStep", outcome="OUTCOME_APPLIED"),
        stored(5, "a1", "step_abort", "stp_1", rpc="AbortStep", scope="call_1"),
        stored(6, "a2", "attempt_begin", scope="call_1"),
    ]
    view = build("run-1", events, set())
    a1, b1, a2 = view.attempts
    assert [(a.scope, a.fenced_by) for a in view.attempts] == [
        ("call_1", a2.number),
        ("call_2", 0),
        ("call_1", 0),
    ]
    assert [e.fences for e in view.entries if e.kind == "attempt_begin"] == [0, 0, a1.number]
    (step,) = [e for e in view.entries if e.kind == "step"]
    assert step.state == "aborted"
    assert b1.number == 2


def test_parallel_tool_calls_are_grouped_by_scope_in_the_order_they_began() -> None:
    # A delivery and two tool calls of it whose writes interleave; the first call retried.
    events = [
        stored(1, "d1", "attempt_begin"),
        stored(2, "a1", "attempt_begin", scope="call_1"),
        stored(3, "b1", "attempt_begin", scope="call_2"),
        stored(4, "a1", "intent", "art_a", scope="call_1"),
        stored(5, "b1", "intent", "art_b", scope="call_2"),
        stored(6, "b1", "outcome", "art_b", outcome="OUTCOME_APPLIED", scope="call_2"),
        stored(7, "a2", "attempt_begin", scope="call_1"),
        stored(8, "a2", "intent", "art_a", scope="call_1"),
        stored(9, "a2", "outcome", "art_a", outcome="OUTCOME_ALREADY_APPLIED", scope="call_1"),
        stored(10, "d1", "attempt_end", detail={"applied": 0}),
    ]
    view = build("run-1", events, set())
    assert [g.scope for g in view.scopes] == ["", "call_1", "call_2"]
    unscoped, first, second = view.scopes
    assert [a.attempt_id for a in first.attempts] == ["a1", "a2"]
    assert [(e.seq, e.kind) for e in first.entries] == [
        (2, "attempt_begin"), (4, "write"), (7, "attempt_begin"), (8, "write"),
    ]  # fmt: skip
    assert [e.state for e in first.entries if e.kind == "write"] == [
        "no_outcome",
        "already_applied",
    ]
    assert [(e.seq, e.kind) for e in second.entries] == [(3, "attempt_begin"), (5, "write")]
    assert [e.seq for e in unscoped.entries] == [1, 10]
    assert first.attempts[0].fenced_by == first.attempts[1].number  # within its own scope
    # A page that starts after an attempt's begin still files its events under their scope.
    later = build("run-1", events[7:], set())
    assert [(g.scope, [e.seq for e in g.entries]) for g in later.scopes] == [
        ("", [10]), ("call_1", [8]),
    ]  # fmt: skip
    # A run without scopes is one group, drawn as before.
    assert [g.scope for g in build("run-1", events[:1] + events[-1:], set()).scopes] == [""]
