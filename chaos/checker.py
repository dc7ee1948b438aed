"""The independent checker: the store's database and the audit ledger against the plan.

It trusts nothing the sidecar answered. It reads the store's tables directly (SQLite file or
PostgreSQL database) and the ledger through its read-only readers, and holds them against
what the plan intends, counted two ways: by content (how many artifacts hold this data, how
many messages of this text a thread has) and by id (the ids the derived-id specification,
docs/derived-ids.md, gives each planned write). What the agent was told is only used to
demand that each acknowledged write is in the store and has a durable audit outcome.

Findings:
- a duplicate: an object more times than the plan makes it, or a non-idempotent tool run
  more than once;
- a loss: a planned or acknowledged object missing, an edit's value not in place, a sent
  message without its turn request, a finished run's step without its recorded end;
- a violation: everything else the contract forbids (an acknowledged write without its
  audit outcome, an outcome that says applied for something the store lacks, an object in
  the store with no audited intent, a broken hash chain, an unexpected answer).

The store's rows are read in chaos.store_snapshot, the model is chaos.expected, and each
kind of check beyond the counts and ids here is a module of its own: chaos.check_ledger,
chaos.check_gateway and chaos.check_decisions.

A gateway charge is held against what the payments upstream counted in its own file
(:class:`GatewayRecord`): each logical charge made at most once upstream (more is a
duplicate); a finished run's charge made exactly once, and never listed as pending after;
one left in doubt listed by ``actonce audit pending``; each operator's decision consistent
with the upstream's count (``ran`` with one charge); and, in the ledger, no decision while a
permitted call may still be under way: none before the permit's deadline unless that call's
end was recorded first, and no step end, after a ``did_not_run``, from an attempt that began
the step before it.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from typing import Any

from chaos.check_decisions import _check_decisions
from chaos.check_gateway import GatewayRecord, _check_gateway
from chaos.check_ledger import _check_ledger
from chaos.expected import _expected
from chaos.findings import Findings
from chaos.plan import SeedPlan
from chaos.run_result import RunResult
from chaos.store_snapshot import StoreSnapshot
from sidecar.ledger.base import LedgerReader
from sidecar.ledger.inspect import verify
from sidecar.rules import canonical


def _compare_counts(found: Findings, what: str, want: Counter[Any], have: Counter[Any]) -> None:
    for key in sorted(set(want) | set(have), key=repr):
        if have[key] > want[key]:
            found.duplicate(
                f"{what} {key!r}: {have[key]} in the store, planned {want[key]}",
                have[key] - want[key],
            )
        elif have[key] < want[key]:
            found.lost(
                f"{what} {key!r}: {have[key]} in the store, planned {want[key]}",
                want[key] - have[key],
            )


def _compare_ids(found: Findings, what: str, want: Iterable[str], have: Iterable[str]) -> None:
    expected, actual = set(want), set(have)
    for missing in sorted(expected - actual):
        found.violation(f"{what} {missing} (planned, by its derived id) is not in the store")
    for extra in sorted(actual - expected):
        found.violation(f"{what} {extra} is in the store but no planned write has its id")


def check(
    plan: SeedPlan,
    results: dict[str, RunResult],
    store: StoreSnapshot,
    reader: LedgerReader,
    gateway: GatewayRecord | None = None,
) -> Findings:
    """Hold the store and the ledger against the plan and the agent's acknowledgements, and
    a seed's gateway charges against what the upstream counted."""
    found = Findings()
    for result in results.values():
        for text in result.violations:
            found.violation(text)
        if not result.finished and not result.in_doubt_step:
            found.violation(f"{result.run_id}: the run neither finished nor settled in doubt")
    want = _expected(plan, results)
    complete = all(r.finished or r.in_doubt_step for r in results.values())

    # Every answer names an id the model gives that write (any of its identical twins').
    for result in results.values():
        for ack in result.acks:
            allowed = want.answers.get((result.run_id, ack.op_index))
            if ack.id and allowed is not None and ack.id not in allowed:
                found.violation(
                    f"{result.run_id}: op {ack.op_index} ({ack.rpc}) in {ack.attempt_id} was "
                    f"answered {ack.id} ({ack.outcome}); the model gives {sorted(allowed)}"
                )

    # By content: how many times each planned thing is in the store.
    have_bodies = Counter(
        (kind, canonical.canonical(json.loads(data)["body"]))
        for kind, _v, data, _a in store.artifacts.values()
    )
    have_proposal_bodies = Counter(
        (kind, canonical.canonical(json.loads(data)["body"]))
        for kind, data, artifact_id, _p, _b in store.proposals.values()
        if not artifact_id
    )
    have_edit_proposals: Counter[tuple[str, str, bytes]] = Counter()
    for _k, _d, artifact_id, patch_json, _b in store.proposals.values():
        if artifact_id:
            (operation,) = json.loads(patch_json)
            have_edit_proposals[
                (artifact_id, operation["path"], canonical.canonical(operation["value"]))
            ] += 1
    if complete:
        _compare_counts(found, "artifact", want.artifact_bodies, have_bodies)
        _compare_counts(found, "proposed create", want.proposal_bodies, have_proposal_bodies)
        _compare_counts(found, "proposed edit", want.edit_proposal_values, have_edit_proposals)
        _compare_counts(found, "thread titled", want.titles, Counter(store.threads.values()))
        _compare_counts(found, "message", want.posts, Counter(store.messages.values()))
        # By id: the derived-id specification says which ids the plan's writes have.
        _compare_ids(found, "artifact", want.artifacts, store.artifacts)
        _compare_ids(
            found, "proposal", [*want.create_proposals, *want.edit_proposals], store.proposals
        )
        _compare_ids(found, "thread", want.threads, store.threads)
        _compare_ids(found, "message", want.messages, store.messages)
        # Every edit's value is in place: the final document is the plan's.
        for artifact_id, (_kind, data) in want.artifacts.items():
            stored = store.artifacts.get(artifact_id)
            if stored is not None and canonical.canonical(
                json.loads(stored[2])
            ) != canonical.canonical(data):
                found.lost(
                    f"artifact {artifact_id} holds {stored[2]}, the plan leaves {json.dumps(data)}"
                )

    # A sent message and its turn request commit together: none untaken, none twice.
    turns = Counter(store.turn_requests)
    for message_id, (_thread, kind, _text) in store.messages.items():
        if kind == "message" and turns[message_id] != 1:
            found.lost(f"message {message_id} has {turns[message_id]} turn requests")
    for message_id in turns:
        if store.messages.get(message_id, ("", "", ""))[1] != "message":
            found.violation(f"turn request for {message_id}, which is no sent message")

    events = list(reader.events())
    _check_ledger(found, plan, results, store, events, want)
    if gateway is not None:
        _check_gateway(found, plan, results, events, want, gateway)
    _check_decisions(found, events)
    verdict = verify(reader)
    if not verdict.intact:
        found.violation(f"ledger chain broken at event {verdict.first_bad}: {verdict.problem}")
    return found
