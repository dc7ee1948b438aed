"""Every request field of every RPC, drawn at random, against a live sidecar on both backends.

Whatever the request, the sidecar answers: either success, or a status carrying ErrorInfo
whose code is never UNKNOWN or INTERNAL (no ledger fails here, so AUDIT_PERSISTENCE_FAILED
cannot be the reason), and whose BadRequest names a field the request has. A request the
sidecar refuses as bad input leaves the ledger and the store as they were; one the store
refuses leaves the store as it was and no audit outcome that says applied. The sidecar is
SERVING after every example.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from actonce_api.store.v1 import artifact_store_pb2 as spb
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import types_pb2
from google.protobuf import timestamp_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from chaos.store_snapshot import StoreSnapshot, read_postgres_store, read_sqlite_store
from sidecar.ledger.audit_command import open_reader
from sidecar.rules.canonical import MAX_JSON_BYTES, MAX_NAME_BYTES, MAX_TEXT_BYTES
from tests.harness import RunningSidecar, refusal

SERVICE = pb.DESCRIPTOR.services_by_name["RunActionsService"]
EXAMPLES = int(os.environ.get("ACTONCE_FUZZ_EXAMPLES", "40"))
FORBIDDEN_CODES = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}
FRESH = "<a new attempt>"  # stands for an attempt begun for this example alone


@dataclass
class World:
    """What exists for random requests to name: an attempt, artifacts, a thread, a step."""

    sc: RunningSidecar
    attempt: str
    artifact: str
    archived: str
    thread: str
    step: str
    runs: int = 0

    def store(self) -> StoreSnapshot:
        config = self.sc.config
        if config.store_dsn:
            return read_postgres_store(config.store_dsn)
        return read_sqlite_store(config.store_path)

    def ledger(self) -> tuple[int, list[Any]]:
        """How many events the ledger holds, and every event (oldest first)."""
        reader = open_reader({"audit_dsn": self.sc.config.audit_dsn,
                              "audit_db": self.sc.config.audit_path})  # fmt: skip
        try:
            events = list(reader.events())
            return len(events), events
        finally:
            reader.close()


@pytest.fixture
def world(sidecar: RunningSidecar) -> Iterator[World]:
    attempt = sidecar.begin("run-fuzz", rule="pager")
    artifact = sidecar.stub.Create(
        pb.CreateRequest(attempt_id=attempt, kind="doc", data_json='{"a":{"b":[1,2]},"s":"x"}')
    ).id
    archived = sidecar.stub.Create(
        pb.CreateRequest(attempt_id=attempt, kind="doc", data_json='{"old":true}')
    ).id
    sidecar.store.ArchiveArtifact(spb.ArchiveArtifactRequest(artifact_id=archived))
    thread = sidecar.stub.CreateThread(
        pb.CreateThreadRequest(attempt_id=attempt, title="t")
    ).thread_id
    step = sidecar.stub.BeginStep(
        pb.BeginStepRequest(
            attempt_id=attempt,
            tool="lookup",
            effect=types_pb2.TOOL_EFFECT_READ_ONLY,
            args_json="{}",
        )
    ).step_id
    yield World(sidecar, attempt, artifact, archived, thread, step)


# -- strategies ----------------------------------------------------------------------------
# A request starts valid, so that examples reach the store and the ledger, and then up to
# two of its fields are replaced by anything at all.

_HUGE_NAME = "n" * (MAX_NAME_BYTES + 1)
_HUGE_TEXT = "t" * (MAX_TEXT_BYTES + 1)
_HUGE_JSON = '{"x":"' + "j" * MAX_JSON_BYTES + '"}'

# Strings a protobuf client can send: UTF-8, so no lone surrogates (tests/fuzz/test_wire.py
# sends bytes that are not UTF-8).
_plain = st.characters(codec="utf-8", exclude_characters="\0")
names = st.text(_plain, min_size=1, max_size=12)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=10,
)  # fmt: skip
documents = st.dictionaries(st.text(max_size=6), json_values, max_size=4).map(json.dumps)
json_texts = st.one_of(
    json_values.map(json.dumps),
    st.recursive(st.integers() | st.floats() | st.text(max_size=4),
                 lambda c: st.lists(c, max_size=3), max_leaves=6).map(json.dumps),
    st.sampled_from(['{"x": NaN}', "Infinity", '{"a":1,"a":2}', "[" * 70 + "]" * 70, "{",
                     "9007199254740993", '{"x":1} tail', '"\\ud800"', "", " ", _HUGE_JSON]),
    st.text(max_size=30),
)  # fmt: skip
tokens = st.text(max_size=5).map(lambda p: p.replace("~", "~0").replace("/", "~1"))
pointers = st.one_of(
    st.lists(tokens, min_size=1, max_size=3).map(lambda parts: "".join("/" + p for p in parts)),
    st.sampled_from(["", "/", "/-", "/a/-", "/a/b/0", "/a/b/1", "/s", "~1", "/a~2", "/a~", "/0"]),
    st.text(max_size=20),
)
timestamps = st.builds(
    lambda seconds, nanos: timestamp_pb2.Timestamp(seconds=seconds, nanos=nanos),
    st.integers(-(10**12), 10**12) | st.integers(1_700_000_000, 2_100_000_000),
    st.integers(-5, 2 * 10**9) | st.just(0),
)


def _future(seconds: int) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.GetCurrentTime()
    stamp.seconds += seconds
    return stamp


def _valid(field: FieldDescriptor, world: World) -> st.SearchStrategy[Any]:
    """Values a well-behaved agent sends in ``field``."""
    by_name: dict[str, st.SearchStrategy[Any]] = {
        "attempt_id": st.sampled_from([FRESH, world.attempt]),
        "run_id": names,
        "rule": st.sampled_from(["pager", "triage"]),
        "checkpoint": st.text(_plain, max_size=12),
        "lease_deadline": st.none() | st.integers(60, 3600).map(_future),
        "data_json": documents,
        "value_json": json_values.map(json.dumps),
        "args_json": json_values.map(json.dumps),
        "result_json": json_values.map(json.dumps),
        "path": st.lists(tokens, min_size=1, max_size=2).map(
            lambda parts: "/a" + "".join("/" + p for p in parts[:1])
        ) | st.sampled_from(["/s", "/a/b/0", "/n"]),
        "artifact_id": st.sampled_from([world.artifact, world.artifact, world.archived]),
        "thread_id": st.just(world.thread),
        "step_id": st.just(world.step),
        "request_id": st.just("") | names,
        "text": st.text(_plain, min_size=1, max_size=40),
    }  # fmt: skip
    if field.name in by_name:
        return by_name[field.name]
    if field.type == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if field.type == FieldDescriptor.TYPE_ENUM:
        return st.integers(0, 3)
    return names  # kind, title, tool


def _anything(field: FieldDescriptor, world: World) -> st.SearchStrategy[Any]:
    """Any value at all that ``field`` can carry on the wire."""
    if field.message_type is not None:
        return st.none() | timestamps
    if field.name == "attempt_id":
        return st.sampled_from(["", "att_nope", world.step]) | st.text(max_size=8)
    if field.type == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if field.type == FieldDescriptor.TYPE_ENUM:
        return st.integers(-(2**31), 2**31 - 1)  # proto3 enums are open
    if field.name.endswith("_json"):
        return json_texts
    if field.name == "path":
        return pointers
    return st.one_of(
        st.text(max_size=24),
        st.sampled_from(["", _HUGE_NAME, _HUGE_TEXT, world.artifact, world.thread, world.step]),
    )


def _request(data: st.DataObject, rpc: str, world: World) -> Any:
    descriptor: Descriptor = SERVICE.methods_by_name[rpc].input_type
    request = getattr(pb, descriptor.name)()
    target = data.draw(st.sampled_from(["artifact_id", "artifact_id", "thread_id", None]))
    fields = [f for f in descriptor.fields
              if f.containing_oneof is None or f.name == target]  # fmt: skip
    how_many = data.draw(st.sampled_from([0, 0, 1, 1, 2]), label="wild fields")
    wild = {data.draw(st.sampled_from([f.name for f in fields])) for _ in range(how_many)}
    for field in fields:
        choose = _anything if field.name in wild else _valid
        value = data.draw(choose(field, world), label=field.name)
        if value is None:
            continue
        if value == FRESH:
            # Its own run, so that it fences no other example's attempt.
            world.runs += 1
            value = world.sc.begin(f"run-fuzz-{world.runs}", rule="pager")
        if field.message_type is not None:
            getattr(request, field.name).CopyFrom(value)
        else:
            setattr(request, field.name, value)
    return request


def _applied(events: list[Any]) -> list[Any]:
    return [e for e in events if e.event.phase == "outcome"
            and e.event.outcome in ("OUTCOME_APPLIED", "OUTCOME_ALREADY_APPLIED")]  # fmt: skip


@pytest.mark.parametrize("rpc", [m.name for m in SERVICE.methods])
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                           HealthCheck.data_too_large],
)  # fmt: skip
@given(data=st.data())
def test_any_request_is_answered_by_the_contract(
    world: World, rpc: str, data: st.DataObject
) -> None:
    request = _request(data, rpc, world)
    store_before = world.store()
    count_before, _ = world.ledger()
    try:
        getattr(world.sc.stub, rpc)(request, timeout=30)
        refused = None
    except grpc.RpcError as error:
        refused = refusal(error)  # asserts an ErrorInfo is there
    count_after, events = world.ledger()
    event(refused.reason if refused is not None else "answered")
    if refused is not None:
        assert refused.code not in FORBIDDEN_CODES, refused
        assert refused.domain == "actonce"
        assert refused.failure_class in ("REFUSED", "RETRYABLE", "PERMANENT", "UNKNOWN")
        names = {f.name for f in SERVICE.methods_by_name[rpc].input_type.fields}
        assert set(refused.fields) <= names | {"target", "request"}, refused
        if refused.reason in ("INVALID_ARGUMENT", "UNKNOWN_ATTEMPT"):
            # Refused before anything was audited or tried. (BeginAttempt's own event is
            # the one exception: a FRESH attempt was begun for this example.)
            new = [e for e in events[count_before:] if e.event.rpc != "BeginAttempt"]
            assert new == [], new
            assert world.store() == store_before
        else:
            # Refused by the rules or the store after the intent: audited, nothing landed.
            assert _applied(events[count_before:]) == []
            assert world.store() == store_before
    assert count_after >= count_before
    assert world.sc.health() == 1  # SERVING
