"""Coverage-guided fuzzing (atheris) of the JSON and JSON Pointer parsing of every write.

    python -m tests.fuzz.atheris_targets json SECONDS
    python -m tests.fuzz.atheris_targets pointer SECONDS

``json`` feeds ``canonical.parse_json``: it must return a value or refuse with
InvalidArgument, and a value it returns must survive the trip through the store (its compact
form, parsed back) as the same value to ``edits.holds``, or a repeated edit would never be
skipped. ``pointer`` feeds ``edits.normalize_path``: it must return a pointer or refuse with
InvalidArgument; a pointer it returns is its own normal form, names the same tokens, and its
add patch is one the store parses and either applies or refuses with a StoreRefusal.

Any other exception is a crash: libFuzzer stops, prints it and writes the input to a
``crash-*`` file beside the run's corpus, a temporary folder it names, which starts from a
small seed corpus. A run stops after SECONDS.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import atheris

# Only the code under test is instrumented: grpc and protobuf come along through
# sidecar.errors and would only slow every run down.
with atheris.instrument_imports(include=["sidecar", "jsonpointer", "jsonpatch", "rfc8785"]):
    import jsonpointer
    import rfc8785

    from sidecar.errors import InvalidArgument, PatchDoesNotApply
    from sidecar.refstore import backend, patches
    from sidecar.rules import canonical, edits
    from sidecar.store_contract import StoreRefusal

JSON_SEEDS = [
    '{"title": "Disk full", "tags": ["db", "p1"], "n": 1.0, "ok": true, "none": null}',
    '[1, -0.0, 1e300, 6.060847665841868e16, 9007199254740991, "\\u00e9\\ud83d\\ude80"]',
    '{"a": {"b": {"c": [[], {}, ""]}}, "\\u0000": 0}',
    '"\\ud800"',
    '{"a": 1, "a": 2}',
    "[" * 63 + "]" * 63,
]
POINTER_SEEDS = ["/a", "/a/b/0", "/a~1b/c~0d", "/", "/-", "/a/-", "/é/🚀", "/~2", "//"]
POINTER_SEEDS += ["/a%/", "/x/y"]  # parents the document lacks: refused before the store
DOCUMENT = {"a": {"b": [1, 2, {"c": None}]}, "a/b": {"c~d": 1}, "": {"": 0}, "é": []}


def fuzz_json(data: bytes) -> None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return  # protobuf refuses a string that is not UTF-8 before the sidecar sees it
    try:
        value = canonical.parse_json(text, "data_json")
    except InvalidArgument:
        return
    stored = canonical.compact(value)  # what the store receives and later returns
    back = backend.parse_json(stored, "data_json")
    if not edits.holds({"x": back}, "/x", value):
        raise AssertionError(f"{text!r} does not survive the store: {stored!r}")
    if canonical.json_digest(value) != canonical.digest(stored.encode()):
        raise AssertionError(f"the digest of {text!r} is not that of its canonical form")


def fuzz_pointer(data: bytes) -> None:
    try:
        path = data.decode("utf-8")
    except UnicodeDecodeError:
        return
    try:
        normal = edits.normalize_path(path)
    except InvalidArgument:
        return
    if edits.normalize_path(normal) != normal:
        raise AssertionError(f"{normal!r} is not its own normal form")
    if jsonpointer.JsonPointer(normal).parts != jsonpointer.JsonPointer(path).parts:
        raise AssertionError(f"{path!r} and its normal form {normal!r} name other tokens")
    edits.value_at(DOCUMENT, normal)
    try:
        patch = backend.parse_patch(edits.set_patch(DOCUMENT, normal, 1))
    except InvalidArgument:
        return
    except PatchDoesNotApply:
        _the_store_refuses_too(normal)
        return
    with contextlib.suppress(StoreRefusal):
        patches.apply_patch(patch, DOCUMENT)
    rfc8785.dumps(normal)


def _the_store_refuses_too(path: str) -> None:
    """A path set_patch refuses before the store is one the store refuses itself: the
    sidecar's early PATCH_FAILED never turns away an edit the store would apply."""
    add = backend.parse_patch(canonical.compact([{"op": "add", "path": path, "value": 1}]))
    try:
        patches.apply_patch(add, DOCUMENT)
    except StoreRefusal:
        return
    raise AssertionError(f"{path!r} is refused before the store, which applies it")


TARGETS: dict[str, tuple[Callable[[bytes], None], list[str]]] = {
    "json": (fuzz_json, JSON_SEEDS),
    "pointer": (fuzz_pointer, POINTER_SEEDS),
}


def main(argv: list[str]) -> None:
    name, seconds = argv[1], int(argv[2])
    target, seeds = TARGETS[name]
    corpus = Path(tempfile.mkdtemp(prefix=f"actonce-fuzz-{name}-"))
    for number, seed in enumerate(seeds):
        (corpus / f"seed-{number}").write_text(seed, encoding="utf-8")
    args = [argv[0], str(corpus), f"-max_total_time={seconds}", "-max_len=4096",
            "-rss_limit_mb=2048", "-print_final_stats=1", f"-artifact_prefix={corpus}/"]  # fmt: skip
    atheris.Setup(args, target)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
