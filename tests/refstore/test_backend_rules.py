"""The store's rules, on every backend: each test runs on SQLite and on PostgreSQL.

A sidecar must get the same answer whichever database is behind the store, so everything a
caller can observe is tested here once, against both (see conftest.py). What only one backend
has (SQLite's journal, PostgreSQL's reconnecting) is tested in its own file.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from functools import partial

import pytest

from sidecar.refstore.backend import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    NewMessage,
    StoreBackend,
    StoredArtifact,
    StoredMessage,
    encode_page_token,
    page_size_for,
)
from sidecar.store_contract import ARCHIVED, ID_USED, RefusalCode, StoreRefusal
from tests.refstore.conftest import StorePlace


def refusal(call: Callable[[], object]) -> StoreRefusal:
    with pytest.raises(StoreRefusal) as caught:
        call()
    return caught.value


def race(calls: list[Callable[[], object]]) -> list[object]:
    """Run the calls at once, one thread each; each result is a return value or a refusal."""
    start = threading.Barrier(len(calls))
    results: list[object] = [None] * len(calls)

    def run(index: int) -> None:
        start.wait()
        try:
            results[index] = calls[index]()
        except StoreRefusal as refused:
            results[index] = refused

    threads = [threading.Thread(target=run, args=(index,)) for index in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    return results


# Durability, schema, concurrency


def test_used_ids_stay_used_after_reopening(store_place: StorePlace) -> None:
    first = store_place.open()
    first.create_artifact("a1", "note", '{"n": 1}')
    first.create_thread("t1", "Standup")
    first.post_message(NewMessage("m1", "t1", "notice", "hello"))
    first.create_proposal("p1", kind="note", data_json="{}")
    first.close()

    reopened = store_place.open()
    calls: list[Callable[[], object]] = [
        lambda: reopened.create_artifact("a1", "note", '{"n": 2}'),
        lambda: reopened.create_thread("t1", "Other"),
        lambda: reopened.post_message(NewMessage("m1", "t1", "notice", "hello again")),
        lambda: reopened.create_proposal("p1", kind="note", data_json='{"other": 1}'),
    ]
    for call in calls:
        refused = refusal(call)
        assert refused.code is RefusalCode.INVALID_STATE
        assert refused.states == {ID_USED}
    # The refused writes changed nothing.
    assert reopened.get_artifact("a1").data_json == '{"n":1}'
    assert [m.text for m in reopened.list_messages("t1")] == ["hello"]


def test_a_store_of_another_schema_version_is_refused(store_place: StorePlace) -> None:
    store_place.open().close()
    store_place.set_schema_version(99)
    with pytest.raises(RuntimeError, match="schema version 99"):
        store_place.open()


def test_a_closed_backend_refuses_calls(store_place: StorePlace) -> None:
    closed = store_place.open()
    closed.close()
    # A fault, not a refusal and not "unavailable": nothing will make this call succeed.
    with pytest.raises(Exception) as caught:
        closed.create_thread("t1", "Hi")
    assert not isinstance(caught.value, StoreRefusal)


def test_racing_creates_of_one_id_land_once(store_place: StorePlace) -> None:
    # Two backends (as two sidecars' stores would be) and several threads each.
    backends = [store_place.open(), store_place.open()]
    results = race(
        [
            partial(backends[n % 2].create_artifact, "same", "note", json.dumps({"w": n}))
            for n in range(8)
        ]
    )
    created = [r for r in results if isinstance(r, StoredArtifact)]
    refused = [r for r in results if isinstance(r, StoreRefusal)]
    assert len(created) == 1
    assert [(r.code, r.states) for r in refused] == [
        (RefusalCode.INVALID_STATE, frozenset({ID_USED}))
    ] * 7
    assert backends[0].get_artifact("same") == created[0]


def test_racing_threads_posts_and_proposals_land_once(store_place: StorePlace) -> None:
    backends = [store_place.open(), store_place.open()]
    backends[0].create_thread("t1", "One")
    backends[0].create_artifact("a1", "note", "{}")
    calls: list[Callable[[], object]] = []
    for n in range(4):
        store = backends[n % 2]
        calls.append(partial(store.create_thread, "t2", "Two"))
        calls.append(partial(store.post_message, NewMessage("m1", "t1", "message", "hi")))
        calls.append(
            partial(store.create_proposal, "p1", artifact_id="a1", patch_json="[]", base_version=1)
        )
    results = race(calls)
    refused = [r for r in results if isinstance(r, StoreRefusal)]
    assert len(refused) == 9
    assert all(r.states == {ID_USED} for r in refused)
    assert [m.id for m in backends[1].list_messages("t1")] == ["m1"]
    assert backends[1].get_proposal("p1").artifact_id == "a1"


def test_racing_patches_of_one_version_apply_once(store_place: StorePlace) -> None:
    backends = [store_place.open(), store_place.open()]
    backends[0].create_artifact("a1", "note", '{"n": 0}')
    results = race(
        [
            partial(
                backends[n % 2].patch_artifact,
                "a1",
                1,
                json.dumps([{"op": "replace", "path": "/n", "value": n + 1}]),
            )
            for n in range(8)
        ]
    )
    patched = [r for r in results if isinstance(r, StoredArtifact)]
    conflicts = [r for r in results if isinstance(r, StoreRefusal)]
    assert len(patched) == 1
    assert [r.code for r in conflicts] == [RefusalCode.VERSION_CONFLICT] * 7
    # The winner's change is the one kept, at version 2.
    assert backends[1].get_artifact("a1") == patched[0]
    assert patched[0].version == 2


def test_racing_posts_to_one_thread_are_numbered_without_gaps(store_place: StorePlace) -> None:
    backends = [store_place.open(), store_place.open()]
    backends[0].create_thread("t1", "One")
    results = race(
        [
            partial(
                backends[n % 2].post_message,
                NewMessage(f"m{n}", "t1", "message", f"text {n}", request_turn=n % 2 == 0),
            )
            for n in range(10)
        ]
    )
    assert all(isinstance(r, StoredMessage) for r in results)
    listed = backends[0].list_messages("t1")
    assert [m.seq for m in listed] == list(range(1, 11))
    assert sorted(m.id for m in listed) == sorted(f"m{n}" for n in range(10))
    # Turn requests come in the order their messages were posted.
    by_seq = [m.id for m in listed if int(m.id[1:]) % 2 == 0]
    assert backends[1].list_turn_requests("t1") == tuple(by_seq)


def test_an_archive_racing_a_proposed_edit_is_seen_by_it_or_comes_after(
    store_place: StorePlace,
) -> None:
    first, second = store_place.open(), store_place.open()
    for round_ in range(5):
        artifact_id, proposal_id = f"a{round_}", f"p{round_}"
        first.create_artifact(artifact_id, "note", "{}")
        archived, proposed = race(
            [
                partial(first.archive_artifact, artifact_id),
                partial(
                    second.create_proposal,
                    proposal_id,
                    artifact_id=artifact_id,
                    patch_json="[]",
                    base_version=1,
                ),
            ]
        )
        assert isinstance(archived, StoredArtifact) and archived.archived
        # Either the proposal came first and was recorded, or it saw the archive: never a
        # proposal recorded against an artifact it found archived.
        if isinstance(proposed, StoreRefusal):
            assert proposed.states == {ARCHIVED}
        else:
            assert first.get_proposal(proposal_id).artifact_id == artifact_id


# Stored strings


@pytest.mark.parametrize(
    "call",
    [
        lambda b: b.create_artifact("a\0", "note", "{}"),
        lambda b: b.create_artifact("a1", "no\0te", "{}"),
        lambda b: b.create_thread("t\0", "x"),
        lambda b: b.create_thread("t2", "x\0"),
        lambda b: b.post_message(NewMessage("m\0", "t1", "notice", "x")),
        lambda b: b.post_message(NewMessage("m1", "t\0", "notice", "x")),
        lambda b: b.post_message(NewMessage("m1", "t1", "notice", "x\0y")),
        lambda b: b.create_proposal("p\0", kind="note", data_json="{}"),
        lambda b: b.create_proposal("p1", kind="no\0te", data_json="{}"),
        lambda b: b.create_proposal("p1", artifact_id="a\0", patch_json="[]", base_version=1),
        lambda b: b.list_artifacts("no\0te"),
        lambda b: b.list_artifacts("note", 1, encode_page_token("note", "a\0")),
    ],
)
def test_a_nul_character_in_a_stored_string_is_validation_failed(
    backend: StoreBackend, call: Callable[[StoreBackend], object]
) -> None:
    # PostgreSQL text cannot hold NUL; both backends refuse it alike.
    backend.create_thread("t1", "One")
    assert refusal(lambda: call(backend)).code is RefusalCode.VALIDATION_FAILED


@pytest.mark.parametrize(
    "call",
    [
        lambda b: b.get_artifact("a\0"),
        lambda b: b.patch_artifact("a\0", 1, "[]"),
        lambda b: b.archive_artifact("a\0"),
        lambda b: b.get_proposal("p\0"),
        lambda b: b.list_messages("t\0"),
        lambda b: b.request_turn("m\0"),
        lambda b: b.list_turn_requests("t\0"),
    ],
)
def test_a_lookup_by_a_key_with_nul_is_not_found(
    backend: StoreBackend, call: Callable[[StoreBackend], object]
) -> None:
    assert refusal(lambda: call(backend)).code is RefusalCode.NOT_FOUND


def test_json_keeps_nul_and_non_ascii_text_escaped_or_as_is(backend: StoreBackend) -> None:
    created = backend.create_artifact("a1", "note", '{"t": "a\\u0000b", "é": "日本"}')
    assert created.data_json == '{"t":"a\\u0000b","é":"日本"}'
    assert json.loads(backend.get_artifact("a1").data_json) == {"t": "a\0b", "é": "日本"}


def test_ids_sort_by_code_point_in_listings(backend: StoreBackend) -> None:
    # Byte order of UTF-8 (code point order), whatever the database's collation: pages and
    # tokens must mean the same on every backend.
    ids = ["b", "B", "a", "_", "é", "Z", "a b", "ab", "A"]
    for artifact_id in ids:
        backend.create_artifact(artifact_id, "note", "{}")
    seen: list[str] = []
    token = ""
    while True:
        page = backend.list_artifacts("note", 2, token)
        seen.extend(a.id for a in page.artifacts)
        token = page.next_page_token
        if not token:
            break
    assert seen == sorted(ids)


# Artifacts


def test_create_starts_at_version_1_and_stores_compact_json(backend: StoreBackend) -> None:
    created = backend.create_artifact("a1", "note", '{ "title" : "café", "n" : [1, 2.5] }')
    expected = StoredArtifact(
        id="a1", kind="note", version=1, data_json='{"title":"café","n":[1,2.5]}', archived=False
    )
    assert created == expected
    assert backend.get_artifact("a1") == expected


@pytest.mark.parametrize(
    ("artifact_id", "kind", "data_json"),
    [
        ("a1", "", "{}"),
        ("", "note", "{}"),
        ("a1", "note", ""),
        ("a1", "note", "{not json"),
        ("a1", "note", '{"n": NaN}'),
        ("a1", "note", '{"n": Infinity}'),
        # An artifact is a document: its data is a JSON object.
        ("a1", "note", "[1, 2]"),
        ("a1", "note", '"just text"'),
        ("a1", "note", "null"),
    ],
)
def test_create_validates_its_input(
    backend: StoreBackend, artifact_id: str, kind: str, data_json: str
) -> None:
    refused = refusal(lambda: backend.create_artifact(artifact_id, kind, data_json))
    assert refused.code is RefusalCode.VALIDATION_FAILED
    assert refused.states == frozenset()
    # Nothing was stored, so the id is still free.
    backend.create_artifact("a1", "note", "{}")


def test_ids_are_unique_within_a_type_only(backend: StoreBackend) -> None:
    backend.create_artifact("x", "note", "{}")
    backend.create_thread("x", "A thread")
    backend.post_message(NewMessage("x", "x", "notice", "hi"))
    backend.create_proposal("x", artifact_id="x", patch_json="[]", base_version=1)
    assert backend.get_artifact("x").kind == "note"
    assert backend.get_proposal("x").artifact_id == "x"


def test_get_of_a_missing_artifact_is_not_found(backend: StoreBackend) -> None:
    assert refusal(lambda: backend.get_artifact("nope")).code is RefusalCode.NOT_FOUND


def test_patch_applies_and_bumps_the_version(backend: StoreBackend) -> None:
    backend.create_artifact("a1", "note", '{"tags": ["x"]}')
    patched = backend.patch_artifact(
        "a1",
        1,
        '[{"op": "add", "path": "/title", "value": "Hi"},'
        ' {"op": "add", "path": "/tags/-", "value": "y"}]',
    )
    assert patched.version == 2
    assert patched.data_json == '{"tags":["x","y"],"title":"Hi"}'
    assert backend.get_artifact("a1") == patched

    again = backend.patch_artifact("a1", 2, '[{"op": "remove", "path": "/tags/0"}]')
    assert (again.version, json.loads(again.data_json)) == (3, {"tags": ["y"], "title": "Hi"})


def test_a_patch_may_replace_the_whole_object(backend: StoreBackend) -> None:
    backend.create_artifact("a1", "note", '{"n": 1}')
    patched = backend.patch_artifact("a1", 1, '[{"op": "replace", "path": "", "value": {"m": 2}}]')
    assert (patched.version, patched.data_json) == (2, '{"m":2}')


def test_patch_with_a_stale_version_is_a_conflict(backend: StoreBackend) -> None:
    backend.create_artifact("a1", "note", "{}")
    backend.patch_artifact("a1", 1, '[{"op": "add", "path": "/n", "value": 1}]')
    refused = refusal(
        lambda: backend.patch_artifact("a1", 1, '[{"op": "add", "path": "/n", "value": 2}]')
    )
    assert refused.code is RefusalCode.VERSION_CONFLICT
    assert backend.get_artifact("a1").data_json == '{"n":1}'


def test_patch_of_a_missing_artifact_is_not_found(backend: StoreBackend) -> None:
    refused = refusal(lambda: backend.patch_artifact("nope", 1, "[]"))
    assert refused.code is RefusalCode.NOT_FOUND


def test_patch_of_an_archived_artifact_is_invalid_state(backend: StoreBackend) -> None:
    backend.create_artifact("a1", "note", "{}")
    backend.archive_artifact("a1")
    # Archived beats a stale version: the state is what refuses it for good.
    refused = refusal(
        lambda: backend.patch_artifact("a1", 7, '[{"op": "add", "path": "/n", "value": 1}]')
    )
    assert refused.code is RefusalCode.INVALID_STATE
    assert refused.states == {ARCHIVED}


@pytest.mark.parametrize(
    "patch_json",
    [
        '[{"op": "add", "path": "/missing/child", "value": 1}]',
        '[{"op": "test", "path": "/n", "value": 2}]',
        '[{"op": "remove", "path": "/absent"}]',
        '[{"op": "replace", "path": "/absent", "value": 1}]',
        '[{"op": "add", "path": "/list/5", "value": 1}]',
        '[{"op": "move", "from": "/obj", "path": "/obj/inner"}]',
        # Well-formed, but the data would stop being an object.
        '[{"op": "replace", "path": "", "value": [1]}]',
        '[{"op": "move", "from": "/n", "path": ""}]',
        # The first operation applies, the second does not: nothing is kept.
        '[{"op": "add", "path": "/extra", "value": 1}, {"op": "test", "path": "/n", "value": 0}]',
    ],
)
def test_a_patch_that_does_not_apply_is_patch_failed(
    backend: StoreBackend, patch_json: str
) -> None:
    backend.create_artifact("a1", "note", '{"n": 1, "list": [], "obj": {}}')
    refused = refusal(lambda: backend.patch_artifact("a1", 1, patch_json))
    assert refused.code is RefusalCode.PATCH_FAILED
    # It names the operation and its path, never the artifact's data.
    assert "{" not in refused.message and "'n': 1" not in refused.message, refused.message
    assert backend.get_artifact("a1") == StoredArtifact(
        id="a1", kind="note", version=1, data_json='{"n":1,"list":[],"obj":{}}', archived=False
    )


@pytest.mark.parametrize(
    "patch_json",
    [
        "not json",
        '{"op": "add", "path": "/n", "value": 1}',
        "[1]",
        '[{"op": "frobnicate", "path": "/n"}]',
        '[{"path": "/n", "value": 1}]',
        '[{"op": "add", "value": 1}]',
        '[{"op": "add", "path": "n", "value": 1}]',
        '[{"op": "add", "path": "/n"}]',
        '[{"op": "move", "path": "/n"}]',
        '[{"op": "copy", "from": 3, "path": "/n"}]',
    ],
)
def test_a_patch_that_is_not_json_patch_is_validation_failed(
    backend: StoreBackend, patch_json: str
) -> None:
    backend.create_artifact("a1", "note", '{"n": 1}')
    refused = refusal(lambda: backend.patch_artifact("a1", 1, patch_json))
    assert refused.code is RefusalCode.VALIDATION_FAILED
    assert backend.get_artifact("a1").version == 1


def test_archive_keeps_the_version_and_refuses_a_second_time(backend: StoreBackend) -> None:
    backend.create_artifact("a1", "note", '{"n": 1}')
    backend.patch_artifact("a1", 1, '[{"op": "replace", "path": "/n", "value": 2}]')
    archived = backend.archive_artifact("a1")
    assert archived == StoredArtifact(
        id="a1", kind="note", version=2, data_json='{"n":2}', archived=True
    )
    assert backend.get_artifact("a1") == archived

    refused = refusal(lambda: backend.archive_artifact("a1"))
    assert (refused.code, refused.states) == (RefusalCode.INVALID_STATE, frozenset({ARCHIVED}))
    assert refusal(lambda: backend.archive_artifact("nope")).code is RefusalCode.NOT_FOUND


def test_an_archived_artifacts_id_stays_used(backend: StoreBackend) -> None:
    backend.create_artifact("a1", "note", "{}")
    backend.archive_artifact("a1")
    refused = refusal(lambda: backend.create_artifact("a1", "note", "{}"))
    assert (refused.code, refused.states) == (RefusalCode.INVALID_STATE, frozenset({ID_USED}))


def test_list_pages_through_a_kind_in_id_order(backend: StoreBackend) -> None:
    for artifact_id in ["c", "a", "e", "b", "d"]:
        backend.create_artifact(artifact_id, "note", "{}")
    backend.create_artifact("aa", "other", "{}")
    backend.archive_artifact("d")

    seen: list[str] = []
    token = ""
    pages = 0
    while True:
        page = backend.list_artifacts("note", 2, token)
        pages += 1
        assert len(page.artifacts) <= 2
        seen.extend(artifact.id for artifact in page.artifacts)
        token = page.next_page_token
        if not token:
            break
    assert seen == ["a", "b", "c", "d", "e"]
    assert pages == 3

    whole = backend.list_artifacts("note")
    assert [a.id for a in whole.artifacts] == seen
    assert whole.next_page_token == ""
    assert [a.archived for a in whole.artifacts] == [False, False, False, True, False]
    assert backend.list_artifacts("unknown-kind").artifacts == ()


def test_a_full_last_page_has_no_next_token(backend: StoreBackend) -> None:
    for artifact_id in ["a", "b"]:
        backend.create_artifact(artifact_id, "note", "{}")
    page = backend.list_artifacts("note", 2)
    assert [a.id for a in page.artifacts] == ["a", "b"]
    assert page.next_page_token == ""


def test_list_refuses_bad_arguments(backend: StoreBackend) -> None:
    backend.create_artifact("a", "note", "{}")
    backend.create_artifact("b", "note", "{}")
    token = backend.list_artifacts("note", 1).next_page_token
    assert token
    bad_calls: list[Callable[[], object]] = [
        lambda: backend.list_artifacts("note", -1),
        lambda: backend.list_artifacts("note", 1, "not a token!"),
        lambda: backend.list_artifacts("other", 1, token),
        lambda: backend.list_artifacts("", 1),
    ]
    for call in bad_calls:
        assert refusal(call).code is RefusalCode.VALIDATION_FAILED


def test_page_size_defaults_and_is_capped() -> None:
    assert page_size_for(0) == DEFAULT_PAGE_SIZE == 100
    assert page_size_for(7) == 7
    assert page_size_for(MAX_PAGE_SIZE + 1) == MAX_PAGE_SIZE == 1000


# Proposals


def test_proposed_create_and_edit_are_recorded(backend: StoreBackend) -> None:
    backend.create_artifact("a1", "note", '{"n": 1}')
    create = backend.create_proposal("p1", kind="note", data_json='{ "n" : 2 }')
    edit = backend.create_proposal(
        "p2",
        artifact_id="a1",
        patch_json='[ {"op": "replace", "path": "/n", "value": 3} ]',
        base_version=1,
    )
    assert backend.get_proposal("p1") == create
    assert (create.kind, create.data_json, create.is_edit) == ("note", '{"n":2}', False)
    assert backend.get_proposal("p2") == edit
    assert edit.is_edit
    assert (edit.artifact_id, edit.base_version) == ("a1", 1)
    assert edit.patch_json == '[{"op":"replace","path":"/n","value":3}]'
    # A proposal changes nothing.
    assert backend.get_artifact("a1").version == 1
    assert refusal(lambda: backend.get_proposal("nope")).code is RefusalCode.NOT_FOUND


@pytest.mark.parametrize(
    "form",
    [
        {},
        {"kind": "note", "data_json": "{}", "artifact_id": "a1", "patch_json": "[]"},
        {"kind": "note", "data_json": "{}", "base_version": 1},
        {"kind": "note"},
        {"data_json": "{}"},
        {"kind": "note", "data_json": "{oops"},
        {"kind": "note", "data_json": "[]"},
        {"artifact_id": "a1", "patch_json": "[]"},
        {"artifact_id": "a1", "patch_json": '{"op": "add"}', "base_version": 1},
        {"patch_json": "[]", "base_version": 1},
    ],
)
def test_a_proposal_is_exactly_one_valid_form(
    backend: StoreBackend, form: dict[str, object]
) -> None:
    backend.create_artifact("a1", "note", "{}")
    refused = refusal(lambda: backend.create_proposal("p1", **form))  # type: ignore[arg-type]
    assert refused.code is RefusalCode.VALIDATION_FAILED


def test_proposed_edit_of_a_missing_artifact_is_not_found(backend: StoreBackend) -> None:
    refused = refusal(
        lambda: backend.create_proposal("p1", artifact_id="nope", patch_json="[]", base_version=1)
    )
    assert refused.code is RefusalCode.NOT_FOUND


def test_proposal_states_are_reported_together(backend: StoreBackend) -> None:
    backend.create_artifact("a1", "note", "{}")
    backend.create_proposal("p1", artifact_id="a1", patch_json="[]", base_version=1)

    # The id alone: the write was already made.
    again = refusal(
        lambda: backend.create_proposal("p1", artifact_id="a1", patch_json="[]", base_version=1)
    )
    assert (again.code, again.states) == (RefusalCode.INVALID_STATE, frozenset({ID_USED}))

    backend.archive_artifact("a1")
    # Archived alone: a new proposal of an archived artifact.
    archived = refusal(
        lambda: backend.create_proposal("p2", artifact_id="a1", patch_json="[]", base_version=1)
    )
    assert (archived.code, archived.states) == (RefusalCode.INVALID_STATE, frozenset({ARCHIVED}))

    # Both: a repeat that must not be taken for "already done".
    both = refusal(
        lambda: backend.create_proposal("p1", artifact_id="a1", patch_json="[]", base_version=1)
    )
    assert (both.code, both.states) == (RefusalCode.INVALID_STATE, frozenset({ID_USED, ARCHIVED}))


# Threads, messages, turns


def test_threads_need_a_title_and_a_fresh_id(backend: StoreBackend) -> None:
    assert backend.create_thread("t1", "Standup").title == "Standup"
    assert refusal(lambda: backend.create_thread("t2", "")).code is RefusalCode.VALIDATION_FAILED
    assert refusal(lambda: backend.create_thread("", "x")).code is RefusalCode.VALIDATION_FAILED
    used = refusal(lambda: backend.create_thread("t1", "Standup"))
    assert (used.code, used.states) == (RefusalCode.INVALID_STATE, frozenset({ID_USED}))


def test_messages_are_numbered_per_thread(backend: StoreBackend) -> None:
    backend.create_thread("t1", "One")
    backend.create_thread("t2", "Two")
    first = backend.post_message(NewMessage("m1", "t1", "notice", "a"))
    backend.post_message(NewMessage("m2", "t2", "message", "b"))
    backend.post_message(NewMessage("m3", "t1", "message", "c"))
    assert first == StoredMessage(id="m1", thread_id="t1", kind="notice", text="a", seq=1)
    assert [(m.id, m.seq, m.kind) for m in backend.list_messages("t1")] == [
        ("m1", 1, "notice"),
        ("m3", 2, "message"),
    ]
    assert [(m.id, m.seq) for m in backend.list_messages("t2")] == [("m2", 1)]


def test_post_validates_and_needs_the_thread(backend: StoreBackend) -> None:
    backend.create_thread("t1", "One")
    bad_posts: list[Callable[[], object]] = [
        lambda: backend.post_message(NewMessage("m1", "t1", "shout", "x")),
        lambda: backend.post_message(NewMessage("m1", "t1", "", "x")),
        lambda: backend.post_message(NewMessage("m1", "t1", "notice", "")),
    ]
    for call in bad_posts:
        assert refusal(call).code is RefusalCode.VALIDATION_FAILED
    # A notice starts no turn.
    refused = refusal(
        lambda: backend.post_message(NewMessage("m1", "t1", "notice", "x", request_turn=True))
    )
    assert refused.code is RefusalCode.VALIDATION_FAILED
    missing = refusal(lambda: backend.post_message(NewMessage("m1", "nope", "notice", "x")))
    assert missing.code is RefusalCode.NOT_FOUND
    assert backend.list_messages("t1") == ()


def test_a_used_message_id_is_refused_before_the_thread_is_looked_up(
    backend: StoreBackend,
) -> None:
    backend.create_thread("t1", "One")
    backend.post_message(NewMessage("m1", "t1", "notice", "x"))
    used = refusal(lambda: backend.post_message(NewMessage("m1", "elsewhere", "notice", "x")))
    assert (used.code, used.states) == (RefusalCode.INVALID_STATE, frozenset({ID_USED}))


def test_send_records_the_message_and_its_turn_request(backend: StoreBackend) -> None:
    backend.create_thread("t1", "One")
    backend.post_message(NewMessage("n1", "t1", "notice", "fyi"))
    backend.post_message(NewMessage("m1", "t1", "message", "please", request_turn=True))
    backend.post_message(NewMessage("m2", "t1", "message", "later"))
    assert backend.list_turn_requests("t1") == ("m1",)

    # Keyed by the message id: asking again records nothing new.
    assert backend.request_turn("m1") is False
    assert backend.request_turn("m2") is True
    assert backend.request_turn("m2") is False
    assert backend.list_turn_requests("t1") == ("m1", "m2")


def test_message_and_turn_request_commit_together(
    store_place: StorePlace, backend: StoreBackend
) -> None:
    backend.create_thread("t1", "One")
    # The turn request's insert fails inside the transaction, as a crash between the two
    # writes would: the message must not be left behind without it.
    with store_place.turn_requests_refused():
        with pytest.raises(Exception, match="turn requests refused") as caught:
            backend.post_message(NewMessage("m1", "t1", "message", "please", request_turn=True))
        assert not isinstance(caught.value, StoreRefusal)
        assert backend.list_messages("t1") == ()
        assert backend.list_turn_requests("t1") == ()

    # The id was not taken by the failed write.
    backend.post_message(NewMessage("m1", "t1", "message", "please", request_turn=True))
    assert [m.id for m in backend.list_messages("t1")] == ["m1"]
    assert backend.list_turn_requests("t1") == ("m1",)


def test_turn_requests_need_a_message_that_is_not_a_notice(backend: StoreBackend) -> None:
    backend.create_thread("t1", "One")
    backend.post_message(NewMessage("n1", "t1", "notice", "fyi"))
    assert refusal(lambda: backend.request_turn("nope")).code is RefusalCode.NOT_FOUND
    assert refusal(lambda: backend.request_turn("n1")).code is RefusalCode.VALIDATION_FAILED
    assert backend.list_turn_requests("t1") == ()


def test_listing_an_unknown_thread_is_not_found(backend: StoreBackend) -> None:
    assert refusal(lambda: backend.list_messages("nope")).code is RefusalCode.NOT_FOUND
    assert refusal(lambda: backend.list_turn_requests("nope")).code is RefusalCode.NOT_FOUND


def test_a_patch_that_does_not_apply_names_the_operation_and_the_missing_path(
    backend: StoreBackend,
) -> None:
    backend.create_artifact("a1", "ticket", '{"title": "Disk full"}')
    patch = '[{"op": "add", "path": "/t", "value": 1}, {"op": "add", "path": "/a/b", "value": 1}]'
    refused = refusal(lambda: backend.patch_artifact("a1", 1, patch))
    assert (refused.code, refused.message) == (
        RefusalCode.PATCH_FAILED,
        "the patch does not apply: operation 1 (add at '/a/b': the artifact has no '/a' to add "
        "it to)",
    )
    assert backend.get_artifact("a1").data_json == '{"title":"Disk full"}'
