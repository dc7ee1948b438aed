"""Write docs/derived-id-vectors.json from the reference implementation.

Run only when the scheme changes on purpose (and bump SCHEME_VERSION then):
tests in every client language check their derivation against this file, and
tests/rules/test_ids.py checks that the file still matches this code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sidecar.rules import canonical, ids

OUT = Path(__file__).resolve().parent.parent / "docs" / "derived-id-vectors.json"


def _vector(
    name: str,
    write_type: ids.WriteType,
    run_id: str,
    checkpoint: str,
    identity_input: dict[str, Any],
    identity: ids.Identity,
    occurrence: int,
) -> dict[str, Any]:
    return {
        "name": name,
        "write_type": write_type.value,
        "run_id": run_id,
        "checkpoint": checkpoint,
        "input": identity_input,
        "identity": list(identity),
        "occurrence": occurrence,
        "material": canonical.canonical(
            [
                "actonce/derived-id",
                ids.SCHEME_VERSION,
                write_type.value,
                run_id,
                checkpoint,
                list(identity),
                occurrence,
            ]
        ).decode("utf-8"),
        "id": ids.derive_id(
            write_type,
            run_id=run_id,
            checkpoint=checkpoint,
            identity=identity,
            occurrence=occurrence,
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
    return out


def document() -> dict[str, Any]:
    return {
        "scheme_version": ids.SCHEME_VERSION,
        "description": "Test vectors for actonce derived ids; see docs/derived-ids.md.",
        "vectors": vectors(),
    }


def main() -> None:
    OUT.write_text(json.dumps(document(), indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
