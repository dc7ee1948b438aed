"""The derived-id scheme's test vectors (docs/derived-id-vectors.json)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import pytest

from actonce_client import FailureClass, InvalidInput, ids

VECTORS = json.loads(
    (Path(__file__).resolve().parents[3] / "docs" / "derived-id-vectors.json").read_text()
)


def expand(value: Any) -> str:
    """A refusal's input string; a long one is written as {prefix, repeat, times, suffix}."""
    if isinstance(value, dict):
        return str(value["prefix"] + value["repeat"] * value["times"] + value["suffix"])
    return str(value)


def _identity(vector: dict[str, Any]) -> tuple[str, ...]:
    given = {key: expand(value) for key, value in vector["input"].items()}
    if "key" in given:
        return _keyed_identity(vector, given)
    match ids.WriteType(vector["write_type"]):
        case ids.WriteType.CREATE | ids.WriteType.CREATE_PROPOSAL:
            return ids.create_identity(given["kind"], given["data_json"])
        case ids.WriteType.EDIT_PROPOSAL:
            return ids.edit_proposal_identity(
                given["artifact_id"], given["path"], given.get("value_json", ""),
                scheme=vector["scheme_version"],
            )  # fmt: skip
        case ids.WriteType.EDIT:
            return ids.edit_identity(given["artifact_id"], given["path"])
        case ids.WriteType.NOTICE | ids.WriteType.MESSAGE:
            return ids.post_identity(given["thread_id"], given["text"])
        case ids.WriteType.THREAD:
            return ids.thread_identity(given["title"])
        case ids.WriteType.STEP:
            return ids.step_identity(given["tool"], given["args_json"])


def _keyed_identity(vector: dict[str, Any], given: dict[str, str]) -> tuple[str, ...]:
    scheme = vector["scheme_version"]
    match ids.WriteType(vector["write_type"]):
        case ids.WriteType.THREAD:
            ids.thread_identity(given["title"])  # the title is still checked
            return ids.keyed_thread_identity(given["key"], scheme=scheme)
        case ids.WriteType.STEP:
            ids.step_identity(given["tool"], given["args_json"])
            return ids.keyed_step_identity(given["tool"], given["key"], scheme=scheme)
        case _:
            ids.create_identity(given["kind"], given["data_json"])
            return ids.keyed_create_identity(given["kind"], given["key"], scheme=scheme)


def test_the_vectors_are_for_this_scheme() -> None:
    assert VECTORS["scheme_version"] == ids.SCHEME_VERSION
    assert VECTORS["vectors"]


@pytest.mark.parametrize("vector", VECTORS["vectors"], ids=lambda v: v["name"])
def test_vector(vector: dict[str, Any]) -> None:
    identity = _identity(vector)
    assert list(identity) == vector["identity"]
    kwargs: dict[str, Any] = dict(
        run_id=vector["run_id"], checkpoint=vector["checkpoint"], identity=identity,
        occurrence=vector["occurrence"], scope=vector["scope"], scheme=vector["scheme_version"],
        keyed="key" in vector["input"],
    )  # fmt: skip
    write_type = ids.WriteType(vector["write_type"])
    assert ids.id_material(write_type, **kwargs).decode() == vector["material"]
    assert ids.derive_id(write_type, **kwargs) == vector["id"]


@pytest.mark.parametrize("refusal", VECTORS["refusals"], ids=lambda v: v["name"])
def test_inputs_the_sidecar_refuses_are_refused_naming_its_field(refusal: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput) as refused:
        identity = _identity(refusal)
        ids.derive_id(
            ids.WriteType(refusal["write_type"]), run_id=expand(refusal["run_id"]),
            checkpoint=expand(refusal["checkpoint"]), identity=identity, occurrence=0,
            scope=expand(refusal["scope"]), scheme=refusal["scheme_version"],
        )  # fmt: skip
    error = refused.value
    assert error.field == refusal["field"]
    assert [v.field for v in error.violations] == [refusal["field"]]
    assert (error.code, error.reason, error.failure_class) == (
        grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT", FailureClass.REFUSED,
    )  # fmt: skip
    assert isinstance(error, ValueError)
