"""Grants: which other rules' artifacts and threads a rule's attempts may reach.

Every artifact and thread belongs to the rule whose run created it (its owner). An attempt
reaches what its own rule owns, and data made before owners were recorded; anything else only
where the operator's grants file says so. The file (``--grants``, ``ACTONCE_GRANTS``; YAML or
JSON, docs/grants.md) is a list of grants, each naming the rule that gets it, the owner whose
data it opens, and what it opens::

    grants:
      - rule: chat          # the attempts of this rule...
        owner: kb           # ...may reach this rule's data:
        artifacts: [read]   # read its artifacts (read, edit, propose)
        kinds: [article]    # of these kinds only (default: every kind)
        threads: []         # and none of its threads (read, post)

Grants add up: a call is allowed when any grant allows it. Nothing here knows where the file
is or how the owner was found: :func:`parse_grants` takes the text, :meth:`Grants.decide` the facts.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ARTIFACT",
    "THREAD",
    "Access",
    "Decision",
    "Grant",
    "Grants",
    "GrantsError",
    "parse_grants",
]

# What a target is: the two things an owner owns.
ARTIFACT = "artifacts"
THREAD = "threads"


class Access(enum.StrEnum):
    """What a call does to its target, as a grant names it."""

    READ = "read"  # Read an artifact, or a thread's messages
    EDIT = "edit"  # Edit an artifact (and propose an edit of it)
    PROPOSE = "propose"  # propose an edit of an artifact, which changes nothing until reviewed
    POST = "post"  # Notice or Send into a thread (Send needs the send allowlist too)


# The accesses a grant may give to each kind of target.
_ALLOWED: Mapping[str, frozenset[Access]] = {
    ARTIFACT: frozenset({Access.READ, Access.EDIT, Access.PROPOSE}),
    THREAD: frozenset({Access.READ, Access.POST}),
}
# An access that a wider one implies: an edit grant lets the rule propose that edit too.
_IMPLIED_BY: Mapping[Access, frozenset[Access]] = {Access.PROPOSE: frozenset({Access.EDIT})}

_KEYS = frozenset({"rule", "owner", "artifacts", "kinds", "threads"})
MAX_NAME_CHARS = 256


class GrantsError(ValueError):
    """The grants file is not one: the message says where and why, in one line."""


@dataclass(frozen=True)
class Grant:
    """One entry of the file: ``rule``'s attempts may do ``artifacts`` to ``owner``'s
    artifacts (of ``kinds``; None: every kind) and ``threads`` to its threads."""

    rule: str
    owner: str
    artifacts: frozenset[Access] = frozenset()
    kinds: frozenset[str] | None = None
    threads: frozenset[Access] = frozenset()

    def allows(self, target: str, kind: str, access: Access) -> bool:
        wanted = {access} | _IMPLIED_BY.get(access, frozenset())
        if target == THREAD:
            return bool(wanted & self.threads)
        if self.kinds is not None and kind not in self.kinds:
            return False
        return bool(wanted & self.artifacts)


@dataclass(frozen=True)
class Decision:
    """Whether a call may reach its target: ``allowed``, and ``granted_owner``, the owner a
    grant opened (empty when the target is the rule's own or has no owner). When it may
    not, ``missing`` names the grant it lacks, as an operator would write it."""

    allowed: bool
    granted_owner: str = ""
    missing: str = ""


@dataclass(frozen=True)
class Grants:
    """The operator's grants; no grant at all is the default (each rule reaches its own)."""

    grants: tuple[Grant, ...] = ()
    _by_rule: Mapping[tuple[str, str], tuple[Grant, ...]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def __post_init__(self) -> None:
        index: dict[tuple[str, str], list[Grant]] = {}
        for grant in self.grants:
            index.setdefault((grant.rule, grant.owner), []).append(grant)
        object.__setattr__(self, "_by_rule", {k: tuple(v) for k, v in index.items()})

    def decide(self, rule: str, owner: str, target: str, kind: str, access: Access) -> Decision:
        """Whether an attempt of ``rule`` may do ``access`` to a target (``ARTIFACT`` of
        ``kind``, or ``THREAD``) that ``owner`` owns."""
        if not owner or owner == rule:
            return Decision(True)
        for grant in self._by_rule.get((rule, owner), ()):
            if grant.allows(target, kind, access):
                return Decision(True, granted_owner=owner)
        return Decision(False, missing=describe(rule, owner, target, kind, access))


def describe(rule: str, owner: str, target: str, kind: str, access: Access) -> str:
    """The grant a refused call lacks, in the file's words (``chat: kb artifacts read
    (kind invoice)``): what an operator would add to allow it."""
    what = f"{rule}: {owner} {target} {access.value}"
    return f"{what} (kind {kind})" if target == ARTIFACT and kind else what


# -- reading the file ---------------------------------------------------------------------


def parse_grants(text: str, *, yaml_allowed: bool = True) -> Grants:
    """The grants a file's ``text`` holds: JSON, or YAML (a superset of JSON) when PyYAML is
    installed. GrantsError, one line saying where, when it is not a grants file."""
    loaded = _load(text, yaml_allowed=yaml_allowed)
    if loaded is None:
        return Grants()
    if not isinstance(loaded, Mapping) or set(loaded) - {"grants"}:
        raise GrantsError('expected a map with one key, "grants": a list of grants')
    entries = loaded.get("grants")
    if entries is None:  # "grants:" with nothing under it
        entries = []
    if not isinstance(entries, list):
        raise GrantsError('"grants" must be a list of grants')
    return Grants(tuple(_grant(i, entry) for i, entry in enumerate(entries)))


def _load(text: str, *, yaml_allowed: bool) -> Any:
    try:
        return json.loads(text) if text.strip() else None
    except ValueError as not_json:
        if not yaml_allowed:
            raise GrantsError(f"not JSON: {not_json}") from None
    try:
        import yaml
    except ImportError:
        raise GrantsError(
            "not JSON, and YAML needs PyYAML (actonce's 'mcp' extra): write the file as JSON"
        ) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise GrantsError(f"not YAML: {' '.join(str(exc).split())}") from None


def _grant(index: int, entry: object) -> Grant:
    where = f"grants[{index}]"
    if not isinstance(entry, Mapping):
        raise GrantsError(f"{where} must be a map with rule, owner, artifacts, kinds, threads")
    unknown = sorted(str(key) for key in set(entry) - _KEYS)
    if unknown:
        raise GrantsError(f"{where} has unknown keys: {', '.join(unknown)}")
    rule = _name(entry.get("rule"), f"{where}.rule")
    owner = _name(entry.get("owner"), f"{where}.owner")
    if rule == owner:
        raise GrantsError(f"{where}: a rule reaches its own data without a grant")
    artifacts = _accesses(entry.get("artifacts"), ARTIFACT, f"{where}.artifacts")
    threads = _accesses(entry.get("threads"), THREAD, f"{where}.threads")
    kinds = None
    if "kinds" in entry:
        kinds = frozenset(_names(entry["kinds"], f"{where}.kinds"))
        if not artifacts:
            raise GrantsError(f"{where}.kinds narrows artifacts, which grant nothing")
    if not artifacts and not threads:
        raise GrantsError(f"{where} grants nothing: name artifacts or threads")
    return Grant(rule, owner, artifacts, kinds, threads)


def _name(value: object, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise GrantsError(f"{where} must be a rule's name")
    if len(value) > MAX_NAME_CHARS or any(ord(c) < 0x20 or c == "\x7f" for c in value):
        raise GrantsError(f"{where} is not a name: too long, or a control character in it")
    return value


def _names(value: object, where: str) -> Sequence[str]:
    if not isinstance(value, list) or not value:
        raise GrantsError(f"{where} must be a list of names, not empty")
    return [_name(item, f"{where}[{i}]") for i, item in enumerate(value)]


def _accesses(value: object, target: str, where: str) -> frozenset[Access]:
    if value is None:
        return frozenset()
    if not isinstance(value, list):
        raise GrantsError(f"{where} must be a list of {_choices(target)}")
    allowed = _ALLOWED[target]
    accesses: set[Access] = set()
    for i, item in enumerate(value):
        if not isinstance(item, str) or item not in {a.value for a in allowed}:
            raise GrantsError(f"{where}[{i}] must be one of {_choices(target)}")
        accesses.add(Access(item))
    return frozenset(accesses)


def _choices(target: str) -> str:
    return ", ".join(sorted(a.value for a in _ALLOWED[target]))
