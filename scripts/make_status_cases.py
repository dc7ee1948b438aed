"""Write docs/status-cases.json: how every client classifies what a call gets back.

Each case is an answer a sidecar (or anything between it and the client) might
give to a Create, as raw bytes where it matters: the status code and message,
and the ``grpc-status-details-bin`` trailer exactly as sent, or a response with
an outcome number. Its ``expect`` is the one typed result all four clients must
give. clients/testkit/status_sidecar.py answers these cases for real, and each
client's tests read this file; docs/status-cases.md describes the table.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

OUT = Path(__file__).resolve().parent.parent / "docs" / "status-cases.json"

_ERROR_INFO_URL = "type.googleapis.com/google.rpc.ErrorInfo"


def _any(message: Any) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def _info(reason: str, failure_class: str | None, domain: str = "actonce") -> any_pb2.Any:
    metadata = {} if failure_class is None else {"failure_class": failure_class}
    return _any(error_details_pb2.ErrorInfo(reason=reason, domain=domain, metadata=metadata))


def _bad_request(field: str) -> any_pb2.Any:
    violation = error_details_pb2.BadRequest.FieldViolation(field=field, description="bad")
    return _any(error_details_pb2.BadRequest(field_violations=[violation]))


def _wire(number: int, value: bytes) -> bytes:
    """One length-delimited field, written by hand: protobuf will not write what is malformed."""
    assert number < 16 and len(value) < 128
    return bytes([number << 3 | 2, len(value)]) + value


def _raw_info(reason: bytes, failure_class: bytes, *, entry: bytes | None = None) -> any_pb2.Any:
    """An ErrorInfo of domain actonce from raw bytes: its reason, and its metadata's entry
    ``failure_class`` (or ``entry``, the entry's own bytes)."""
    if entry is None:
        entry = _wire(1, b"failure_class") + _wire(2, failure_class)
    value = _wire(1, reason) + _wire(2, b"actonce") + _wire(3, entry)
    return any_pb2.Any(type_url=_ERROR_INFO_URL, value=value)


def _status(code: str, message: str, *details: any_pb2.Any) -> bytes:
    return bytes(
        status_pb2.Status(
            code=code_pb2.Code.Value(code), message=message, details=list(details)
        ).SerializeToString()
    )


def _error(name: str, code: str, message: str, details: bytes | None, expect: dict[str, Any],
           about: str) -> dict[str, Any]:  # fmt: skip
    answer: dict[str, Any] = {"code": code, "message": message}
    if details is not None:
        answer["details_bin"] = base64.b64encode(details).decode("ascii")
    expect = {"violations": [], **expect}
    return {"name": name, "about": about, "answer": answer, "expect": {"error": expect}}


def _bare(code: str, failure_class: str) -> dict[str, Any]:
    return _error(
        f"bare {code}", code, "no details", None,
        {"code": code, "reason": code, "failure_class": failure_class},
        "A status with no details came from the transport, not from the sidecar's rules.",
    )  # fmt: skip


def _outcome(name: str, number: int, expect: str, about: str) -> dict[str, Any]:
    return {"name": name, "about": about, "answer": {"outcome": number},
            "expect": {"outcome": expect}}  # fmt: skip


def cases() -> list[dict[str, Any]]:
    out = [
        _error(
            "bad input",
            "INVALID_ARGUMENT",
            "data_json: is not valid JSON",
            _status(
                "INVALID_ARGUMENT",
                "data_json: is not valid JSON",
                _info("INVALID_ARGUMENT", "REFUSED"),
                _bad_request("data_json"),
            ),
            {
                "code": "INVALID_ARGUMENT",
                "reason": "INVALID_ARGUMENT",
                "failure_class": "REFUSED",
                "violations": ["data_json"],
            },
            "The sidecar's refusal of bad input: ErrorInfo and BadRequest.",
        ),
        _error(
            "unknown attempt",
            "FAILED_PRECONDITION",
            "unknown attempt",
            _status(
                "FAILED_PRECONDITION", "unknown attempt", _info("UNKNOWN_ATTEMPT", "RETRYABLE")
            ),
            {
                "code": "FAILED_PRECONDITION",
                "reason": "UNKNOWN_ATTEMPT",
                "failure_class": "RETRYABLE",
            },
            "The class comes from ErrorInfo's metadata, whatever the code.",
        ),
        _error(
            "forbidden",
            "PERMISSION_DENIED",
            "send is not allowed",
            _status("PERMISSION_DENIED", "send is not allowed", _info("FORBIDDEN", "PERMANENT")),
            {"code": "PERMISSION_DENIED", "reason": "FORBIDDEN", "failure_class": "PERMANENT"},
            "A permanent refusal.",
        ),
        _error(
            "audit persistence failed",
            "INTERNAL",
            "the audit could not be made durable",
            _status(
                "INTERNAL",
                "the audit could not be made durable",
                _info("AUDIT_PERSISTENCE_FAILED", "UNKNOWN"),
            ),
            {"code": "INTERNAL", "reason": "AUDIT_PERSISTENCE_FAILED", "failure_class": "UNKNOWN"},
            "Never retried automatically.",
        ),
        _error(
            "shutting down",
            "UNAVAILABLE",
            "draining",
            _status("UNAVAILABLE", "draining", _info("SHUTTING_DOWN", "RETRYABLE")),
            {"code": "UNAVAILABLE", "reason": "SHUTTING_DOWN", "failure_class": "RETRYABLE"},
            "A draining sidecar's answer.",
        ),
        _error(
            "unknown class",
            "ABORTED",
            "a newer sidecar's class",
            _status("ABORTED", "a newer sidecar's class", _info("SOMETHING_NEW", "SOMETIMES")),
            {"code": "ABORTED", "reason": "SOMETHING_NEW", "failure_class": "UNKNOWN"},
            "A class the client does not know is UNKNOWN: never retried automatically.",
        ),
        _error(
            "lowercase class",
            "FAILED_PRECONDITION",
            "lowercase",
            _status("FAILED_PRECONDITION", "lowercase", _info("UNKNOWN_ATTEMPT", "retryable")),
            {
                "code": "FAILED_PRECONDITION",
                "reason": "UNKNOWN_ATTEMPT",
                "failure_class": "UNKNOWN",
            },
            "Classes are matched exactly; a lowercase one is not known.",
        ),
    ]
    for code in ["UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED", "INTERNAL"]:
        out.append(
            _error(
                f"ErrorInfo without a class on {code}",
                code,
                "no class",
                _status(code, "no class", _info("STORE_UNAVAILABLE", None)),
                {"code": code, "reason": "STORE_UNAVAILABLE", "failure_class": "UNKNOWN"},
                "The sidecar always says the class; an ErrorInfo that does not is not "
                "understood, and is UNKNOWN whatever the transport code.",
            )
        )
    out.append(
        _error(
            "ErrorInfo of another domain on UNAVAILABLE",
            "UNAVAILABLE",
            "from a proxy",
            _status("UNAVAILABLE", "from a proxy", _info("OVERLOADED", "PERMANENT", "example.com")),
            {"code": "UNAVAILABLE", "reason": "UNAVAILABLE", "failure_class": "RETRYABLE"},
            "Only ErrorInfo of domain actonce speaks for the sidecar; the rest is transport.",
        )
    )
    out.append(
        _error(
            "BadRequest without ErrorInfo",
            "INVALID_ARGUMENT",
            "a bare BadRequest",
            _status("INVALID_ARGUMENT", "a bare BadRequest", _bad_request("kind")),
            {
                "code": "INVALID_ARGUMENT",
                "reason": "INVALID_ARGUMENT",
                "failure_class": "UNKNOWN",
                "violations": ["kind"],
            },
            "Not the sidecar's refusal (no ErrorInfo): a transport code other than the "
            "retryable ones is UNKNOWN.",
        )
    )
    for code, failure_class in [
        ("UNAVAILABLE", "RETRYABLE"),
        ("DEADLINE_EXCEEDED", "RETRYABLE"),
        ("CANCELLED", "RETRYABLE"),
        ("UNKNOWN", "UNKNOWN"),
        ("INTERNAL", "UNKNOWN"),
        ("RESOURCE_EXHAUSTED", "UNKNOWN"),
        ("UNIMPLEMENTED", "UNKNOWN"),
    ]:
        out.append(_bare(code, failure_class))
    malformed = (
        "A malformed status is the typed error, class UNKNOWN: never a crash or a plain exception."
    )
    out += [
        _error(
            "details that are not a Status",
            "UNAVAILABLE",
            "garbage details",
            b"\x08",
            {"code": "UNAVAILABLE", "reason": "UNAVAILABLE", "failure_class": "UNKNOWN"},
            malformed + " Here the bytes end inside a field.",
        ),
        _error(
            "details cut short",
            "INVALID_ARGUMENT",
            "cut short",
            _status("INVALID_ARGUMENT", "cut short", _info("INVALID_ARGUMENT", "REFUSED"))[:-5],
            {"code": "INVALID_ARGUMENT", "reason": "INVALID_ARGUMENT", "failure_class": "UNKNOWN"},
            malformed + " Here a well-formed refusal lost its last bytes.",
        ),
        _error(
            "ErrorInfo that does not decode",
            "FAILED_PRECONDITION",
            "bad ErrorInfo",
            status_pb2.Status(
                code=code_pb2.FAILED_PRECONDITION,
                message="bad ErrorInfo",
                details=[any_pb2.Any(type_url=_ERROR_INFO_URL, value=b"\x0a\x10ab")],
            ).SerializeToString(),
            {
                "code": "FAILED_PRECONDITION",
                "reason": "FAILED_PRECONDITION",
                "failure_class": "UNKNOWN",
            },
            malformed + " Here the Status decodes but its ErrorInfo does not.",
        ),
        _error(
            "a second ErrorInfo that does not decode",
            "UNAVAILABLE",
            "two ErrorInfos",
            _status(
                "UNAVAILABLE",
                "two ErrorInfos",
                _info("SHUTTING_DOWN", "RETRYABLE"),
                any_pb2.Any(type_url=_ERROR_INFO_URL, value=b"\x00"),
            ),
            {"code": "UNAVAILABLE", "reason": "UNAVAILABLE", "failure_class": "UNKNOWN"},
            malformed + " Here the first ErrorInfo is the sidecar's and decodes, and the "
            "second does not (a field numbered 0): the first is not trusted either.",
        ),
        _error(
            "ErrorInfo whose metadata does not decode",
            "UNAVAILABLE",
            "bad metadata",
            _status("UNAVAILABLE", "bad metadata", _raw_info(b"SHUTTING_DOWN", b"", entry=b"\x0c")),
            {"code": "UNAVAILABLE", "reason": "UNAVAILABLE", "failure_class": "UNKNOWN"},
            malformed + " Here a metadata entry holds a group's end and nothing else.",
        ),
        _error(
            "reason that is not UTF-8",
            "UNAVAILABLE",
            "not UTF-8",
            _status("UNAVAILABLE", "not UTF-8", _raw_info(b"SHUTTING_DOWN\xff", b"RETRYABLE")),
            {"code": "UNAVAILABLE", "reason": "UNAVAILABLE", "failure_class": "UNKNOWN"},
            malformed + " Here the ErrorInfo's reason is not UTF-8, which a protobuf string "
            "must be: never read as replacement characters.",
        ),
        _error(
            "details code mismatched",
            "UNAVAILABLE",
            "mismatched",
            _status("INVALID_ARGUMENT", "mismatched", _info("INVALID_ARGUMENT", "REFUSED")),
            {"code": "UNAVAILABLE", "reason": "UNAVAILABLE", "failure_class": "UNKNOWN"},
            malformed + " Here the details' code is not the call's: which one is true is "
            "not known, so neither the details' class nor the code's is trusted.",
        ),
        _outcome(
            "outcome unknown to the client",
            99,
            "UNRECOGNIZED",
            "A newer sidecar's outcome: the write succeeded, so it is a success with an "
            "unrecognized outcome, never an error that would make the caller repeat it.",
        ),
        _outcome(
            "outcome unspecified",
            0,
            "UNRECOGNIZED",
            "A success that names no outcome is still a success.",
        ),
        _outcome("outcome applied", 1, "APPLIED", "The known outcomes, for comparison."),
        _outcome("outcome already applied", 2, "ALREADY_APPLIED", "Made by an earlier attempt."),
    ]
    return out


def document() -> dict[str, Any]:
    return {
        "description": "How every actonce client classifies a call's answer; see "
        "docs/status-cases.md.",
        "cases": cases(),
    }


def main() -> None:
    OUT.write_text(json.dumps(document(), indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
