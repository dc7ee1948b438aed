"""A key the caller chooses, from the client against a real sidecar: a create whose data
holds a timestamp lands once across a redelivery when it names a key; the same key with
other data in one attempt is an ActonceError KEY_REUSED (REFUSED) that changes nothing."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import uuid
from datetime import UTC, datetime

import grpc
import pytest

from actonce_client import ActonceError, Client, Effect, FailureClass, InvalidInput, Outcome, ids
from actonce_client.aio import AsyncClient
from actonce_client.testing import LocalSidecar


def _run_id() -> str:
    return f"run-{uuid.uuid4()}"


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _orders(sidecar: LocalSidecar, run_marker: str) -> list[str]:
    """The data of every artifact of kind order that holds ``run_marker``, as the embedded
    store keeps it (its tables live in the ledger's file)."""
    with sqlite3.connect(f"file:{sidecar.data_dir / 'audit.db'}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT data_json FROM artifacts WHERE kind = 'order'").fetchall()
    return [str(r[0]) for r in rows if run_marker in r[0]]


def test_a_keyed_create_with_a_timestamp_lands_once_across_a_redelivery(
    client: Client, sidecar: LocalSidecar
) -> None:
    run_id = _run_id()
    first = client.begin(run_id, "orders", "cp-1")
    assert first.id_scheme_version == 3
    made = first.create("order", {"run": run_id, "sent_at": _now()}, key="order-o-1")
    assert made.outcome is Outcome.APPLIED
    # The redelivery makes its data again: another timestamp, the same key.
    retry = client.begin(run_id, "orders", "cp-1")
    again = retry.create("order", {"run": run_id, "sent_at": _now() + "Z"}, key="order-o-1")
    assert (again.outcome, again.id) == (Outcome.ALREADY_APPLIED, made.id)
    assert len(_orders(sidecar, run_id)) == 1
    # The id is the key's, derived here as the sidecar derives it.
    identity = ids.keyed_create_identity("order", "order-o-1", scheme=3)
    assert made.id == ids.derive_id(
        ids.WriteType.CREATE, run_id=run_id, checkpoint="cp-1", identity=identity,
        occurrence=0, scheme=3, keyed=True,
    )  # fmt: skip


def test_the_same_key_with_other_data_in_an_attempt_is_key_reused(
    client: Client, sidecar: LocalSidecar
) -> None:
    run_id = _run_id()
    attempt = client.begin(run_id, "orders", "cp-1")
    made = attempt.create("order", {"run": run_id, "order": "o-1"}, key="o-1")
    with pytest.raises(ActonceError) as refused:
        attempt.create("order", {"run": run_id, "order": "o-2"}, key="o-1")
    error = refused.value
    assert (error.code, error.reason, error.failure_class) == (
        grpc.StatusCode.ALREADY_EXISTS, "KEY_REUSED", FailureClass.REFUSED,
    )  # fmt: skip
    assert error.refused and error.metadata["id"] == made.id
    assert [json.loads(data)["order"] for data in _orders(sidecar, run_id)] == ["o-1"]
    thread = attempt.create_thread("Daily report", key="day-1")
    assert attempt.create_thread("Daily report", key="day-2").id != thread.id
    with pytest.raises(ActonceError, match="KEY_REUSED"):
        attempt.create_thread("Weekly report", key="day-1")
    step = attempt.begin_step("mail", Effect.NON_IDEMPOTENT_WRITE, {"at": _now()}, key="m-1")
    attempt.end_step(step.id, "sent")
    with pytest.raises(ActonceError, match="KEY_REUSED"):
        attempt.begin_step("mail", Effect.NON_IDEMPOTENT_WRITE, {"to": "else"}, key="m-1")
    redone = client.begin(run_id, "orders", "cp-1").begin_step(
        "mail", Effect.NON_IDEMPOTENT_WRITE, {"at": _now()}, key="m-1"
    )
    assert (redone.id, redone.done, redone.result) == (step.id, True, "sent")


def test_a_bad_key_is_refused_naming_it(client: Client) -> None:
    attempt = client.begin(_run_id(), "orders")
    with pytest.raises(ActonceError) as refused:
        attempt.create("order", {}, key="k" * 256)
    assert refused.value.reason == "INVALID_ARGUMENT"
    assert [v.field for v in refused.value.violations] == ["key"]
    with pytest.raises(InvalidInput) as local:
        ids.keyed_create_identity("order", "k" * 256, scheme=3)
    assert local.value.field == "key"


def test_the_async_client_names_writes_by_key(target: str) -> None:
    async def run() -> tuple[str, str, str]:
        async with AsyncClient(target) as client:
            run_id = _run_id()
            first = await (await client.begin(run_id, "orders", "cp-1")).create(
                "order", {"run": run_id, "at": _now()}, key="o-1"
            )
            retry = await client.begin(run_id, "orders", "cp-1")
            again = await retry.create("order", {"run": run_id, "at": _now() + "Z"}, key="o-1")
            thread = await retry.create_thread("T", key="t-1")
            return first.id, again.id, thread.id

    first, again, thread = asyncio.run(run())
    assert first == again and thread.startswith("thr_")
