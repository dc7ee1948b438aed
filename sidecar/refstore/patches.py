"""The reference store's JSON Patch rules: what a valid patch is, and applying one.

A patch is refused with the same codes on every backend: VALIDATION_FAILED when it is not a
JSON Patch (checked here before anything is read, operation by operation), PATCH_FAILED when
it is one but does not fit the artifact's data; a refusal names the operation and its paths,
never the data. :func:`sidecar.refstore.backend.parse_patch` reads a patch's JSON text, as
strictly as every other JSON the store takes, and hands the value to :func:`patch_of`.
"""

from __future__ import annotations

import jsonpatch
import jsonpointer

from sidecar.store_contract import RefusalCode, StoreRefusal

_PATCH_OPS = frozenset({"add", "remove", "replace", "move", "copy", "test"})
_OPS_WITH_VALUE = frozenset({"add", "replace", "test"})
_OPS_WITH_FROM = frozenset({"move", "copy"})


def _check_pointer(value: object, where: str) -> None:
    if not isinstance(value, str):
        raise StoreRefusal(RefusalCode.VALIDATION_FAILED, f"{where} must be a string")
    try:
        jsonpointer.JsonPointer(value)
    except jsonpointer.JsonPointerException as error:
        raise StoreRefusal(
            RefusalCode.VALIDATION_FAILED, f"{where} is not a JSON Pointer: {error}"
        ) from None


def patch_of(document: object, field: str = "patch_json") -> jsonpatch.JsonPatch:
    """A parsed JSON value as an RFC 6902 JSON Patch; VALIDATION_FAILED when it is not one.

    The `jsonpatch` library only notices a missing `value` or `from` when it applies the
    patch, which would make a malformed document look like a patch that does not apply
    (PATCH_FAILED); so the structure is checked here, before anything is read.
    """
    if not isinstance(document, list):
        raise StoreRefusal(
            RefusalCode.VALIDATION_FAILED, f"{field} must be a JSON array of operations"
        )
    for index, operation in enumerate(document):
        where = f"{field}[{index}]"
        if not isinstance(operation, dict):
            raise StoreRefusal(RefusalCode.VALIDATION_FAILED, f"{where} must be an object")
        op = operation.get("op")
        if op not in _PATCH_OPS:
            raise StoreRefusal(
                RefusalCode.VALIDATION_FAILED,
                f"{where}.op must be one of {', '.join(sorted(_PATCH_OPS))}",
            )
        if "path" not in operation:
            raise StoreRefusal(RefusalCode.VALIDATION_FAILED, f"{where} has no path")
        _check_pointer(operation["path"], f"{where}.path")
        if op in _OPS_WITH_VALUE and "value" not in operation:
            raise StoreRefusal(RefusalCode.VALIDATION_FAILED, f"{where} ({op}) has no value")
        if op in _OPS_WITH_FROM:
            if "from" not in operation:
                raise StoreRefusal(RefusalCode.VALIDATION_FAILED, f"{where} ({op}) has no from")
            _check_pointer(operation["from"], f"{where}.from")
    try:
        return jsonpatch.JsonPatch(document)
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as error:
        raise StoreRefusal(
            RefusalCode.VALIDATION_FAILED, f"{field} is not a JSON Patch: {error}"
        ) from None


def apply_patch(patch: jsonpatch.JsonPatch, document: dict[str, object]) -> dict[str, object]:
    """Apply a parsed patch to a copy of `document`; PATCH_FAILED when it does not apply.

    A missing parent, a failed `test`, an index out of range, a move into its own child, or a
    result that is no longer an object: the patch is well-formed but does not fit the document.
    The refusal names the operation and its paths, never the document: the library's own
    message quotes the data, and a refusal reaches logs and callers.
    """
    try:
        patched: object = patch.apply(document, in_place=False)
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException):
        raise StoreRefusal(RefusalCode.PATCH_FAILED, _why_not(patch, document)) from None
    if not isinstance(patched, dict):
        raise StoreRefusal(
            RefusalCode.PATCH_FAILED, "the patch would leave the artifact's data not an object"
        )
    return patched


def _why_not(patch: jsonpatch.JsonPatch, document: object) -> str:
    """Which operation of a patch that does not apply fails, and on which path. Only called
    once the patch failed, so the hot path applies it once."""
    current = document
    for index, operation in enumerate(patch.patch):
        try:
            current = jsonpatch.JsonPatch([operation]).apply(current, in_place=False)
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException):
            return f"the patch does not apply: operation {index} ({_what(operation, current)})"
    return "the patch does not apply to the artifact's data"


def _what(operation: dict[str, str], document: object) -> str:
    op, path = operation["op"], operation["path"]
    if op in _OPS_WITH_FROM and not _exists(document, operation["from"]):
        return f"{op} from {operation['from']!r}, which the artifact does not have"
    if op in _OPS_WITH_FROM and path.startswith(operation["from"] + "/"):
        return f"{op} of {operation['from']!r} into its own member {path!r}"
    if op == "test" and _exists(document, path):
        return f"test of {path!r}: the artifact holds another value there"
    if op == "add" or op in _OPS_WITH_FROM:
        parent = path.rpartition("/")[0]
        if not _exists(document, parent):
            return f"{op} at {path!r}: the artifact has no {parent!r} to add it to"
        return f"{op} at {path!r}: {parent!r} has no place {path.rpartition('/')[2]!r}"
    return f"{op} at {path!r}, which the artifact does not have"


def _exists(document: object, path: str) -> bool:
    missing = object()
    try:
        return jsonpointer.resolve_pointer(document, path, missing) is not missing
    except jsonpointer.JsonPointerException:
        return False
