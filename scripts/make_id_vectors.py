"""Write docs/derived-id-vectors.json from the reference implementation.

Run only when the scheme changes on purpose (and bump SCHEME_VERSION then):
tests in every client language check their derivation against this file, and
tests/rules/test_ids.py checks that the file still matches this code. A new
version adds vectors; the vectors of earlier versions never change.

Beside the vectors, ``refusals`` lists inputs the sidecar refuses before it
derives an id, each with the field its INVALID_ARGUMENT names; the field is
found here by running the sidecar's own checks, in the order its writes make
them. Every client's local derivation must refuse each one, naming that field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sidecar.errors import InvalidArgument
from sidecar.rules import canonical, edits, ids

OUT = Path(__file__).resolve().parent.parent / "docs" / "derived-id-vectors.json"


def _vector(
    name: str,
    write_type: ids.WriteType,
    run_id: str,
    checkpoint: str,
    identity_input: dict[str, Any],
    identity: ids.Identity,
    occurrence: int,
    *,
    scheme: int = 1,
    scope: str = "",
) -> dict[str, Any]:
    keyed = bool(identity_input.get("key"))
    return {
        "name": name,
        "scheme_version": scheme,
        "write_type": write_type.value,
        "run_id": run_id,
        "scope": scope,
        "checkpoint": checkpoint,
        "input": identity_input,
        "identity": list(identity),
        "occurrence": occurrence,
        "material": ids.material(
            write_type,
            run_id=run_id,
            checkpoint=checkpoint,
            identity=identity,
            occurrence=occurrence,
            scope=scope,
            scheme=scheme,
            keyed=keyed,
        ).decode("utf-8"),
        "id": ids.derive_id(
            write_type,
            run_id=run_id,
            checkpoint=checkpoint,
            identity=identity,
            occurrence=occurrence,
            scope=scope,
            scheme=scheme,
            keyed=keyed,
        ),
    }


def vectors() -> list[dict[str, Any]]:
    out = []
    for name, data_json, occurrence in [
        ("create, simple object", '{"title":"Disk full","severity":2}', 0),
        (
            "create, same data with other key order and 2.0",
            '{"severity":2.0,"title":"Disk full"}',
            0,
        ),
        ("create, second identical write in the attempt", '{"title":"Disk full","severity":2}', 1),
        (
            "create, a double beyond 2^53 as RFC 8785 writes it",
            '{"big":60608476658418680,"list":[6.060847665841838e16]}',
            0,
        ),
        (
            "create, 2^53 and 1e20 written as digits",
            "[9007199254740992,-100000000000000000000]",
            0,
        ),
        ("create, nested 64 levels", "[" * 64 + "]" * 64, 0),
        (
            "create, numbers at the edges of a double",
            "[1e-400,5e-324,1.7976931348623157e308,1E+2,-0,0.10000000000000000555,9007199254740993.0]",
            0,
        ),
        ("create, a string as the whole document", '"Disk full"', 0),
        ("create, a number as the whole document", " 6.0e1 ", 0),
        (
            "create, unicode and escapes",
            '{"note":"caf\\u00e9 \\ud83d\\ude00\\n","list":[1e21,0.5,-0]}',
            0,
        ),
    ]:
        data = canonical.parse_json(data_json, "data_json")
        identity = ids.create_identity("ticket", canonical.json_digest(data))
        out.append(
            _vector(
                name,
                ids.WriteType.CREATE,
                "run-42",
                "cp-7",
                {"kind": "ticket", "data_json": data_json},
                identity,
                occurrence,
            )
        )
    data = canonical.parse_json('{"title":"Disk full","severity":2}', "data_json")
    identity = ids.create_identity("ticket", canonical.json_digest(data))
    out.append(
        _vector(
            "create by proposal",
            ids.WriteType.CREATE_PROPOSAL,
            "run-42",
            "cp-7",
            {"kind": "ticket", "data_json": '{"title":"Disk full","severity":2}'},
            identity,
            0,
        )
    )
    out.append(
        _vector(
            "create, empty checkpoint",
            ids.WriteType.CREATE,
            "run-42",
            "",
            {"kind": "ticket", "data_json": '{"title":"Disk full","severity":2}'},
            identity,
            0,
        )
    )
    for name, write_type, path in [
        ("edit", ids.WriteType.EDIT, "/status"),
        ("edit, escaped pointer", ids.WriteType.EDIT, "/labels/a~1b~0c"),
        ("edit, a newline in the path", ids.WriteType.EDIT, "/notes/line\none"),
        ("edit by proposal", ids.WriteType.EDIT_PROPOSAL, "/status"),
    ]:
        identity = ids.edit_identity("art_abc", path)
        out.append(
            _vector(
                name,
                write_type,
                "run-42",
                "cp-7",
                {"artifact_id": "art_abc", "path": path},
                identity,
                0,
            )
        )
    for name, write_type, text in [
        ("notice", ids.WriteType.NOTICE, "Ticket filed."),
        ("message (send)", ids.WriteType.MESSAGE, "Ticket filed."),
        ("notice, text differs by a trailing space", ids.WriteType.NOTICE, "Ticket filed. "),
    ]:
        identity = ids.post_identity("thr_xyz", canonical.text_digest(text))
        out.append(
            _vector(
                name,
                write_type,
                "run-42",
                "cp-7",
                {"thread_id": "thr_xyz", "text": text},
                identity,
                0,
            )
        )
    identity = ids.thread_identity("Incident 7")
    out.append(
        _vector(
            "thread", ids.WriteType.THREAD, "run-42", "cp-7", {"title": "Incident 7"}, identity, 0
        )
    )
    args_json = '{"to":"ops@example.com","amount":10}'
    identity = ids.step_identity(
        "send_email", canonical.json_digest(canonical.parse_json(args_json, "args_json"))
    )
    out.append(
        _vector(
            "step",
            ids.WriteType.STEP,
            "run-42",
            "cp-7",
            {"tool": "send_email", "args_json": args_json},
            identity,
            2,
        )
    )
    return out + version_2_vectors() + version_3_vectors()


def _digest(text: str, field: str) -> str:
    return canonical.json_digest(canonical.parse_json(text, field))


def version_2_vectors() -> list[dict[str, Any]]:
    """An edit proposal keyed to its value too, and scoped attempts."""
    out = []
    for name, value_json, occurrence in [
        ("edit by proposal, version 2: the value is part of it", '"high"', 0),
        ("edit by proposal, version 2: another value is another proposal", '"urgent"', 0),
        ("edit by proposal, version 2: the same value again in the attempt", '"high"', 1),
        (
            "edit by proposal, version 2: a value in another spelling",
            '{"level": 2.0, "by": "ops"}',
            0,
        ),
    ]:
        identity = ids.edit_proposal_identity(
            "art_abc", "/priority", _digest(value_json, "value_json"), scheme=2
        )
        out.append(
            _vector(
                name,
                ids.WriteType.EDIT_PROPOSAL,
                "run-42",
                "cp-7",
                {"artifact_id": "art_abc", "path": "/priority", "value_json": value_json},
                identity,
                occurrence,
                scheme=2,
            )
        )
    data_json = '{"title":"Disk full","severity":2}'
    create = ids.create_identity("ticket", _digest(data_json, "data_json"))
    notice = ids.post_identity("thr_xyz", canonical.text_digest("Ticket filed."))
    args_json = '{"to":"ops@example.com","amount":10}'
    step = ids.step_identity("send_email", _digest(args_json, "args_json"))
    edit = ids.edit_identity("art_abc", "/status")
    proposal = ids.edit_proposal_identity(
        "art_abc", "/priority", _digest('"high"', "value_json"), scheme=2
    )
    cases: list[tuple[str, ids.WriteType, dict[str, str], ids.Identity, str]] = [
        ("create, version 2, unscoped: its version-1 id", ids.WriteType.CREATE,
         {"kind": "ticket", "data_json": data_json}, create, ""),
        ("create by proposal, version 2, unscoped: its version-1 id",
         ids.WriteType.CREATE_PROPOSAL, {"kind": "ticket", "data_json": data_json}, create, ""),
        ("edit, version 2, unscoped: its version-1 id", ids.WriteType.EDIT,
         {"artifact_id": "art_abc", "path": "/status"}, edit, ""),
        ("create, scoped", ids.WriteType.CREATE,
         {"kind": "ticket", "data_json": data_json}, create, "call_1"),
        ("notice, scoped", ids.WriteType.NOTICE,
         {"thread_id": "thr_xyz", "text": "Ticket filed."}, notice, "call_1"),
        ("notice, the same write in another scope", ids.WriteType.NOTICE,
         {"thread_id": "thr_xyz", "text": "Ticket filed."}, notice, "call_2"),
        ("edit, scoped", ids.WriteType.EDIT,
         {"artifact_id": "art_abc", "path": "/status"}, edit, "call_1"),
        ("edit by proposal, scoped", ids.WriteType.EDIT_PROPOSAL,
         {"artifact_id": "art_abc", "path": "/priority", "value_json": '"high"'}, proposal,
         "call_1"),
        ("thread, scoped", ids.WriteType.THREAD, {"title": "Incident 7"},
         ids.thread_identity("Incident 7"), "call_1"),
        ("step, scoped", ids.WriteType.STEP,
         {"tool": "send_email", "args_json": args_json}, step, "call_1"),
        ("step, scoped, a scope that is not ASCII", ids.WriteType.STEP,
         {"tool": "send_email", "args_json": args_json}, step, "appel/é 1"),
    ]  # fmt: skip
    for name, write_type, raw, identity, scope in cases:
        out.append(
            _vector(name, write_type, "run-42", "cp-7", raw, identity, 0, scheme=2, scope=scope)
        )
    return out


def version_3_vectors() -> list[dict[str, Any]]:
    """Writes named by a key the caller chose, and writes without one (their version-2 id)."""
    data_json = '{"title":"Disk full","severity":2}'
    later_json = '{"title":"Disk full","severity":2,"seen_at":"2026-12-06T05:40:00Z"}'
    args_json = '{"to":"ops@example.com","amount":10}'
    create = ids.keyed_create_identity("ticket", "order-1234")
    step = ids.keyed_step_identity("send_email", "invoice-99/mail")
    cases: list[tuple[str, ids.WriteType, dict[str, str], ids.Identity, int, str]] = [
        ("create by key", ids.WriteType.CREATE,
         {"kind": "ticket", "data_json": data_json, "key": "order-1234"}, create, 0, ""),
        ("create by key, other data: the same id", ids.WriteType.CREATE,
         {"kind": "ticket", "data_json": later_json, "key": "order-1234"}, create, 0, ""),
        ("create by key, again in the attempt: no occurrence, the same id",
         ids.WriteType.CREATE,
         {"kind": "ticket", "data_json": data_json, "key": "order-1234"}, create, 1, ""),
        ("create by key, another kind", ids.WriteType.CREATE,
         {"kind": "incident", "data_json": data_json, "key": "order-1234"},
         ids.keyed_create_identity("incident", "order-1234"), 0, ""),
        ("create by key, by proposal", ids.WriteType.CREATE_PROPOSAL,
         {"kind": "ticket", "data_json": data_json, "key": "order-1234"}, create, 0, ""),
        ("create by key, scoped", ids.WriteType.CREATE,
         {"kind": "ticket", "data_json": data_json, "key": "order-1234"}, create, 0, "call_1"),
        ("create by key, a key that is not ASCII", ids.WriteType.CREATE,
         {"kind": "ticket", "data_json": data_json, "key": "commande-é/1 ✓"},
         ids.keyed_create_identity("ticket", "commande-é/1 ✓"), 0, ""),
        ("create by key, a key of 255 bytes", ids.WriteType.CREATE,
         {"kind": "ticket", "data_json": data_json, "key": "k" * 255},
         ids.keyed_create_identity("ticket", "k" * 255), 0, ""),
        ("thread by key", ids.WriteType.THREAD, {"title": "Incident 7", "key": "incident-7"},
         ids.keyed_thread_identity("incident-7"), 0, ""),
        ("thread by key, another title: the same id", ids.WriteType.THREAD,
         {"title": "Incident 7 (05:40)", "key": "incident-7"},
         ids.keyed_thread_identity("incident-7"), 0, ""),
        ("step by key", ids.WriteType.STEP,
         {"tool": "send_email", "args_json": args_json, "key": "invoice-99/mail"}, step, 0, ""),
        ("step by key, scoped", ids.WriteType.STEP,
         {"tool": "send_email", "args_json": args_json, "key": "invoice-99/mail"}, step, 0,
         "call_1"),
        ("create, version 3 without a key: its version-2 id", ids.WriteType.CREATE,
         {"kind": "ticket", "data_json": data_json},
         ids.create_identity("ticket", _digest(data_json, "data_json")), 0, ""),
        ("create, version 3 without a key, scoped: its version-2 id", ids.WriteType.CREATE,
         {"kind": "ticket", "data_json": data_json},
         ids.create_identity("ticket", _digest(data_json, "data_json")), 0, "call_1"),
        ("edit by proposal, version 3: its version-2 id", ids.WriteType.EDIT_PROPOSAL,
         {"artifact_id": "art_abc", "path": "/priority", "value_json": '"high"'},
         ids.edit_proposal_identity("art_abc", "/priority", _digest('"high"', "value_json"),
                                    scheme=3), 0, ""),
        ("thread, version 3 without a key: its version-1 id", ids.WriteType.THREAD,
         {"title": "Incident 7"}, ids.thread_identity("Incident 7"), 0, ""),
    ]  # fmt: skip
    return [
        _vector(
            name, write_type, "run-42", "cp-7", raw, identity, occurrence, scheme=3, scope=scope
        )
        for name, write_type, raw, identity, occurrence, scope in cases
    ]


def _expand(value: Any) -> str:
    """A refusal's input string; a long one is written as {prefix, repeat, times, suffix}."""
    if isinstance(value, dict):
        return (
            str(value["prefix"]) + str(value["repeat"]) * int(value["times"]) + str(value["suffix"])
        )
    return str(value)


def _long(repeat: str, times: int, prefix: str = "", suffix: str = "") -> dict[str, Any]:
    return {"prefix": prefix, "repeat": repeat, "times": times, "suffix": suffix}


def _sidecar_checks(write_type: ids.WriteType, run_id: str, checkpoint: str,
                    given: dict[str, str], *, scheme: int = 1,
                    scope: str = "") -> None:  # fmt: skip
    """The checks the sidecar makes before deriving an id, in its order: BeginAttempt's on
    the run, scope and checkpoint, then the write's own (sidecar/core/actions.py)."""
    canonical.require_name(run_id, "run_id")
    if scope:
        canonical.require_name(scope, "scope")
    if len(checkpoint.encode("utf-8", "surrogatepass")) > canonical.MAX_TEXT_BYTES:
        raise InvalidArgument("checkpoint", f"is longer than {canonical.MAX_TEXT_BYTES} bytes")
    canonical.require_no_nul(checkpoint, "checkpoint")
    match write_type:
        case ids.WriteType.CREATE | ids.WriteType.CREATE_PROPOSAL:
            canonical.require_name(given["kind"], "kind")
            canonical.parse_canonical(given["data_json"], "data_json")
        case ids.WriteType.EDIT | ids.WriteType.EDIT_PROPOSAL:
            canonical.require_name(given["artifact_id"], "artifact_id")
            edits.normalize_path(given["path"])
            if write_type is ids.WriteType.EDIT_PROPOSAL and scheme >= 2:
                canonical.parse_canonical(given["value_json"], "value_json")
        case ids.WriteType.NOTICE | ids.WriteType.MESSAGE:
            canonical.require_name(given["thread_id"], "thread_id")
            canonical.require_text(given["text"], "text")
        case ids.WriteType.THREAD:
            canonical.require_name(given["title"], "title")
        case ids.WriteType.STEP:
            canonical.require_name(given["tool"], "tool")
            canonical.parse_canonical(given["args_json"], "args_json")
    ids.require_key(given.get("key", ""), run_id=run_id, scheme=scheme)


_CREATE = {"kind": "ticket", "data_json": '{"title":"Disk full"}'}
_EDIT = {"artifact_id": "art_abc", "path": "/status"}
_POST = {"thread_id": "thr_xyz", "text": "Ticket filed."}
_STEP = {"tool": "send_email", "args_json": '{"to":"ops@example.com"}'}

_PROPOSAL_V2 = {**_EDIT, "value_json": '"high"'}

# Refusals of version 2's inputs: (name, write type, scope, input).
_REFUSALS_V2: list[tuple[str, ids.WriteType, Any, dict[str, Any]]] = [
    ("scope with a NUL", ids.WriteType.THREAD, "call\x001", {"title": "Incident 7"}),
    ("scope over 512 bytes", ids.WriteType.NOTICE, _long("s", 513), _POST),
    (
        "value_json of an edit proposal not JSON",
        ids.WriteType.EDIT_PROPOSAL,
        "",
        {**_PROPOSAL_V2, "value_json": '{"level":'},
    ),
    (
        "value_json of an edit proposal with a duplicate key",
        ids.WriteType.EDIT_PROPOSAL,
        "call_1",
        {**_PROPOSAL_V2, "value_json": '{"a":1,"a":2}'},
    ),
    (
        "path of an edit proposal refused before its value",
        ids.WriteType.EDIT_PROPOSAL,
        "",
        {**_PROPOSAL_V2, "path": "/items/-", "value_json": "{"},
    ),
]

# Refusals of a key: (name, write type, scheme, input).
_REFUSALS_V3: list[tuple[str, ids.WriteType, int, dict[str, Any]]] = [
    ("key over 255 bytes", ids.WriteType.CREATE, 3, {**_CREATE, "key": _long("k", 256)}),
    (
        "key over 255 bytes of UTF-8",
        ids.WriteType.THREAD,
        3,
        {"title": "Incident 7", "key": _long("\u00e9", 128)},
    ),
    ("key with a NUL", ids.WriteType.STEP, 3, {**_STEP, "key": "invoice\x0099"}),
    ("key in a run of version 2", ids.WriteType.CREATE, 2, {**_CREATE, "key": "order-1234"}),
    ("key in a run of version 1", ids.WriteType.THREAD, 1, {"title": "Incident 7", "key": "i-7"}),
    (
        "kind refused before its key",
        ids.WriteType.CREATE,
        3,
        {**_CREATE, "kind": "", "key": _long("k", 256)},
    ),
]

# (name, write type, run_id, checkpoint, input); each input is refused for one reason.
_REFUSALS: list[tuple[str, ids.WriteType, Any, Any, dict[str, Any]]] = [
    ("run_id empty", ids.WriteType.THREAD, "", "cp-7", {"title": "Incident 7"}),
    ("run_id with a NUL", ids.WriteType.THREAD, "run\x0042", "cp-7", {"title": "Incident 7"}),
    (
        "run_id over 512 bytes",
        ids.WriteType.THREAD,
        _long("r", 513),
        "cp-7",
        {"title": "Incident 7"},
    ),
    (
        "run_id over 512 bytes of UTF-8",
        ids.WriteType.THREAD,
        _long("\u00e9", 257),
        "cp-7",
        {"title": "Incident 7"},
    ),
    ("checkpoint with a NUL", ids.WriteType.THREAD, "run-42", "cp\x007", {"title": "Incident 7"}),
    (
        "checkpoint over 64 KiB",
        ids.WriteType.THREAD,
        "run-42",
        _long("c", 65537),
        {"title": "Incident 7"},
    ),
    ("kind empty", ids.WriteType.CREATE, "run-42", "cp-7", {**_CREATE, "kind": ""}),
    ("kind with a NUL", ids.WriteType.CREATE, "run-42", "cp-7", {**_CREATE, "kind": "tic\x00ket"}),
    (
        "kind over 512 bytes",
        ids.WriteType.CREATE_PROPOSAL,
        "run-42",
        "cp-7",
        {**_CREATE, "kind": _long("k", 513)},
    ),
    ("data_json empty", ids.WriteType.CREATE, "run-42", "cp-7", {**_CREATE, "data_json": ""}),
    (
        "data_json not JSON",
        ids.WriteType.CREATE,
        "run-42",
        "cp-7",
        {**_CREATE, "data_json": '{"title":'},
    ),
    (
        "data_json with trailing data",
        ids.WriteType.CREATE,
        "run-42",
        "cp-7",
        {**_CREATE, "data_json": '{"a":1} {"b":2}'},
    ),
    ("data_json NaN", ids.WriteType.CREATE, "run-42", "cp-7", {**_CREATE, "data_json": "[NaN]"}),
    (
        "data_json Infinity",
        ids.WriteType.CREATE,
        "run-42",
        "cp-7",
        {**_CREATE, "data_json": '{"a":-Infinity}'},
    ),
    (
        "data_json a number beyond a double",
        ids.WriteType.CREATE,
        "run-42",
        "cp-7",
        {**_CREATE, "data_json": '{"a":1e400}'},
    ),
    (
        "data_json with a leading zero",
        ids.WriteType.CREATE,
        "run-42",
        "cp-7",
        {**_CREATE, "data_json": '{"a":01}'},
    ),
    (
        "data_json with a raw control character",
        ids.WriteType.CREATE,
        "run-42",
        "cp-7",
        {**_CREATE, "data_json": '{"a":"tab\there"}'},
    ),
    (
        "data_json with a byte order mark",
        ids.WriteType.CREATE,
        "run-42",
        "cp-7",
        {**_CREATE, "data_json": '\ufeff{"a":1}'},
    ),
    (
        "data_json with a duplicate key",
        ids.WriteType.CREATE,
        "run-42",
        "cp-7",
        {**_CREATE, "data_json": '{"a":1,"b":2,"a":1}'},
    ),
    (
        "data_json with a duplicate key spelled with an escape",
        ids.WriteType.CREATE,
        "run-42",
        "cp-7",
        {**_CREATE, "data_json": '{"a":{"k":1,"\\u006b":2}}'},
    ),
    (
        "data_json with a lone high surrogate",
        ids.WriteType.CREATE,
        "run-42",
        "cp-7",
        {**_CREATE, "data_json": '{"a":"x\\ud83dy"}'},
    ),
    (
        "data_json with a lone low surrogate in a key",
        ids.WriteType.CREATE,
        "run-42",
        "cp-7",
        {**_CREATE, "data_json": '{"\\ude00":1}'},
    ),
    (
        "data_json with surrogates in the wrong order",
        ids.WriteType.CREATE,
        "run-42",
        "cp-7",
        {**_CREATE, "data_json": '["\\ude00\\ud83d"]'},
    ),
    (
        "data_json an integer beyond 2^53 that no double writes",
        ids.WriteType.CREATE,
        "run-42",
        "cp-7",
        {**_CREATE, "data_json": '{"n":9007199254740993}'},
    ),
    (
        "data_json a negative integer beyond 2^53 that no double writes",
        ids.WriteType.CREATE,
        "run-42",
        "cp-7",
        {**_CREATE, "data_json": "[-60608476658418681]"},
    ),
    (
        "data_json an integer of 1e21 written as digits",
        ids.WriteType.CREATE,
        "run-42",
        "cp-7",
        {**_CREATE, "data_json": "[1000000000000000000000]"},
    ),
    (
        "data_json nested 65 levels",
        ids.WriteType.CREATE,
        "run-42",
        "cp-7",
        {**_CREATE, "data_json": _long("[", 65, suffix="]" * 65)},
    ),
    (
        "data_json over 1 MiB",
        ids.WriteType.CREATE,
        "run-42",
        "cp-7",
        {**_CREATE, "data_json": _long("1,", 524288, prefix="[", suffix="1]")},
    ),
    (
        "artifact_id with a NUL",
        ids.WriteType.EDIT,
        "run-42",
        "cp-7",
        {**_EDIT, "artifact_id": "art\x00abc"},
    ),
    (
        "artifact_id empty",
        ids.WriteType.EDIT_PROPOSAL,
        "run-42",
        "cp-7",
        {**_EDIT, "artifact_id": ""},
    ),
    ("path the root", ids.WriteType.EDIT, "run-42", "cp-7", {**_EDIT, "path": ""}),
    (
        "path without a leading slash",
        ids.WriteType.EDIT,
        "run-42",
        "cp-7",
        {**_EDIT, "path": "status"},
    ),
    ("path ending in '-'", ids.WriteType.EDIT, "run-42", "cp-7", {**_EDIT, "path": "/items/-"}),
    ("path with '~2'", ids.WriteType.EDIT, "run-42", "cp-7", {**_EDIT, "path": "/a~2b"}),
    ("path ending in '~'", ids.WriteType.EDIT, "run-42", "cp-7", {**_EDIT, "path": "/a~"}),
    (
        "path with a bad escape after a newline",
        ids.WriteType.EDIT_PROPOSAL,
        "run-42",
        "cp-7",
        {**_EDIT, "path": "/a\nb~2"},
    ),
    (
        "path with '~' before a newline",
        ids.WriteType.EDIT,
        "run-42",
        "cp-7",
        {**_EDIT, "path": "/a~\n"},
    ),
    (
        "path over 4096 bytes",
        ids.WriteType.EDIT,
        "run-42",
        "cp-7",
        {**_EDIT, "path": _long("p", 4096, prefix="/")},
    ),
    (
        "thread_id with a NUL",
        ids.WriteType.NOTICE,
        "run-42",
        "cp-7",
        {**_POST, "thread_id": "thr\x00xyz"},
    ),
    ("text empty", ids.WriteType.NOTICE, "run-42", "cp-7", {**_POST, "text": ""}),
    ("text with a NUL", ids.WriteType.MESSAGE, "run-42", "cp-7", {**_POST, "text": "filed\x00"}),
    (
        "text over 64 KiB",
        ids.WriteType.NOTICE,
        "run-42",
        "cp-7",
        {**_POST, "text": _long("t", 65537)},
    ),
    ("title empty", ids.WriteType.THREAD, "run-42", "cp-7", {"title": ""}),
    ("title with a NUL", ids.WriteType.THREAD, "run-42", "cp-7", {"title": "Incident\x007"}),
    ("title over 512 bytes", ids.WriteType.THREAD, "run-42", "cp-7", {"title": _long("t", 513)}),
    ("tool with a NUL", ids.WriteType.STEP, "run-42", "cp-7", {**_STEP, "tool": "send\x00email"}),
    ("tool empty", ids.WriteType.STEP, "run-42", "cp-7", {**_STEP, "tool": ""}),
    (
        "args_json with a duplicate key",
        ids.WriteType.STEP,
        "run-42",
        "cp-7",
        {**_STEP, "args_json": '{"to":"a","to":"b"}'},
    ),
    (
        "args_json an integer beyond 2^53 that no double writes",
        ids.WriteType.STEP,
        "run-42",
        "cp-7",
        {**_STEP, "args_json": '{"amount":18014398509481985}'},
    ),
]


def refusals() -> list[dict[str, Any]]:
    cases = (
        [(*case, 1, "") for case in _REFUSALS]
        + [
            (name, write_type, "run-42", "cp-7", given, 2, scope)
            for name, write_type, scope, given in _REFUSALS_V2
        ]
        + [
            (name, write_type, "run-42", "cp-7", given, scheme, "")
            for name, write_type, scheme, given in _REFUSALS_V3
        ]
    )
    out = []
    for name, write_type, run_id, checkpoint, given, scheme, scope in cases:
        try:
            _sidecar_checks(write_type, _expand(run_id), _expand(checkpoint),
                            {key: _expand(value) for key, value in given.items()},
                            scheme=scheme, scope=_expand(scope))  # fmt: skip
        except InvalidArgument as refused:
            field = refused.violations[0].field
        else:
            raise AssertionError(f"the sidecar accepts the refusal case {name!r}")
        out.append({"name": name, "scheme_version": scheme, "write_type": write_type.value,
                    "run_id": run_id, "scope": scope, "checkpoint": checkpoint, "input": given,
                    "field": field})  # fmt: skip
    return out


def document() -> dict[str, Any]:
    return {
        "scheme_version": ids.SCHEME_VERSION,
        "description": (
            "Test vectors for actonce derived ids, versions 1, 2 and 3 (each vector names its "
            "scheme_version); see docs/derived-ids.md."
        ),
        "vectors": vectors(),
        "refusals": refusals(),
    }


def main() -> None:
    OUT.write_text(json.dumps(document(), indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
