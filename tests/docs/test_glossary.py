"""Words mean one thing: every word of the sidecar's public names is a word of the domain,
listed with its meaning under docs/design.md's "## Words", or an ordinary one, listed in
plain_words.txt beside this file; and "turn" is a thread's turn, in no other name.

A new name made of a new word fails here until the word is put in one list or the other: in
the glossary, with what it means, when it means something of its own here; in
plain_words.txt, sorted, when it is ordinary English or programming.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"
PLAIN_WORDS = Path(__file__).with_name("plain_words.txt")

# The public names that carry "turn": each is about a thread's turn.
THREAD_TURN_NAMES = frozenset(
    {
        "ListTurnRequests",  # the store's RPC: a thread's turn requests
        "RequestTurn",  # the store's RPC: ask for a thread's turn
        "insert_turn_request",
        "list_turn_requests",
        "message_turn",  # the statement that reads what a turn request needs of its message
        "notice_takes_no_turn",
        "request_turn",
        "turn_requests",
        "used_message_id_with_turn",
    }
)

# One word of a name: an acronym, a capitalised or lowercase word; digits are no word.
_PART = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+")
# Endings of a word's other forms, and what replaces them to make the word again.
_ENDINGS = (
    ("ies", "y"),
    ("es", ""),
    ("s", ""),
    ("ed", ""),
    ("d", ""),
    ("ing", ""),
    ("ing", "e"),
)
# A glossary entry: "- **word**: ..." or "- **word** / **other**: ...".
_ENTRY = re.compile(r"^- ((?:\*\*[^*]+\*\*(?: / )?)+):", re.MULTILINE)


@dataclass(frozen=True)
class Name:
    name: str
    where: str  # path:line qualified.name

    @property
    def words(self) -> list[str]:
        return words_of(self.name)


def words_of(name: str) -> list[str]:
    """``name``'s words, lowercase: split at underscores and at each capital that begins a
    word (``ThreeCommitJob``: three, commit, job; ``HTTPGuard``: http, guard)."""
    return [word.lower() for piece in name.split("_") for word in _PART.findall(piece)]


def _targets(node: ast.stmt) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return node.targets
    if isinstance(node, ast.AnnAssign | ast.AugAssign):
        return [node.target]
    return []


def _in_class(cls: ast.ClassDef, qualified: str, path: str) -> Iterator[Name]:
    for node in cls.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield Name(node.name, f"{path}:{node.lineno} {qualified}.{node.name}")
            for inner in ast.walk(node):
                if not isinstance(inner, ast.stmt):
                    continue
                for target in _targets(inner):
                    if (
                        isinstance(target, ast.Attribute)
                        and isinstance(target.value, ast.Name)
                        and target.value.id == "self"
                    ):
                        where = f"{path}:{inner.lineno} {qualified}.{target.attr}"
                        yield Name(target.attr, where)
        elif isinstance(node, ast.ClassDef):
            yield Name(node.name, f"{path}:{node.lineno} {qualified}.{node.name}")
            yield from _in_class(node, f"{qualified}.{node.name}", path)
        else:
            for target in _targets(node):
                if isinstance(target, ast.Name):
                    yield Name(target.id, f"{path}:{node.lineno} {qualified}.{target.id}")


def _in_module(tree: ast.Module, path: str) -> Iterator[Name]:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield Name(node.name, f"{path}:{node.lineno} {node.name}")
        elif isinstance(node, ast.ClassDef):
            yield Name(node.name, f"{path}:{node.lineno} {node.name}")
            yield from _in_class(node, node.name, path)
        else:
            for target in _targets(node):
                if isinstance(target, ast.Name):
                    yield Name(target.id, f"{path}:{node.lineno} {target.id}")


@functools.cache
def public_names() -> tuple[Name, ...]:
    """The public names of sidecar/: module-level classes, functions and constants, and the
    methods and attributes of classes; none whose name begins with an underscore."""
    names: list[Name] = []
    for file in sorted((ROOT / "sidecar").rglob("*.py")):
        path = str(file.relative_to(ROOT))
        for name in _in_module(ast.parse(file.read_text(encoding="utf-8")), path):
            if not name.name.startswith("_"):
                names.append(name)
    return tuple(names)


def glossary() -> frozenset[str]:
    """The words of the terms docs/design.md's "## Words" defines."""
    text = DESIGN.read_text(encoding="utf-8")
    section = text.split("\n## Words\n", 1)[1].split("\n## ", 1)[0]
    terms = [
        term for head in _ENTRY.findall(section) for term in re.findall(r"\*\*([^*]+)\*\*", head)
    ]
    return frozenset(word for term in terms for word in words_of(term.replace(" ", "_")))


def plain_words() -> list[str]:
    return [line.strip() for line in PLAIN_WORDS.read_text().splitlines() if line.strip()]


def forms(word: str) -> set[str]:
    """``word`` and what it may be a form of (runs: run; entries: entry; settled, settling,
    unsettled: settle; landed, landing: land), so that a list need not hold every form."""
    stems = {word, word[2:]} if word.startswith("un") and len(word) > 4 else {word}
    found = set(stems)
    for stem in stems:
        for ending, base in _ENDINGS:
            if stem.endswith(ending) and len(stem) > len(ending) + 2:
                found.add(stem[: -len(ending)] + base)
    return found


def _every_form(words: frozenset[str] | set[str] | list[str]) -> frozenset[str]:
    return frozenset(form for word in words for form in forms(word))


def test_the_glossary_defines_the_words_the_code_names_things_by() -> None:
    # A check of the check: the glossary is read, and holds the domain's words.
    assert {"attempt", "run", "turn", "model", "derived", "land"} <= glossary()


def test_every_word_of_a_public_name_is_in_the_glossary_or_plain() -> None:
    known = _every_form(glossary() | frozenset(plain_words()))
    unknown: dict[str, list[str]] = {}
    for name in public_names():
        for word in name.words:
            if not forms(word) & known:
                unknown.setdefault(word, []).append(name.where)
    assert not unknown, "words neither in docs/design.md's glossary nor in plain_words.txt:\n" + (
        "\n".join(f"  {word}: {', '.join(where[:3])}" for word, where in sorted(unknown.items()))
    )


def test_turn_is_a_thread_s_turn_in_every_public_name() -> None:
    elsewhere = [
        name.where
        for name in public_names()
        if {"turn", "turns"} & set(name.words) and name.name not in THREAD_TURN_NAMES
    ]
    assert not elsewhere, (
        "\"turn\" in a public name that is not about a thread's turn (a turn is a thread's "
        "alone; name a layout or a lock by what it is):\n  " + "\n  ".join(elsewhere)
    )
    gone = THREAD_TURN_NAMES - {name.name for name in public_names()}
    assert not gone, f"THREAD_TURN_NAMES holds names sidecar/ no longer has: {sorted(gone)}"


def test_the_plain_words_are_sorted_and_none_is_the_glossary_s() -> None:
    plain = plain_words()
    assert plain == sorted(set(plain)), "plain_words.txt: one word a line, sorted, once each"
    defined = _every_form(glossary())
    in_both = [word for word in plain if forms(word) & defined]
    assert not in_both, f"in the glossary, so not plain: {in_both}"
