"""The derived-id scheme against its written test vectors (docs/derived-id-vectors.json)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from scripts import make_id_vectors
from sidecar.errors import InvalidArgument
from sidecar.rules import canonical, ids

VECTORS = Path(__file__).resolve().parents[2] / "docs" / "derived-id-vectors.json"
DOCUMENT = json.loads(VECTORS.read_text())
# The version-1 vectors as first published, by name: a retry across an upgrade
# derives these ids, so no later version, and no later vector, may change them.
PUBLISHED_V1_IDS = {
    "create, simple object": "art_dsgtuzu5zg7so7rz4byqx6bgfu",
    "create, same data with other key order and 2.0": "art_dsgtuzu5zg7so7rz4byqx6bgfu",
    "create, second identical write in the attempt": "art_kw6f6mfhivu276yjnq4wq24tk3",
    "create, a double beyond 2^53 as RFC 8785 writes it": "art_ejbvh3id47mt77frcignpcet6p",
    "create, unicode and escapes": "art_sh5ukhr7lr4ygxmcamavaf7r3g",
    "create by proposal": "prp_pkzzoxdntp6xmib7pp4brm4shm",
    "create, empty checkpoint": "art_cvw5yrfetekwclkzkshqcs352l",
    "edit": "edt_sb73y3pnqmjvm6r254ckj3kc5p",
    "edit, escaped pointer": "edt_bc3xnqoruteouxkmrfaiwm2ezp",
    "edit by proposal": "prp_rnsdosdzovuwwu4whee7yv6vzn",
    "notice": "msg_y4yvx2dtevoivfc5tvwbytznah",
    "message (send)": "msg_qznfqyizqau73zjwxdcoqoayzf",
    "notice, text differs by a trailing space": "msg_s4km4hbrjpkjyu6nbfxyes6j7l",
    "thread": "thr_b27tqi3l7mjtcw7ikpdwgattvz",
    "step": "stp_rapnba5dghiv4vba6r47oz23f7",
}


def test_the_vectors_file_is_what_the_reference_implementation_writes() -> None:
    assert make_id_vectors.document() == DOCUMENT
    assert DOCUMENT["scheme_version"] == ids.SCHEME_VERSION


def test_every_write_type_has_a_written_vector() -> None:
    # Another language's client derives ids from the spec and these vectors alone: a write
    # type with none would be a scheme it cannot check itself against.
    written = {ids.WriteType(str(vector["write_type"])) for vector in DOCUMENT["vectors"]}
    assert set(ids.WriteType) - written == set(), "add its vectors in scripts/make_id_vectors.py"


@pytest.mark.parametrize("vector", DOCUMENT["vectors"], ids=lambda v: v["name"])
def test_derived_id_vectors(vector: dict[str, object]) -> None:
    write_type = ids.WriteType(str(vector["write_type"]))
    raw = vector["input"]
    assert isinstance(raw, dict)
    key = raw.get("key", "")
    if key and "data_json" in raw:
        identity = ids.keyed_create_identity(raw["kind"], key)
    elif key and "title" in raw:
        identity = ids.keyed_thread_identity(key)
    elif key:
        identity = ids.keyed_step_identity(raw["tool"], key)
    elif "data_json" in raw:
        identity = ids.create_identity(
            raw["kind"], canonical.json_digest(canonical.parse_json(raw["data_json"], "data_json"))
        )
    elif "path" in raw and write_type is ids.WriteType.EDIT_PROPOSAL:
        identity = ids.edit_proposal_identity(
            raw["artifact_id"],
            raw["path"],
            canonical.json_digest(canonical.parse_json(raw.get("value_json", "null"), "value")),
            scheme=int(str(vector["scheme_version"])),
        )
    elif "path" in raw:
        identity = ids.edit_identity(raw["artifact_id"], raw["path"])
    elif "text" in raw:
        identity = ids.post_identity(raw["thread_id"], canonical.text_digest(raw["text"]))
    elif "title" in raw:
        identity = ids.thread_identity(raw["title"])
    else:
        identity = ids.step_identity(
            raw["tool"], canonical.json_digest(canonical.parse_json(raw["args_json"], "args_json"))
        )
    assert list(identity) == vector["identity"]
    run_id, checkpoint = str(vector["run_id"]), str(vector["checkpoint"])
    occurrence, scope = int(str(vector["occurrence"])), str(vector["scope"])
    scheme = int(str(vector["scheme_version"]))
    material = ids.material(
        write_type, run_id=run_id, checkpoint=checkpoint, identity=identity,
        occurrence=occurrence, scope=scope, scheme=scheme, keyed=bool(key),
    )  # fmt: skip
    assert material.decode("utf-8") == vector["material"]
    derived = ids.derive_id(
        write_type, run_id=run_id, checkpoint=checkpoint, identity=identity,
        occurrence=occurrence, scope=scope, scheme=scheme, keyed=bool(key),
    )  # fmt: skip
    assert derived == vector["id"]


def test_version_1_ids_never_change() -> None:
    v1 = {v["name"]: v["id"] for v in DOCUMENT["vectors"] if v["scheme_version"] == 1}
    assert {name: v1.get(name) for name in PUBLISHED_V1_IDS} == PUBLISHED_V1_IDS


def test_version_2_ids_never_change() -> None:
    # As the version-2 vectors were published before version 3: a run begun under version 2
    # derives these on every retry, whatever the sidecar's release.
    published = {
        "edit by proposal, version 2: the value is part of it": "prp_s3vyulhtwnw53aex5mmfrvpdch",
        "create, scoped": "art_v35zxqemuj5ynry44etod7q6tn",
        "thread, scoped": "thr_odnumm7uwsxsnfvnzsqil6daij",
        "step, scoped": "stp_frqyoairh6tn7eut6ivwtdnvdt",
    }
    v2 = {v["name"]: v["id"] for v in DOCUMENT["vectors"] if v["scheme_version"] == 2}
    assert {name: v2.get(name) for name in published} == published


def test_version_3_derives_every_write_without_a_key_as_version_2() -> None:
    for write_type in ids.WriteType:
        for scope in ("", "call_1"):
            how = functools.partial(
                ids.derive_id, write_type, run_id="r", checkpoint="c", identity=("a", "b"),
                occurrence=1, scope=scope,
            )  # fmt: skip
            assert how(scheme=3) == how(scheme=2)


def test_a_key_names_one_write_whatever_its_occurrence_and_has_an_id_space_of_its_own() -> None:
    keyed = functools.partial(
        ids.derive_id, ids.WriteType.CREATE, run_id="r", checkpoint="c",
        identity=ids.keyed_create_identity("ticket", "k1"), scheme=3, keyed=True,
    )  # fmt: skip
    assert keyed(occurrence=0) == keyed(occurrence=5)
    # The same strings as an unkeyed identity are another write: version 3's material.
    unkeyed = ids.derive_id(
        ids.WriteType.CREATE, run_id="r", checkpoint="c", identity=("ticket", "k1"),
        occurrence=0, scheme=3,
    )  # fmt: skip
    assert keyed(occurrence=0) != unkeyed
    assert keyed(occurrence=0) != keyed(occurrence=0, checkpoint="c2")
    assert keyed(occurrence=0) != keyed(occurrence=0, scope="call_1")


@pytest.mark.parametrize("scheme", [1, 2])
def test_a_key_has_no_form_before_version_3(scheme: int) -> None:
    with pytest.raises(ValueError, match="takes no key"):
        ids.derive_id(
            ids.WriteType.CREATE, run_id="r", checkpoint="c", identity=("ticket", "k1"),
            occurrence=0, scheme=scheme, keyed=True,
        )  # fmt: skip
    with pytest.raises(InvalidArgument, match=f"scheme {scheme}, which has no keys"):
        ids.require_key("k1", run_id="r", scheme=scheme)


def test_an_edit_or_a_post_takes_no_key() -> None:
    for write_type in (ids.WriteType.EDIT, ids.WriteType.NOTICE, ids.WriteType.MESSAGE):
        with pytest.raises(ValueError, match="takes no key"):
            ids.derive_id(
                write_type, run_id="r", checkpoint="c", identity=("a", "b"), occurrence=0,
                scheme=3, keyed=True,
            )  # fmt: skip


def test_a_key_is_1_to_255_bytes_without_nul() -> None:
    assert ids.require_key("", run_id="r", scheme=1) == ""  # no key: as before keys
    assert ids.require_key("é" * 127 + "k", run_id="r", scheme=3) == "é" * 127 + "k"
    for bad in ("k" * 256, "é" * 128, "a\x00b"):
        with pytest.raises(InvalidArgument) as refused:
            ids.require_key(bad, run_id="r", scheme=3)
        assert refused.value.violations[0].field == "key"


def test_version_2_keeps_every_unscoped_id_but_the_edit_proposals() -> None:
    for write_type in ids.WriteType:
        how = functools.partial(
            ids.derive_id, write_type, run_id="r", checkpoint="c", identity=("a", "b"),
            occurrence=1,
        )  # fmt: skip
        same = how(scheme=1) == how(scheme=2)
        assert same is (write_type is not ids.WriteType.EDIT_PROPOSAL)


def test_a_scope_makes_the_same_write_another_write_and_has_no_version_1_form() -> None:
    how = functools.partial(
        ids.derive_id, ids.WriteType.THREAD, run_id="r", checkpoint="c", identity=("t",),
        occurrence=0, scheme=2,
    )  # fmt: skip
    unscoped, first, second = how(), how(scope="call_1"), how(scope="call_2")
    assert len({unscoped, first, second}) == 3
    with pytest.raises(ValueError):
        ids.derive_id(
            ids.WriteType.THREAD, run_id="r", checkpoint="c", identity=("t",), occurrence=0,
            scope="call_1", scheme=1,
        )  # fmt: skip


def test_an_edit_proposal_of_version_2_is_keyed_to_its_value() -> None:
    def proposal(value: str, scheme: int) -> str:
        digest = canonical.json_digest(canonical.parse_json(value, "value_json"))
        identity = ids.edit_proposal_identity("art", "/p", digest, scheme=scheme)
        return ids.derive_id(
            ids.WriteType.EDIT_PROPOSAL, run_id="r", checkpoint="c", identity=identity,
            occurrence=0, scheme=scheme,
        )  # fmt: skip

    assert proposal('"high"', 1) == proposal('"urgent"', 1)
    assert proposal('"high"', 2) != proposal('"urgent"', 2)
    assert proposal('{"a":1,"b":2}', 2) == proposal('{"b":2.0,"a":1}', 2)


def test_equal_json_in_other_spellings_derives_one_id() -> None:
    def create_id(text: str) -> str:
        data = canonical.parse_json(text, "data_json")
        return ids.derive_id(
            ids.WriteType.CREATE,
            run_id="r",
            checkpoint="c",
            identity=ids.create_identity("k", canonical.json_digest(data)),
            occurrence=0,
        )

    assert create_id('{"a":1.0,"b":[true,null]}') == create_id('{ "b": [true, null], "a": 1 }')
    assert create_id('{"a":1}') != create_id('{"a":true}')


def test_fields_cannot_collide_by_concatenation() -> None:
    a = ids.derive_id(
        ids.WriteType.THREAD, run_id="ab", checkpoint="c", identity=("t",), occurrence=0
    )
    b = ids.derive_id(
        ids.WriteType.THREAD, run_id="a", checkpoint="bc", identity=("t",), occurrence=0
    )
    assert a != b


def test_types_have_their_own_id_spaces() -> None:
    identity = ids.post_identity("thr", canonical.text_digest("hi"))
    notice = ids.derive_id(
        ids.WriteType.NOTICE, run_id="r", checkpoint="", identity=identity, occurrence=0
    )
    message = ids.derive_id(
        ids.WriteType.MESSAGE, run_id="r", checkpoint="", identity=identity, occurrence=0
    )
    assert notice != message and notice.startswith("msg_") and message.startswith("msg_")
