"""The derived-id scheme against its written test vectors (docs/derived-id-vectors.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scripts import make_id_vectors
from sidecar.rules import canonical, ids

VECTORS = Path(__file__).resolve().parents[2] / "docs" / "derived-id-vectors.json"
DOCUMENT = json.loads(VECTORS.read_text())


def test_the_vectors_file_is_what_the_reference_implementation_writes() -> None:
    assert make_id_vectors.document() == DOCUMENT
    assert DOCUMENT["scheme_version"] == ids.SCHEME_VERSION


@pytest.mark.parametrize("vector", DOCUMENT["vectors"], ids=lambda v: v["name"])
def test_derived_id_vectors(vector: dict[str, object]) -> None:
    write_type = ids.WriteType(str(vector["write_type"]))
    raw = vector["input"]
    assert isinstance(raw, dict)
    if "data_json" in raw:
        identity = ids.create_identity(
            raw["kind"], canonical.json_digest(canonical.parse_json(raw["data_json"], "data_json"))
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
    derived = ids.derive_id(
        write_type,
        run_id=str(vector["run_id"]),
        checkpoint=str(vector["checkpoint"]),
        identity=identity,
        occurrence=int(str(vector["occurrence"])),
    )
    assert derived == vector["id"]


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
