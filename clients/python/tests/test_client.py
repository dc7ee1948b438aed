"""The client against a real sidecar: writes land once, refusals are typed."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import grpc
import pytest
from conftest import SEND_RULE

from actonce_client import (
    ActonceError,
    Attempt,
    Client,
    Counts,
    Effect,
    FailureClass,
    InvalidInput,
    Outcome,
    RawJSON,
    Write,
)
from actonce_client.aio import AsyncClient
from actonce_client.ids import WriteType, create_identity, derive_id, post_identity


def _run_id() -> str:
    return f"run-{uuid.uuid4()}"


def _write_all(attempt: Attempt) -> dict[str, Write]:
    """One run's writes; the retry test makes them again."""
    out = {"thread": attempt.create_thread("Incident 7")}
    out["ticket"] = attempt.create("ticket", {"title": "Disk full", "severity": 2})
    out["edit"] = attempt.edit(out["ticket"].id, "/status", "open")
    out["notice"] = attempt.notice(out["thread"].id, f"Filed {out['ticket'].id}")
    out["send"] = attempt.send(out["thread"].id, f"Please look at {out['ticket'].id}")
    return out


def test_writes_apply(client: Client) -> None:
    run_id = _run_id()
    attempt = client.begin(run_id, SEND_RULE, checkpoint="cp-1")
    written = _write_all(attempt)
    assert {name: w.outcome for name, w in written.items()} == dict.fromkeys(
        written, Outcome.APPLIED
    )
    # The sidecar's id is the one the scheme derives.
    identity = create_identity("ticket", '{"severity":2,"title":"Disk full"}')
    assert written["ticket"].id == derive_id(
        WriteType.CREATE, run_id=run_id, checkpoint="cp-1", identity=identity, occurrence=0
    )

    artifact = attempt.read_artifact(written["ticket"].id)
    assert artifact.data == {"title": "Disk full", "severity": 2, "status": "open"}
    assert (artifact.kind, artifact.version) == ("ticket", written["edit"].version)
    messages = attempt.read_thread(written["thread"].id)
    assert [(m.kind, m.id) for m in messages] == [
        ("notice", written["notice"].id),
        ("message", written["send"].id),
    ]

    step = attempt.begin_step("send_email", Effect.IDEMPOTENT_WRITE, {"to": "ops@example.com"})
    assert not step.done
    assert attempt.end_step(step.id, {"sent": True}) is Outcome.APPLIED
    lease = (datetime.now(UTC) + timedelta(hours=1)).replace(microsecond=0)
    assert attempt.extend_lease(lease) == lease
    # Five writes, and the step: its end is not another write.
    assert attempt.end() == Counts(applied=6, already_applied=0, skipped=0, failed=0)


def test_retried_attempt_gets_the_same_ids_already_applied(client: Client) -> None:
    run_id = _run_id()
    first = _write_all(client.begin(run_id, SEND_RULE, checkpoint="cp-1"))
    # The first attempt dies without ending; the run is retried from its checkpoint.
    retry = client.begin(run_id, SEND_RULE, checkpoint="cp-1")
    again = _write_all(retry)
    assert {n: w.id for n, w in again.items()} == {n: w.id for n, w in first.items()}
    expected = dict.fromkeys(first, Outcome.ALREADY_APPLIED) | {"edit": Outcome.SKIPPED}
    assert {n: w.outcome for n, w in again.items()} == expected
    assert len(retry.read_thread(first["thread"].id)) == 2
    assert retry.end() == Counts(applied=0, already_applied=4, skipped=1, failed=0)


def test_a_finished_step_is_not_made_again(client: Client) -> None:
    run_id = _run_id()
    first = client.begin(run_id, "steps")
    step = first.begin_step("charge_card", Effect.NON_IDEMPOTENT_WRITE, {"amount": 10})
    first.end_step(step.id, {"charged": True})
    retry = client.begin(run_id, "steps")
    again = retry.begin_step("charge_card", Effect.NON_IDEMPOTENT_WRITE, {"amount": 10})
    assert (again.id, again.done, again.result) == (step.id, True, {"charged": True})


def test_scoped_attempts_keep_their_own_ids_and_do_not_fence_each_other(client: Client) -> None:
    run_id = _run_id()
    thread = client.begin(run_id, "scopes").create_thread("Tool calls").id
    calls = [client.begin(run_id, "scopes", "cp-1", scope=s) for s in ("call_1", "call_2")]
    assert [a.scope for a in calls] == ["call_1", "call_2"]
    assert [a.id_scheme_version for a in calls] == [3, 3]
    # The same notice from two tool calls: two writes, neither fenced by the other.
    posted = [a.notice(thread, "Charged.") for a in calls]
    assert [p.outcome for p in posted] == [Outcome.APPLIED, Outcome.APPLIED]
    assert posted[0].id != posted[1].id
    for attempt, write in zip(calls, posted, strict=True):
        identity = post_identity(thread, "Charged.")
        assert write.id == derive_id(
            WriteType.NOTICE, run_id=run_id, checkpoint="cp-1", identity=identity,
            occurrence=0, scope=attempt.scope, scheme=attempt.id_scheme_version,
        )  # fmt: skip
    # A new attempt of call_1 fences the old one only.
    newer = client.begin(run_id, "scopes", "cp-1", scope="call_1")
    with pytest.raises(ActonceError) as fenced:
        calls[0].notice(thread, "late")
    assert (fenced.value.reason, fenced.value.failure_class) == (
        "ATTEMPT_FENCED", FailureClass.RETRYABLE)  # fmt: skip
    assert calls[1].notice(thread, "still on").outcome is Outcome.APPLIED
    assert newer.notice(thread, "Charged.").id == posted[0].id


def test_an_aborted_step_runs_in_a_later_attempt(client: Client) -> None:
    run_id = _run_id()
    first = client.begin(run_id, "steps")
    step = first.begin_step("charge_card", Effect.NON_IDEMPOTENT_WRITE, {"amount": 10})
    assert first.abort_step(step.id, "connection refused") is Outcome.APPLIED
    with pytest.raises(ActonceError) as refused:
        first.end_step(step.id, {"charged": True})
    assert (refused.value.reason, refused.value.failure_class) == (
        "STEP_ABORTED", FailureClass.REFUSED)  # fmt: skip
    retry = client.begin(run_id, "steps")
    again = retry.begin_step("charge_card", Effect.NON_IDEMPOTENT_WRITE, {"amount": 10})
    assert (again.id, again.done) == (step.id, False)
    retry.end_step(again.id, {"charged": True})
    with pytest.raises(ActonceError) as ended:
        retry.abort_step(again.id, "too late")
    assert ended.value.reason == "STEP_ENDED"


@pytest.mark.parametrize("effect", ["CHARGE", "non_idempotent_write", 3, None, Effect.UNSPECIFIED])
def test_a_step_with_a_bad_effect_is_refused_before_anything_is_sent(
    client: Client, effect: object
) -> None:
    run_id = _run_id()
    attempt = client.begin(run_id, "steps")
    with pytest.raises(InvalidInput) as refused:
        attempt.begin_step("charge_card", effect, {"amount": 10})  # type: ignore[arg-type]
    assert (refused.value.reason, refused.value.field) == ("INVALID_ARGUMENT", "effect")
    assert "NON_IDEMPOTENT_WRITE" in str(refused.value)
    # An effect may be given by its name, as the TypeScript client takes it.
    step = attempt.begin_step("charge_card", "NON_IDEMPOTENT_WRITE", {"amount": 10})
    assert step.done is False
    assert attempt.end_step(step.id, {"charged": True}) is Outcome.APPLIED


def test_the_async_client_refuses_a_bad_effect_as_the_client_does(target: str) -> None:
    async def run() -> InvalidInput:
        async with AsyncClient(target) as client:
            attempt = await client.begin(_run_id(), "steps")
            with pytest.raises(InvalidInput) as refused:
                await attempt.begin_step("charge_card", "CHARGE", {"amount": 10})
            step = await attempt.begin_step("charge_card", "READ_ONLY", {"amount": 10})
            assert step.done is False
            return refused.value

    assert asyncio.run(run()).field == "effect"


def test_invalid_json_is_refused(client: Client) -> None:
    attempt = client.begin(_run_id(), "refusals")
    with pytest.raises(ActonceError) as caught:
        attempt.create("ticket", RawJSON("{"))
    error = caught.value
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
    assert error.failure_class is FailureClass.REFUSED
    assert (error.refused, error.retryable, error.permanent, error.unknown) == (
        True, False, False, False,
    )  # fmt: skip
    assert [v.field for v in error.violations] == ["data_json"]


def test_send_off_the_allowlist_is_permanent(client: Client) -> None:
    attempt = client.begin(_run_id(), "not-a-sender")
    thread = attempt.create_thread("Refusals")
    with pytest.raises(ActonceError) as caught:
        attempt.send(thread.id, "may I?")
    assert (caught.value.reason, caught.value.failure_class) == ("FORBIDDEN", "PERMANENT")
    assert caught.value.permanent
    assert caught.value.code is grpc.StatusCode.PERMISSION_DENIED


def test_an_ended_attempt_is_unknown_and_retryable(client: Client) -> None:
    attempt = client.begin(_run_id(), "refusals")
    attempt.end()
    with pytest.raises(ActonceError) as caught:
        attempt.create("ticket", {})
    assert caught.value.reason == "UNKNOWN_ATTEMPT"
    assert caught.value.retryable


def test_request_id_replay(client: Client) -> None:
    attempt = client.begin(_run_id(), "replay")
    first = attempt.create("ticket", {"title": "once"}, request_id="req-1")
    assert attempt.create("ticket", {"title": "once"}, request_id="req-1") == first
    # Without the same request_id the same data is a second, distinct write.
    second = attempt.create("ticket", {"title": "once"})
    assert second.id != first.id and second.outcome is Outcome.APPLIED
    with pytest.raises(ActonceError) as caught:
        attempt.create("ticket", {"title": "other"}, request_id="req-1")
    assert [v.field for v in caught.value.violations] == ["request_id"]
    assert attempt.end().applied == 2  # a replay is not a write


def test_a_request_ids_limit_is_512_bytes_in_any_text(client: Client) -> None:
    attempt = client.begin(_run_id(), "limits")
    at_the_limit = "é" * 256  # 512 bytes of UTF-8, 256 characters
    assert attempt.create("ticket", {}, request_id=at_the_limit).outcome is Outcome.APPLIED
    with pytest.raises(ActonceError) as caught:
        attempt.create("ticket", {}, request_id=at_the_limit + "a")
    assert caught.value.reason == "INVALID_ARGUMENT"
    assert [v.field for v in caught.value.violations] == ["request_id"]
