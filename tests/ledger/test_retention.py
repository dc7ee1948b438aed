"""`actonce audit prune` on both backends: what it exports, what it keeps, and a chain that
still verifies, alone and with its exports, with sidecars writing meanwhile."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from actonce_api.v1 import run_actions_pb2 as pb

from sidecar.ledger import inspect
from sidecar.ledger.base import AuditEvent, Phase
from sidecar.ledger.pgschema import migrate
from sidecar.ledger.retention import event_time, parse_before
from tests.harness import sidecar_config, start_sidecar
from tests.helpers import postgres as pg
from tests.ledger.support import LedgerPlace, audit_cli


@dataclass
class Ledger(LedgerPlace):
    name: str
    folder: Path

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`actonce audit ARGS` on this ledger, through the command line's own entry point,
        in this process (one interpreter start per command would dominate these tests)."""
        where = ["--audit-dsn", self.dsn] if self.dsn else ["--audit-db", str(self.db)]
        return audit_cli(["audit", *args, *where])

    def prune(self, export: str, before: str = "0h") -> subprocess.CompletedProcess[str]:
        return self.cli("prune", "--before", before, "--export", str(self.folder / export))

    def sql(self, statement: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        """Read or tamper with the ledger as someone with database access would."""
        if self.dsn:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                cur = conn.execute(statement.replace("?", "%s"), params)
                return list(cur.fetchall()) if cur.description else []
        lite = sqlite3.connect(str(self.db), isolation_level=None)
        try:
            return list(lite.execute(statement, params).fetchall())
        finally:
            lite.close()

    def seqs(self) -> list[int]:
        return [int(r[0]) for r in self.sql("SELECT seq FROM audit_events ORDER BY seq")]

    def verdict(self, *exports: str) -> inspect.Verdict:
        return self.verify(*(self.folder / e for e in exports))


@pytest.fixture(params=["sqlite", "postgres"])
def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Ledger]:
    if request.param == "postgres":
        dsn = pg.fresh_database("prune")
        # One chain, numbered without gaps, as SQLite's: these tests name the events a
        # prune removes by number (tests/ledger/test_chains.py prunes many chains).
        migrate(dsn, chains=1)
        made = Ledger(None, dsn, "postgres", tmp_path)
        made.append()
        yield made
        pg.drop_database(dsn)
    else:
        made = Ledger(tmp_path / "audit.db", None, "sqlite", tmp_path)
        made.append()
        yield made


def begin(run: str, attempt: str) -> AuditEvent:
    return AuditEvent(run, attempt, "BeginAttempt", Phase.ATTEMPT_BEGIN, rule="triage")


def write(run: str, attempt: str, derived: str, *, landed: bool = True) -> list[AuditEvent]:
    intent = AuditEvent(run, attempt, "Create", Phase.INTENT, rule="triage", write_type="create",
                        derived_id=derived, occurrence=0)  # fmt: skip
    if not landed:
        return [intent]  # the sidecar died before the outcome: pending
    return [intent, AuditEvent(run, attempt, "Create", Phase.OUTCOME, rule="triage",
                               write_type="create", derived_id=derived, occurrence=0,
                               outcome="OUTCOME_APPLIED")]  # fmt: skip


def step_in_doubt(run: str, attempt: str, step: str) -> AuditEvent:
    return AuditEvent(run, attempt, "BeginStep", Phase.STEP_BEGIN, rule="triage",
                      write_type="step", derived_id=step, occurrence=0,
                      detail={"tool": "charge_card", "effect": "NON_IDEMPOTENT_WRITE"})  # fmt: skip


def finished_run(run: str) -> list[AuditEvent]:
    attempt = f"{run}-a1"
    return [begin(run, attempt), *write(run, attempt, f"art_{run}"),
            AuditEvent(run, attempt, "EndAttempt", Phase.ATTEMPT_END, detail={"applied": 1})]  # fmt: skip


def exported(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_prune_exports_what_it_removes_and_the_rest_verifies_with_it_as_one_chain(
    ledger: Ledger,
) -> None:
    ledger.append(*finished_run("old-1"), *finished_run("old-2"))
    cut = datetime.now(UTC)
    ledger.append(*finished_run("new-1"))
    before = ledger.cli("export").stdout.splitlines()
    assert len(before) == 12

    pruned = ledger.prune("old.jsonl", before=cut.isoformat())
    assert pruned.returncode == 0, pruned.stderr
    assert "pruned events #1 to #8 (8 events)" in pruned.stdout
    # The export is what `audit export` wrote for those events, line for line.
    assert (ledger.folder / "old.jsonl").read_text().splitlines() == before[:8]
    assert ledger.seqs() == [9, 10, 11, 12]
    assert ledger.cli("export").stdout.splitlines() == before[8:]

    alone = ledger.cli("verify")
    assert alone.returncode == 0, alone.stdout
    assert "ledger intact: 4 events" in alone.stdout
    assert "after event #8" in alone.stdout
    together = ledger.cli("verify", "--with-export", str(ledger.folder / "old.jsonl"))
    assert together.returncode == 0, together.stdout
    assert "ledger intact: 12 events" in together.stdout
    assert "8 in the exports, 4 in the ledger, from event #1" in together.stdout
    # The checkpoint is the last removed event's number and hash.
    assert ledger.sql("SELECT seq, hash FROM audit_checkpoints") == [
        (8, exported(ledger.folder / "old.jsonl")[-1]["hash"])
    ]


def test_prunes_one_after_another_chain_their_exports(ledger: Ledger) -> None:
    for n in range(3):
        ledger.append(*finished_run(f"run-{n}"))
        assert ledger.prune(f"e{n}.jsonl").returncode == 0
    ledger.append(*finished_run("run-3"))
    assert ledger.verdict().intact
    assert ledger.verdict().after == 12
    every = ledger.verdict("e2.jsonl", "e0.jsonl", "e1.jsonl")  # in any order
    assert every.intact and every.checked == 16 and every.exported == 12
    # Without the middle export, the chain has a hole where it was.
    missing = ledger.verdict("e0.jsonl", "e2.jsonl")
    assert not missing.intact and missing.first_bad == 5
    # Without the newest, the exports end before the ledger's chain begins.
    short = ledger.cli("verify", "--with-export", str(ledger.folder / "e0.jsonl"),
                       "--with-export", str(ledger.folder / "e1.jsonl"))  # fmt: skip
    assert short.returncode == 1
    assert "exports end at event 8 but the ledger's chain begins after event 12" in short.stdout


def test_prune_keeps_a_pending_step_and_its_run_and_says_why(ledger: Ledger) -> None:
    ledger.append(
        *finished_run("done-1"),
        begin("charge", "c1"),
        step_in_doubt("charge", "c1", "stp_pay"),  # the pod died in the payment
        *finished_run("done-2"),
    )
    pruned = ledger.prune("e.jsonl")
    assert pruned.returncode == 3, pruned.stderr  # as `audit pending`: a person must look
    assert "pruned events #1 to #4 (4 events)" in pruned.stdout
    assert "#5: run charge has step_in_doubt stp_pay pending" in pruned.stdout
    # The step, its run, and everything after it are still in the ledger.
    assert ledger.seqs() == list(range(5, 11))
    pending = ledger.cli("pending", "--json")
    assert pending.returncode == 3
    assert json.loads(pending.stdout)["id"] == "stp_pay"
    assert ledger.verdict("e.jsonl").intact

    # Pending from the first event: nothing can be pruned, and nothing is.
    again = ledger.prune("e2.jsonl")
    assert again.returncode == 3
    assert "nothing to prune" in again.stdout
    assert (ledger.folder / "e2.jsonl").read_text() == ""
    assert ledger.seqs() == list(range(5, 11))

    # Decided, it is no longer pending: the next prune takes it.
    resolved = ledger.cli("resolve", "stp_pay", "--did-not-run", "--by", "dana",
                          "--reason", "no charge at the PSP")  # fmt: skip
    assert resolved.returncode == 0, resolved.stderr
    done = ledger.prune("e3.jsonl")
    assert done.returncode == 0, done.stdout
    assert ledger.seqs() == []
    assert ledger.verdict().intact
    assert ledger.verdict("e.jsonl", "e2.jsonl", "e3.jsonl").checked == 11


def test_a_write_without_an_outcome_is_kept_too(ledger: Ledger) -> None:
    ledger.append(begin("lost", "l1"), *write("lost", "l1", "art_lost", landed=False),
                  *finished_run("done"))  # fmt: skip
    pruned = ledger.prune("e.jsonl")
    assert pruned.returncode == 3
    assert "write_without_outcome art_lost" in pruned.stdout
    assert ledger.seqs() == list(range(1, 7))


def test_a_run_that_goes_on_past_the_cut_is_kept_whole(ledger: Ledger) -> None:
    ledger.append(*finished_run("done"), begin("long", "g1"), *write("long", "g1", "art_1"))
    cut = datetime.now(UTC)
    # A later attempt of the same run: its first attempt (the run's id scheme) stays.
    ledger.append(begin("long", "g2"), *write("long", "g2", "art_2"))
    pruned = ledger.prune("e.jsonl", before=cut.isoformat())
    assert pruned.returncode == 0
    assert "#5: run long has events after the cut" in pruned.stdout
    assert ledger.seqs() == list(range(5, 11))
    assert ledger.verdict("e.jsonl").intact


def test_verify_catches_an_edit_in_what_is_left_after_pruning(ledger: Ledger) -> None:
    ledger.append(*finished_run("old"), *finished_run("new"))
    assert ledger.prune("e.jsonl", before=_between(ledger, 4)).returncode == 0
    assert ledger.verdict("e.jsonl").intact

    ledger.sql("UPDATE audit_events SET derived_id = 'art_forged' WHERE seq = 6")
    broken = ledger.cli("verify")
    assert broken.returncode == 1
    assert "first bad event #6" in broken.stdout and "edited" in broken.stdout
    with_export = ledger.cli("verify", "--with-export", str(ledger.folder / "e.jsonl"))
    assert with_export.returncode == 1 and "first bad event #6" in with_export.stdout


def _between(ledger: Ledger, seq: int) -> str:
    """A --before that falls after event ``seq`` and at or before the next one."""
    (ts,) = ledger.sql("SELECT ts FROM audit_events WHERE seq = ?", (seq + 1,))[0]
    return str(ts)


def test_verify_catches_a_deleted_first_event_and_an_edited_export(ledger: Ledger) -> None:
    ledger.append(*finished_run("old"), *finished_run("new"))
    assert ledger.prune("e.jsonl", before=_between(ledger, 4)).returncode == 0
    # Someone removes the oldest event left, as a prune would, but without the checkpoint.
    ledger.sql("DELETE FROM audit_events WHERE seq = 5")
    gone = ledger.verdict()
    assert not gone.intact and gone.first_bad == 5 and "missing" in gone.problem
    ledger.sql("DELETE FROM audit_events")
    # An export edited after the prune does not verify with the ledger.
    lines = (ledger.folder / "e.jsonl").read_text().splitlines()
    forged = json.loads(lines[2])
    forged["derived_id"] = "art_forged"
    lines[2] = json.dumps(forged, sort_keys=True, separators=(",", ":"))
    (ledger.folder / "forged.jsonl").write_text("\n".join(lines) + "\n")
    verdict = ledger.verdict("forged.jsonl")
    assert not verdict.intact and verdict.first_bad == 3 and "edited" in verdict.problem


def test_prune_never_writes_over_an_export_and_refuses_a_ledger_that_is_not_intact(
    ledger: Ledger,
) -> None:
    ledger.append(*finished_run("a"), *finished_run("b"))
    (ledger.folder / "kept.jsonl").write_text("earlier\n")
    taken = ledger.prune("kept.jsonl")
    assert taken.returncode == 1 and "exists" in taken.stderr
    assert (ledger.folder / "kept.jsonl").read_text() == "earlier\n"
    ledger.sql("UPDATE audit_events SET rule = 'forged' WHERE seq = 2")
    refused = ledger.prune("e.jsonl")
    assert refused.returncode == 1
    assert "not intact at event #2" in refused.stderr
    assert ledger.seqs() == list(range(1, 9))
    assert not (ledger.folder / "e.jsonl").exists()  # nothing removed, no export left behind


def test_a_ledger_from_before_pruning_gains_its_checkpoints_table(ledger: Ledger) -> None:
    ledger.append(*finished_run("a"))
    ledger.sql("DROP TABLE audit_checkpoints")
    ledger.sql("DROP TABLE audit_schema")  # nor did it record schema versions
    assert ledger.verdict().intact  # read as never pruned
    assert ledger.prune("e.jsonl").returncode == 0
    assert ledger.verdict("e.jsonl").checked == 4


def test_prune_while_a_sidecar_writes_loses_nothing(ledger: Ledger) -> None:
    """A live sidecar writes runs while prunes run one after another: every write is
    answered, and the exports and the ledger verify as one chain holding every event."""
    config = sidecar_config(ledger.folder / "data", audit_db=ledger.db, audit_dsn=ledger.dsn)
    sidecar = start_sidecar(config)
    stop = threading.Event()
    written: list[int] = []
    ended = threading.Semaphore(0)  # released as each run ends
    failures: list[BaseException] = []

    def agent() -> None:
        try:
            n = 0
            while not stop.is_set() or n < 10:
                attempt = sidecar.begin(run_id=f"run-{n}")
                thread = sidecar.stub.CreateThread(
                    pb.CreateThreadRequest(attempt_id=attempt, title="T")
                )
                for i in range(3):
                    sidecar.stub.Notice(pb.NoticeRequest(attempt_id=attempt,
                                                         thread_id=thread.thread_id,
                                                         text=f"note {i}"))  # fmt: skip
                sidecar.stub.EndAttempt(pb.EndAttemptRequest(attempt_id=attempt))
                ended.release()
                n += 1
            written.append(n)
        except BaseException as exc:  # the assertion below names it
            failures.append(exc)

    worker = threading.Thread(target=agent)
    worker.start()
    try:
        exports = []
        for k in range(4):
            # Each prune finds a run that ended since the one before, however slowly the
            # sidecar runs: four prunes ahead of the first run's end would export nothing.
            assert ended.acquire(timeout=60), "no run ended within 60 s"
            name = f"e{k}.jsonl"
            pruned = ledger.prune(name)
            # 3: a write in flight at the cut (its intent written, its outcome not yet) is
            # pending as far as the ledger can tell, and is kept with its run.
            assert pruned.returncode in (0, 3), pruned.stdout + pruned.stderr
            exports.append(name)
    finally:
        stop.set()
        worker.join(timeout=120)
        sidecar.stop()
    assert not failures, failures
    verdict = ledger.verdict(*exports)
    assert verdict.intact, verdict.problem
    # Every run: begin, intent and outcome for the thread and each notice, end.
    assert verdict.checked == written[0] * 10
    assert sum(len(exported(ledger.folder / e)) for e in exports) == verdict.exported
    assert verdict.exported > 0


def test_before_takes_a_time_or_an_age() -> None:
    now = datetime(2026, 10, 2, 12, 0, tzinfo=UTC)
    assert parse_before("90d", now) == now - timedelta(days=90)
    assert parse_before("12h", now) == now - timedelta(hours=12)
    assert parse_before("2026-09-01", now) == datetime(2026, 9, 1, tzinfo=UTC)
    assert parse_before("2026-09-01T02:00:00+02:00", now) == datetime(2026, 9, 1, tzinfo=UTC)
    for bad in ("yesterday", "90", "2027-01-01"):
        with pytest.raises(ValueError):
            parse_before(bad, now)
    # Events record UTC with microseconds: the cut compares as time, as text.
    assert event_time(datetime(2026, 9, 1, 2, tzinfo=UTC)) == "2026-09-01T02:00:00.000000+00:00"


def test_a_checkpoint_recorded_without_a_prune_is_caught(ledger: Ledger) -> None:
    """One row in audit_checkpoints must not let the events before it be edited unseen."""
    ledger.append(begin("pay", "p1"), step_in_doubt("pay", "p1", "stp_charge"),
                  *finished_run("later"))  # fmt: skip
    (h2,) = ledger.sql("SELECT hash FROM audit_events WHERE seq = 2")[0]
    ledger.sql("INSERT INTO audit_checkpoints (seq, hash, pruned_at, cut_before, events) "
               "VALUES (2, ?, '2026-01-01', '2026-01-01', 2)", (h2,))  # fmt: skip
    forged = ledger.verdict()
    assert not forged.intact and forged.first_bad == 1, forged
    assert "not recorded by a prune" in forged.problem
    # With the step's event edited too, it is still caught, never "intact".
    ledger.sql("UPDATE audit_events SET derived_id = 'stp_forged' WHERE seq = 2")
    assert ledger.cli("verify").returncode == 1
    # A row that claims less than it covers does not follow the (absent) prune before it.
    ledger.sql("UPDATE audit_checkpoints SET events = 1")
    assert not ledger.verdict().intact


def test_a_checkpoint_naming_another_hash_than_the_pruned_event_is_caught(
    ledger: Ledger,
) -> None:
    ledger.append(*finished_run("old"), *finished_run("new"))
    assert ledger.prune("e.jsonl", before=_between(ledger, 4)).returncode == 0
    ledger.sql("UPDATE audit_checkpoints SET hash = ?", ("f" * 64,))
    broken = ledger.verdict()
    assert not broken.intact and broken.first_bad == 5, broken
    assert not ledger.verdict("e.jsonl").intact


def test_an_empty_export_verifies_as_what_it_is(ledger: Ledger) -> None:
    ledger.append(*finished_run("fresh"))
    # A new deployment's nightly prune: nothing is old enough yet.
    nothing = ledger.prune("night-1.jsonl", before="1h")
    assert nothing.returncode == 0 and "nothing to prune" in nothing.stdout
    assert (ledger.folder / "night-1.jsonl").read_text() == ""
    alone = ledger.cli("verify", "--with-export", str(ledger.folder / "night-1.jsonl"))
    assert alone.returncode == 0, alone.stdout
    assert "ledger intact: 4 events" in alone.stdout and "hold no event" in alone.stdout
    # Beside exports that hold events, it changes nothing; a pruned ledger still needs those.
    assert ledger.prune("night-2.jsonl").returncode == 0
    assert ledger.verdict("night-1.jsonl", "night-2.jsonl").intact
    assert ledger.verdict("night-1.jsonl").intact  # the ledger alone, from its checkpoint
    assert not ledger.verdict("night-2.jsonl", "night-1.jsonl").exports_empty


def test_a_prune_cut_short_leaves_a_ledger_that_verifies_whole(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prune deletes in batches, each a transaction of its own, on either database: the
    first with the checkpoint, the others after it."""
    from sidecar.ledger import retention

    ledger.append(*finished_run("a"), *finished_run("b"), *finished_run("c"))
    monkeypatch.setattr(retention, "DELETE_BATCH", 3)
    # The process dies after the checkpoint's transaction, before the other batches.
    monkeypatch.setattr(retention.Retention, "_delete_up_to", lambda self, cut, chain=None: None)
    assert ledger.prune("e.jsonl", before=_between(ledger, 8)).returncode == 0
    assert ledger.seqs() == list(range(4, 13))
    short = ledger.verdict()
    assert short.intact and short.leftover == 5 and short.checked == 9, short
    assert ledger.verdict("e.jsonl").intact
    # What the prune had not deleted yet is verified like the rest (a BeginStep reads it).
    ledger.sql("UPDATE audit_events SET derived_id = 'art_forged' WHERE seq = 6")
    assert not ledger.verdict().intact and ledger.verdict().first_bad == 6
    ledger.sql("UPDATE audit_events SET derived_id = 'art_b' WHERE seq = 6")
    assert ledger.verdict().intact
    monkeypatch.undo()
    # The next prune deletes the rest first.
    assert ledger.prune("e2.jsonl", before=_between(ledger, 8)).returncode == 0
    assert ledger.seqs() == list(range(9, 13))
    assert ledger.verdict("e.jsonl", "e2.jsonl").intact


def test_show_of_a_run_the_ledger_does_not_hold_exits_non_zero(ledger: Ledger) -> None:
    ledger.append(*finished_run("known"))
    shown = ledger.cli("show", "known")
    assert shown.returncode == 0 and "attempt known-a1 began" in shown.stdout
    missing = ledger.cli("show", "no-such-run")
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.splitlines() == [
        "actonce: error: the ledger holds no event of run 'no-such-run'"
    ]
