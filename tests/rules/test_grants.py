"""The grants file and the rule it gives: what a rule's attempts may reach of another rule's
data. Pure: text in, grants out; owner, kind and access in, a decision out."""

from __future__ import annotations

import pytest

from sidecar.rules.grants import ARTIFACT, THREAD, Access, Grants, GrantsError, parse_grants

YAML = """
grants:
  - rule: chat
    owner: kb
    artifacts: [read]
    kinds: [article]
  - rule: chat
    owner: kb
    threads: [read]
  - rule: triage
    owner: payments
    artifacts: [edit]
    threads: [post]
"""


def test_yaml_and_json_give_the_same_grants() -> None:
    as_json = (
        '{"grants": [{"rule": "chat", "owner": "kb", "artifacts": ["read"], "kinds": ["article"]},'
        ' {"rule": "chat", "owner": "kb", "threads": ["read"]},'
        ' {"rule": "triage", "owner": "payments", "artifacts": ["edit"], "threads": ["post"]}]}'
    )
    assert parse_grants(YAML) == parse_grants(as_json)
    assert parse_grants(as_json, yaml_allowed=False) == parse_grants(YAML)


def test_a_rule_reaches_its_own_and_unowned_data_without_a_grant() -> None:
    none = Grants()
    for access in Access:
        assert none.decide("chat", "chat", ARTIFACT, "any", access).allowed
        assert none.decide("chat", "", THREAD, "", access).allowed  # made before owners
    own = none.decide("chat", "chat", ARTIFACT, "x", Access.EDIT)
    assert own.granted_owner == ""  # the store needs no grant named for its own


def test_grants_open_what_they_name_and_nothing_else() -> None:
    grants = parse_grants(YAML)
    read = grants.decide("chat", "kb", ARTIFACT, "article", Access.READ)
    assert (read.allowed, read.granted_owner) == (True, "kb")
    assert grants.decide("chat", "kb", THREAD, "", Access.READ).allowed
    refused = {
        ("kb", ARTIFACT, "faq", Access.READ): "chat: kb artifacts read (kind faq)",
        ("kb", ARTIFACT, "article", Access.EDIT): "chat: kb artifacts edit (kind article)",
        ("kb", ARTIFACT, "article", Access.PROPOSE): "chat: kb artifacts propose (kind article)",
        ("kb", THREAD, "", Access.POST): "chat: kb threads post",
        ("payments", ARTIFACT, "invoice", Access.READ): "chat: payments artifacts read (kind invoice)",
    }  # fmt: skip
    for (owner, target, kind, access), missing in refused.items():
        decision = grants.decide("chat", owner, target, kind, access)
        assert (decision.allowed, decision.granted_owner, decision.missing) == (False, "", missing)
    # A grant is one rule's, of one owner's: it opens nothing the other way round.
    assert not grants.decide("kb", "chat", ARTIFACT, "article", Access.READ).allowed


def test_an_edit_grant_lets_the_rule_propose_that_edit_but_not_read() -> None:
    grants = parse_grants(YAML)
    assert grants.decide("triage", "payments", ARTIFACT, "invoice", Access.EDIT).allowed
    assert grants.decide("triage", "payments", ARTIFACT, "invoice", Access.PROPOSE).allowed
    assert not grants.decide("triage", "payments", ARTIFACT, "invoice", Access.READ).allowed
    assert grants.decide("triage", "payments", THREAD, "", Access.POST).allowed
    assert not grants.decide("triage", "payments", THREAD, "", Access.READ).allowed


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[]", 'expected a map with one key, "grants"'),
        ("grants: {}", '"grants" must be a list'),
        ("grants: [chat]", "grants[0] must be a map"),
        ("grants: [{rule: chat, owner: kb, artifacts: [read], extra: 1}]", "unknown keys: extra"),
        ("grants: [{owner: kb, artifacts: [read]}]", "grants[0].rule must be a rule's name"),
        ("grants: [{rule: chat, owner: chat, artifacts: [read]}]", "reaches its own data"),
        ("grants: [{rule: chat, owner: kb, artifacts: [write]}]",
         "grants[0].artifacts[0] must be one of edit, propose, read"),
        ("grants: [{rule: chat, owner: kb, threads: [edit]}]",
         "grants[0].threads[0] must be one of post, read"),
        ("grants: [{rule: chat, owner: kb, threads: [read], kinds: [a]}]",
         "kinds narrows artifacts, which grant nothing"),
        ("grants: [{rule: chat, owner: kb, artifacts: [read], kinds: []}]", "not empty"),
        ("grants: [{rule: chat, owner: kb}]", "grants nothing"),
        ("grants: [{rule: \"c\\x1bh\", owner: kb, artifacts: [read]}]", "control character"),
        ("grants: [", "not YAML"),
    ],
)  # fmt: skip
def test_a_file_that_is_not_grants_is_refused_saying_where(text: str, said: str) -> None:
    with pytest.raises(GrantsError) as caught:
        parse_grants(text)
    assert said in str(caught.value)
    assert "\n" not in str(caught.value)


def test_an_empty_file_grants_nothing() -> None:
    assert parse_grants("") == Grants() == parse_grants("grants: []")
