"""``actonce audit list|show|export|verify|pending|resolve|prune``: the ledger for operators.

Exit codes: 0 when the command did what it was asked (``verify``: the chain is
intact; ``pending``: nothing is pending), 1 when ``verify`` found a bad event or
``resolve`` or ``prune`` was refused, 2 when the ledger cannot be read, 3 when
``pending`` found something that needs a person, or ``prune`` kept events back
because of it (so that cron and alerting can use it).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, cast

from sidecar import defaults
from sidecar.errors import InvalidArgument
from sidecar.ledger import inspect
from sidecar.ledger.base import LedgerError, LedgerReader
from sidecar.ledger.operator_keys import SignatureCheck, load_key
from sidecar.ledger.pending import PendingItem
from sidecar.ops.terminal import EscapingWriter, escaped

if TYPE_CHECKING:
    from sidecar.ledger.operator import OperatorLedger
    from sidecar.ledger.retention import PruneResult
from sidecar.rules import canonical


def open_reader(values: dict[str, Any]) -> LedgerReader:
    if values.get("audit_dsn"):
        # A reader whose snapshot verify's other workers can adopt (sidecar.ledger.pgsnapshot).
        from sidecar.ledger.pgsnapshot import SharingReader

        return SharingReader(str(values["audit_dsn"]))
    from sidecar.ledger.sqlite import SqliteLedgerReader

    path = values.get("audit_db") or defaults.DATA_DIR / "audit.db"
    return SqliteLedgerReader(Path(path))


def default_jobs() -> int:
    """The workers of ``audit verify`` when ``--jobs`` is not given: a few, no more than the
    machine's CPUs (its walk hashes every event)."""
    return min(4, os.cpu_count() or 1)


def _progress(done: int, total: int) -> None:
    # Progress goes to stderr, so that `export > file` stays clean JSON lines.
    print(f"\r{done}/{total} events", end="" if done < total else "\n", file=sys.stderr)


PENDING_FOUND = 3
NOT_FOUND = 1


def run_audit(command: str, values: dict[str, Any], run_id: str = "") -> int:
    if command in ("pending", "resolve"):
        return run_operator(command, values)
    if command == "prune":
        return run_prune(values)
    if command == "migrate":
        return run_migrate(values)
    try:
        reader = open_reader(values)
    except LedgerError as exc:
        print(f"actonce: error: {exc}", file=sys.stderr)
        return 2
    try:
        # Run ids, rules, tools, reasons: callers chose them; each line is escaped.
        lines = cast(TextIO, EscapingWriter(sys.stdout))
        if command == "list":
            inspect.list_runs(reader, lines)
        elif command == "show":
            if not inspect.show_run(reader, run_id, lines):
                print(
                    f"actonce: error: the ledger holds no event of run {run_id!r}", file=sys.stderr
                )
                return NOT_FOUND
        elif command == "export":
            inspect.export(reader, sys.stdout, _progress)
        elif command == "verify":
            return _verify(reader, values)
        return 0
    except Exception as exc:  # a ledger that cannot be read is not a traceback for the operator
        print(f"actonce: error: cannot read the ledger: {exc}", file=sys.stderr)
        return 2
    finally:
        reader.close()


def _verify(reader: LedgerReader, values: dict[str, Any]) -> int:
    """``verify``: the hash chain, then who made each decision (an operator role's member
    on PostgreSQL, an operator key's signature on SQLite)."""
    key_file = values.get("operator_key")
    signatures = SignatureCheck(load_key(Path(key_file)) if key_file else None)
    shared: inspect.SharedSnapshot | None = None
    if values.get("audit_dsn"):
        from sidecar.ledger.pgsnapshot import SharedPostgresSnapshot

        shared = SharedPostgresSnapshot(str(values["audit_dsn"]))
    verdict = inspect.verify(
        reader,
        _progress,
        values.get("with_export") or (),
        decisions=signatures.take,
        jobs=int(values.get("jobs") or default_jobs()),
        shared=shared,
    )
    if not verdict.intact:
        print(
            f"ledger TAMPERED: first bad event #{verdict.first_bad}: "
            f"{escaped(verdict.problem)} ({verdict.checked} events before it are intact)"
        )
        return 1
    print(f"ledger intact: {verdict.checked} events, hash chain verified{_span(verdict)}")
    if values.get("audit_dsn"):
        return _verify_authors(str(values["audit_dsn"]))
    return _verify_signatures(signatures)


def _verify_signatures(check: SignatureCheck) -> int:
    found = check.result()
    for seq, why in found.forged:
        print(f"decision NOT AN OPERATOR'S: event #{seq}: {escaped(why)}")
    said = [f"{found.verified} signed with the operator key given"]
    if found.unchecked:
        said.append(f"{found.unchecked} signed with other keys (give their file to check them)")
    if found.before_signing:
        said.append(f"{found.before_signing} unsigned, recorded before decisions were signed")
    if found.verified or found.unchecked or found.before_signing or found.forged:
        print("decisions: " + "; ".join(said))
    return 1 if found.forged else 0


def _verify_authors(dsn: str) -> int:
    from sidecar.ledger.pgschema import decision_authors

    found = decision_authors(dsn)
    if found is None:
        print("decisions: this ledger records no authors yet (run `actonce audit migrate`)")
        return 0
    for seq, author in found.not_operators:
        print(
            f"decision NOT AN OPERATOR'S: event #{seq} was appended by role "
            f"{escaped(author)}, which is not an operator role's member"
        )
    if found.checked or found.unrecorded or found.not_operators:
        note = f", {found.unrecorded} from before authors were recorded" if found.unrecorded else ""
        print(f"decisions: {found.checked} appended by operator roles{note}")
    return 1 if found.not_operators else 0


def _span(verdict: inspect.Verdict) -> str:
    return _where(verdict) + _notes(verdict)


def _notes(verdict: inspect.Verdict) -> str:
    notes = []
    if verdict.exports_empty:
        notes.append("; the exports hold no event (prunes that found nothing to remove)")
    if verdict.leftover:
        notes.append(
            f"; {verdict.leftover} of them, at or before the checkpoint, a prune had "
            "not deleted yet (the next prune deletes them)"
        )
    return "".join(notes)


def _where(verdict: inspect.Verdict) -> str:
    if verdict.exported:
        return (
            f" ({verdict.exported} in the exports, {verdict.checked - verdict.exported} "
            f"in the ledger, from event #{verdict.after + 1})"
        )
    if verdict.after:
        return f" from the checkpoint after event #{verdict.after} (earlier events were pruned)"
    return ""


def run_prune(values: dict[str, Any]) -> int:
    """``prune``: export the oldest events, then remove them; see sidecar.ledger.retention."""
    from sidecar.ledger.retention import PruneRefused, open_retention, parse_before

    try:
        parse_before(str(values["before"]))
    except ValueError as exc:
        print(f"actonce: error: --before {exc}", file=sys.stderr)
        return 2
    export = Path(values["export"])
    try:
        ledger = open_retention(
            values.get("audit_db") or defaults.DATA_DIR / "audit.db", values.get("audit_dsn")
        )
    except LedgerError as exc:
        print(f"actonce: error: {exc}", file=sys.stderr)
        return 2
    try:
        # An age counts back from the ledger's own time, which stamped its events.
        before = parse_before(str(values["before"]), ledger.now())
        result = ledger.prune(before, export, _progress)
    except PruneRefused as exc:
        print(f"actonce: refused: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:  # a time past the ledger's own clock
        print(f"actonce: error: --before {exc}", file=sys.stderr)
        return 2
    except (LedgerError, OSError) as exc:
        print(f"actonce: error: {exc}", file=sys.stderr)
        return 2
    finally:
        ledger.close()
    if result.chains:
        _print_chains(result, export, str(values["before"]))
    elif result.cut > result.after:
        print(
            f"pruned events #{result.after + 1} to #{result.cut} ({result.exported} events), "
            f"exported to {export}; the ledger's chain now begins after #{result.cut} "
            f"(hash {result.hash})"
        )
    else:
        print(f"nothing to prune before {values['before']}: {export} is empty")
    if result.holds:
        print(
            f"kept events #{result.cut + 1} to #{result.requested}, older than --before, because:"
        )
        for hold in result.holds:
            print(f"    #{hold.seq}: {escaped(hold.why)}")
    return PENDING_FOUND if result.held_by_pending else 0


def _print_chains(result: PruneResult, export: Path, before: str) -> None:
    """What a prune of a ledger of many chains removed and kept, chain by chain."""
    removed = [part for part in result.chains if part.cut > part.after]
    if not removed:
        print(f"nothing to prune before {before}: {export} is empty")
    for part in removed:
        print(
            f"chain {part.chain}: pruned {part.exported} events after #{part.after} to "
            f"#{part.cut}; the chain now begins after #{part.cut} (hash {part.hash})"
        )
    if removed:
        print(f"{result.exported} events exported to {export}")
    for part in result.chains:
        if part.holds:
            print(f"chain {part.chain}: kept events from #{part.cut + 1}, older than --before:")
            for hold in part.holds:
                print(f"    #{hold.seq}: {escaped(hold.why)}")


def _pending(ledger: OperatorLedger, values: dict[str, Any]) -> int:
    """``pending``: what a person can decide now; or, with --in-flight, the steps that
    are still running and so are nobody's to decide yet."""
    undecided = ledger.undecided()
    items, flying = ledger.split_in_flight(undecided)
    if values.get("in_flight"):
        for entry in flying:
            _print_item(entry.item, values, why=entry.note, kind="step_in_flight")
        if not flying and not values.get("json"):
            print("no step in flight")
        return 0
    for item in items:
        _print_item(item, values, why=item.why, kind=item.kind.value)
    if not items and not values.get("json"):
        print("nothing pending")
    if flying:
        note = (
            f"{len(flying)} step(s) in flight on live sidecars are not listed: they are not "
            "in doubt; `actonce audit pending --in-flight` shows them"
        )
        print(note, file=sys.stderr)
    return PENDING_FOUND if items else 0


def _print_item(item: PendingItem, values: dict[str, Any], *, why: str, kind: str) -> None:
    if values.get("json"):
        line = {**item.as_json(), "kind": kind, "why": why}
        print(json.dumps(line, sort_keys=True, separators=(",", ":")))
        return
    # Every field as the ledger holds it, escaped: a run id or a rule with a terminal's
    # escape sequence in it must not erase this line, nor write anywhere else.
    what = f"step {item.tool}" if item.tool else f"{item.rpc} {item.write_type}"
    text = (
        f"{item.ts}  {kind}  run={item.run_id} rule={item.rule} attempt={item.attempt_id} "
        f"what={what!r} id={item.id} digest={item.digest or '-'}"
    )
    print(f"{escaped(text)}\n    why: {escaped(why)}")


def run_migrate(values: dict[str, Any]) -> int:
    """``migrate``: create or upgrade the schema as the ledger's owner (sidecar.ledger.pgschema),
    and grant ``--writer-role`` what a sidecar needs. A SQLite file needs none: the sidecar
    that opens it brings it up to date."""
    dsn, role = values.get("audit_dsn"), values.get("writer_role")
    operator = values.get("operator_role")
    if not dsn:
        print(
            "actonce: error: migrate is for a PostgreSQL ledger (--audit-dsn or "
            "--audit-dsn-file); a SQLite file is brought up to date by the sidecar that "
            "opens it",
            file=sys.stderr,
        )
        return 2
    from sidecar.ledger.pgschema import migrate
    from sidecar.ledger.schema import POSTGRES_CHAINS

    try:
        chains = int(values.get("chains") or POSTGRES_CHAINS)
        state = migrate(str(dsn), writer_role=role, operator_role=operator, chains=chains)
    except LedgerError as exc:
        print(f"actonce: error: {exc}", file=sys.stderr)
        return 2
    was = "new" if state.migrated_from is None else f"was version {state.migrated_from}"
    print(
        f"ledger schema at version {state.version} ({was}), owned by role {state.role}, "
        f"{state.chains} chain{'s' if state.chains != 1 else ''}"
    )
    if role:
        print(
            f"role {role} may append events, and fence and bind runs of the rule they have; "
            "it may not decide, update or delete an event, nor write a checkpoint"
        )
    if operator:
        print(f"role {operator} may decide (audit resolve, the console); it may not fence or bind")
    return 0


def run_operator(command: str, values: dict[str, Any]) -> int:
    """``pending`` and ``resolve``: what needs a person, and a person's decision."""
    from sidecar.ledger.operator import open_operator_ledger
    from sidecar.ledger.pending import Decision, DecisionRefused

    try:
        ledger = open_operator_ledger(
            values.get("audit_db") or defaults.DATA_DIR / "audit.db",
            values.get("audit_dsn"),
            read_only=command == "pending",
            operator_key=values.get("operator_key") if command == "resolve" else None,
        )
    except LedgerError as exc:
        print(f"actonce: error: {exc}", file=sys.stderr)
        return 2
    try:
        if command == "pending":
            return _pending(ledger, values)
        result_json = values.get("result_json") or ""
        if result_json:
            try:
                _value, form = canonical.parse_canonical(result_json, "--result-json")
            except InvalidArgument as exc:
                print(f"actonce: error: {exc}", file=sys.stderr)  # names --result-json
                return 2
            result_json = form.decode("utf-8")
        typed = str(values.get("by") or "")
        try:
            # Who decides is who the ledger authenticated; a typed --by is a note beside it.
            by = ledger.operator() or typed
            if not by:
                raise DecisionRefused(
                    "a decision on a SQLite ledger is signed with an operator key: give "
                    "--operator-key FILE (a key the serving sidecar does not hold)"
                )
            stored = ledger.resolve(
                str(values["item_id"]),
                Decision(values["decision"]),
                by=by,
                by_note=typed,
                reason=str(values.get("reason") or ""),
                result_json=result_json,
                digest=canonical.digest(result_json.encode("utf-8")) if result_json else "",
            )
        except DecisionRefused as exc:
            print(f"actonce: refused: {exc}", file=sys.stderr)
            return 1
        print(
            escaped(
                f"recorded as event #{stored.seq}: {values['item_id']} "
                f"{stored.event.detail['decision']} by {stored.event.detail['by']} "
                f"(run {stored.event.run_id})"
            )
        )
        if not ledger.operator():
            print(
                "actonce: warning: recorded unsigned, by a name that was typed: give "
                "--operator-key FILE, or `audit verify` reports it once decisions are signed",
                file=sys.stderr,
            )
        return 0
    except LedgerError as exc:
        print(f"actonce: error: {exc}", file=sys.stderr)
        return 2
    finally:
        ledger.close()
