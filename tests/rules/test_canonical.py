"""Canonical JSON: strict parsing, the documented limits, and RFC 8785 digests."""

from __future__ import annotations

import json

import pytest

from sidecar.errors import InvalidArgument
from sidecar.rules import canonical


def _refusal(text: str) -> str:
    with pytest.raises(InvalidArgument) as caught:
        canonical.parse_json(text, "data_json")
    (violation,) = caught.value.violations
    assert violation.field == "data_json"
    return violation.description


def test_key_order_number_spelling_and_escapes_do_not_change_the_canonical_form() -> None:
    spellings = ['{"b": 1, "a": "\\u00e9"}', '{"a":"é","b":1.0}', '{"a": "\\u00E9", "b": 10e-1}']
    forms = {canonical.parse_canonical(text, "data_json")[1] for text in spellings}
    assert forms == {'{"a":"é","b":1}'.encode()}
    assert len({canonical.json_digest(canonical.parse_json(t, "v")) for t in spellings}) == 1


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("", "empty string"),
        ('{"a": 1, "a": 2}', "duplicate key 'a'"),
        ('{"a": NaN}', "NaN is not JSON"),
        ("[Infinity]", "Infinity is not JSON"),
        ("{", "is not valid JSON"),
        ("[" * 65 + "]" * 65, "nests 65 levels; the limit is 64"),
        ('"' + "x" * canonical.MAX_JSON_BYTES + '"', "the limit is 1048576"),
    ],
)
def test_what_is_not_i_json_or_over_a_limit_is_bad_input_naming_the_field(
    text: str, said: str
) -> None:
    assert said in _refusal(text)


def test_sixty_four_levels_are_within_the_limit() -> None:
    assert canonical.parse_json("[" * 64 + "]" * 64, "data_json") is not None


def test_an_integer_beyond_2_53_passes_only_as_the_digits_rfc_8785_writes_for_a_double() -> None:
    value, form = canonical.parse_canonical('{"n": 60600000000000000}', "data_json")
    assert value == {"n": 6.06e16}
    assert form == b'{"n":60600000000000000}'
    assert "cannot be canonicalized" in _refusal(str(2**53 + 1))


def test_a_texts_digest_is_of_its_exact_bytes_without_normalization() -> None:
    composed, decomposed = "\u00e9", "e\u0301"
    assert canonical.text_digest(composed) != canonical.text_digest(decomposed)
    assert canonical.text_digest("hi") == canonical.digest(b"hi")


def test_names_and_texts_refuse_nul_emptiness_and_their_byte_limits() -> None:
    assert canonical.require_name("k" * canonical.MAX_NAME_BYTES, "kind") == "k" * 512
    for bad in ("", "a\0b", "é" * 257):  # 257 two-byte characters: 514 bytes
        with pytest.raises(InvalidArgument) as caught:
            canonical.require_name(bad, "kind")
        assert caught.value.violations[0].field == "kind"


def test_a_value_taken_as_it_is_and_its_text_parsed_are_the_same_json_value() -> None:
    parsed = canonical.JsonValue.parse('{"b": [1.0, "\\u00e9"], "a": null}', "value_json")
    taken = canonical.JsonValue.of({"a": None, "b": [1, "é"]}, "value_json")
    assert (parsed.form, parsed.digest, parsed.text) == (taken.form, taken.digest, taken.text)
    assert taken.form == '{"a":null,"b":[1,"é"]}'.encode()
    assert taken.digest == canonical.digest(taken.form)


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ({"x": float("nan")}, "cannot be canonicalized"),
        ([float("inf")], "cannot be canonicalized"),
        (2**53 + 1, "cannot be canonicalized"),
        ("\ud800", "cannot be canonicalized"),
        (json.loads("[" * 65 + "]" * 65), "nests 65 levels; the limit is 64"),
        ("x" * canonical.MAX_JSON_BYTES, "the limit is 1048576"),
    ],
)
def test_a_value_taken_as_it_is_is_refused_as_its_text_would_be(value: object, said: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        canonical.JsonValue.of(value, "data")
    (violation,) = caught.value.violations
    assert violation.field == "data" and said in violation.description


def test_a_large_double_taken_as_an_integer_keeps_its_canonical_digits() -> None:
    taken = canonical.JsonValue.of({"n": 60600000000000000}, "value")
    assert (taken.value, taken.form) == ({"n": 6.06e16}, b'{"n":60600000000000000}')


@pytest.mark.parametrize("value", [[1], "x", 1, None, True])
def test_a_document_is_an_object_however_it_came(value: object) -> None:
    with pytest.raises(InvalidArgument) as taken:
        canonical.Document.of(value, "data_json")
    with pytest.raises(InvalidArgument) as parsed:
        canonical.Document.parse(json.dumps(value), "data_json")
    assert taken.value.violations == parsed.value.violations
    assert "must be a JSON object" in taken.value.violations[0].description
    assert canonical.Document.of({"a": 1}, "data_json").text == '{"a":1}'
