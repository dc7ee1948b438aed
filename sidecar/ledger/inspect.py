"""What an operator asks of a ledger: verify its chain, list runs, show a run, export.

These read through a LedgerReader and write text to a stream, so that
``actonce audit`` is a thin shell around them and tests call them directly.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Protocol, TextIO

from sidecar.ledger.base import (
    GENESIS_HASH,
    AuditEvent,
    Checkpoint,
    LedgerReader,
    Phase,
    StoredEvent,
    event_hash,
)

_EVENT_FIELDS = tuple(f.name for f in fields(AuditEvent))

# How often long scans report progress, in events.
PROGRESS_EVERY = 5000

Progress = Callable[[int, int], None]
# Shown each event of the chain, in order, once it is known to fit: who made each decision
# is checked this way, in the one pass (sidecar.ledger.operator_keys).
Seen = Callable[[StoredEvent], None]


class SharedSnapshot(Protocol):
    """More readers that see exactly what one reader's snapshot sees, each on a connection of
    its own: what a walk of the chains by several workers at once needs (PostgreSQL)."""

    def share(self, reader: LedgerReader) -> str:
        """Inside ``reader.snapshot()``: an id other readers can adopt its snapshot by."""
        ...

    def reader(self, snapshot: str) -> AbstractContextManager[LedgerReader]:
        """A reader of its own, reading in the snapshot ``snapshot`` until the block ends."""
        ...


@dataclass(frozen=True)
class Verdict:
    """The result of walking a ledger's hash chain (and the exports before it)."""

    intact: bool
    checked: int
    first_bad: int | None = None
    problem: str = ""
    # The chain was walked from the event after this one: the ledger's checkpoint
    # (0 when it was never pruned), or what the first export follows.
    after: int = 0
    # How many of ``checked`` came from exports rather than the ledger.
    exported: int = 0
    # Events at or before the checkpoint still in the ledger (a prune's deletion cut
    # short, which the next prune finishes): walked and verified like the rest.
    leftover: int = 0
    # Exports were given, and none held an event (prunes that found nothing to remove).
    exports_empty: bool = False


def _broken(
    first_bad: int, problem: str, *, checked: int = 0, after: int = 0, exported: int = 0
) -> Verdict:
    """The verdict on a chain broken at ``first_bad``."""
    return Verdict(False, checked, first_bad, problem, after=after, exported=exported)


@dataclass
class _Chain:
    """A walk along one chain: the next sequence number and hash each event must link to
    (None: the first event's own link is taken, as the chain's start).

    In a ledger of one chain the numbers have no gaps: ``expected`` is the next event's.
    In a ledger of many (``gaps``) they come from one sequence shared by the chains: each
    event's number is above the one before it in its chain, and the links say the rest."""

    expected: int
    prev: str | None
    checked: int = 0
    # The checkpoints' hashes by number: an event walked at a checkpoint must have it.
    marks: dict[int, str] = field(default_factory=dict)
    seen: Seen | None = None
    chain: int = 0
    gaps: bool = False

    def take(self, stored: StoredEvent) -> tuple[int, str] | None:
        """The first bad event and why, if ``stored`` does not follow the chain so far."""
        if stored.seq != self.expected and not (self.gaps and stored.seq > self.expected):
            return self.expected, (
                f"event {self.expected} is missing: the next event is "
                f"{stored.seq} (deleted or renumbered)"
            )
        prev = stored.prev_hash if self.prev is None else self.prev
        if stored.prev_hash != prev:
            # With gaps, what is missing lies between the last event that fit and this one.
            return self.expected if self.gaps else stored.seq, (
                f"event {stored.seq} does not link to the event before it in chain "
                f"{self.chain} (an event was deleted, inserted or reordered)"
                if self.gaps
                else "it does not link to the event before it (an event was "
                "deleted, inserted or reordered)"
            )
        if stored.chain != self.chain:
            return stored.seq, (
                f"it says it is of chain {stored.chain}, but was walked in chain {self.chain}"
            )
        if event_hash(stored.seq, stored.ts, stored.event, prev, stored.chain) != stored.hash:
            return stored.seq, "its content does not match its hash (the event was edited)"
        if self.marks.get(stored.seq, stored.hash) != stored.hash:
            return stored.seq, (
                f"the checkpoint after event #{stored.seq} names another hash "
                "than the event's: it was not recorded by a prune"
            )
        self.prev = stored.hash
        self.expected = stored.seq + 1
        self.checked += 1
        if self.seen is not None:
            self.seen(stored)
        return None


def verify(
    reader: LedgerReader,
    progress: Progress | None = None,
    exports: Sequence[Path] = (),
    *,
    decisions: Seen | None = None,
    jobs: int = 1,
    shared: SharedSnapshot | None = None,
) -> Verdict:
    """Walk the chain: every event the ledger holds, and the exports before it; name the
    first event that does not fit.

    An edited event no longer matches its own hash; a deleted, inserted or
    reordered one breaks the numbering or its successor's link; events deleted
    from the end leave the chain shorter than its recorded head. The chain and
    the head are read in one snapshot: a batch committed between two reads would
    otherwise look like events deleted from the end of a live ledger.

    A pruned ledger's chain begins after its checkpoint, the last event the newest
    prune removed. A checkpoint is trusted only for what is gone: each must follow
    the one before it, no event it says was removed first may still be there, and
    an event still there at a checkpoint (a prune's deletion cut short) is walked
    and must have the checkpoint's hash. So a checkpoint recorded without a prune
    is caught, and none can hide an event the ledger still holds. With
    ``exports`` (what ``audit prune`` wrote, in any order), the walk goes through
    them first, and the ledger must go on exactly where they end: the exports and
    the ledger verify as one chain. Exports that hold no event (prunes that found
    nothing to remove) vouch for nothing and are checked as such.

    ``decisions`` is shown every event walked, in order, once it fits the chain (in a walk
    by several workers, the decisions among them, after the walk, in the same order).

    A ledger of many chains (sidecar.ledger.sql.chain_of) is walked chain by chain, each against
    its own head and checkpoints, all in the one snapshot; the first chain that does not
    fit is named. With ``jobs`` above 1 and ``shared``, ``jobs`` workers walk the chains at
    once, each reader in the snapshot of ``reader`` (see _walk_in_parallel); the verdict is
    the one the walk of one worker gives.
    """
    with reader.snapshot():
        heads = reader.heads()
        marks = reader.checkpoints()
        if len(heads) <= 1:
            view = _ChainView(reader, 0, heads.get(0, (0, GENESIS_HASH)), gaps=False)
            return _verify_chain(view, marks, progress, exports, exports, decisions)
        exported = [path for path in exports if next(_read_export(path), None) is not None]
        walk = _ChainWalk(heads, marks, exports, exported)
        if jobs > 1 and shared is not None:
            verdicts = _walk_in_parallel(reader, walk, shared, jobs, progress, decisions)
        else:
            verdicts = {}
            for chain in sorted(heads):
                verdicts[chain] = walk.verify(reader, chain, progress, decisions)
                if not verdicts[chain].intact:
                    break
        return walk.verdict(verdicts)


@dataclass(frozen=True)
class _ChainWalk:
    """The walk of a ledger of many chains: what every chain's walk needs, read once in the
    snapshot, and the one verdict its chains' verdicts make."""

    heads: dict[int, tuple[int, str]]
    marks: Sequence[Checkpoint]
    exports: Sequence[Path]
    exported: Sequence[Path]

    def verify(
        self, reader: LedgerReader, chain: int, progress: Progress | None, seen: Seen | None
    ) -> Verdict:
        view = _ChainView(reader, chain, self.heads[chain], gaps=True)
        of_chain = [mark for mark in self.marks if mark.chain == chain]
        return _verify_chain(view, of_chain, progress, self.exports, self.exported, seen)

    def verdict(self, verdicts: dict[int, Verdict]) -> Verdict:
        """The first chain that does not fit, in chain order, named; or every chain intact."""
        for chain in sorted(verdicts):
            verdict = verdicts[chain]
            if not verdict.intact:
                return replace(verdict, problem=f"in chain {chain}: {verdict.problem}")
        return Verdict(
            True,
            sum(v.checked for v in verdicts.values()),
            after=min(v.after for v in verdicts.values()),
            exported=sum(v.exported for v in verdicts.values()),
            leftover=sum(v.leftover for v in verdicts.values()),
            exports_empty=bool(self.exports) and not self.exported,
        )


def _walk_in_parallel(
    reader: LedgerReader,
    walk: _ChainWalk,
    shared: SharedSnapshot,
    jobs: int,
    progress: Progress | None,
    decisions: Seen | None,
) -> dict[int, Verdict]:
    """The chains' verdicts, walked by ``jobs`` workers at once, each on its own reader.

    Every worker must see the ledger as ``reader``'s snapshot does: a chain read in a later
    snapshot than its head and checkpoints would look cut or forged while sidecars append,
    and the chains would not be the one ledger of one moment the serial walk verifies. So
    ``reader`` shares its snapshot (on PostgreSQL, ``pg_export_snapshot()`` in its
    REPEATABLE READ transaction) and each other worker's reader adopts it (``SET
    TRANSACTION SNAPSHOT``) before it reads anything; ``reader`` is a worker too.

    Workers take the chains in order, and none starts a chain after one found broken: every
    chain before the first broken one is walked, so the first broken chain is the one the
    serial walk names, with the same event and reason. The decisions are kept per chain
    and shown after the walk, chain after chain, as the serial walk shows them."""
    snapshot = shared.share(reader)
    order = iter(sorted(walk.heads))
    verdicts: dict[int, Verdict] = {}
    seen: dict[int, list[StoredEvent]] = {}
    failed: list[BaseException] = []
    lock = threading.Lock()
    tally = _Tally(progress, reader.count() if progress is not None else 0)
    broken: list[int] = []

    def next_chain() -> int | None:
        with lock:
            if failed:
                return None
            chain = next(order, None)
            return None if chain is None or (broken and chain > broken[0]) else chain

    def work(of: LedgerReader) -> None:
        while (chain := next_chain()) is not None:
            kept: list[StoredEvent] = []  # the chain's decisions alone: memory stays small
            keep = _decisions_into(kept) if decisions is not None else None
            verdict = walk.verify(of, chain, tally.of(chain), keep)
            with lock:
                verdicts[chain] = verdict
                seen[chain] = kept
                if not verdict.intact and (not broken or chain < broken[0]):
                    broken[:] = [chain]

    def worker() -> None:
        try:
            with shared.reader(snapshot) as of:
                work(of)
        except BaseException as exc:  # a worker's failure is the walk's
            with lock:
                failed.append(exc)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(jobs - 1)]
    for thread in threads:
        thread.start()
    try:
        work(reader)
    except BaseException as exc:
        with lock:
            failed.append(exc)
    for thread in threads:
        thread.join()
    if failed:
        raise failed[0]
    tally.done()
    if decisions is not None:
        for chain in sorted(verdicts):
            for stored in seen[chain]:
                decisions(stored)
    return verdicts


def _decisions_into(kept: list[StoredEvent]) -> Seen:
    """Shown the events of a chain: keeps its decisions in ``kept``."""

    def keep(stored: StoredEvent) -> None:
        if stored.event.phase == Phase.DECISION:
            kept.append(stored)

    return keep


class _Tally:
    """The progress of chains walked at once, as one count over the ledger."""

    def __init__(self, progress: Progress | None, total: int) -> None:
        self._progress = progress
        self._total = total
        self._by_chain: dict[int, int] = {}
        self._lock = threading.Lock()

    def of(self, chain: int) -> Progress | None:
        if self._progress is None:
            return None

        def report(checked: int, _total: int) -> None:
            with self._lock:
                self._by_chain[chain] = checked
                done = sum(self._by_chain.values())
                if self._progress is not None and done < self._total:
                    self._progress(done, self._total)  # the last report ends the line

        return report

    def done(self) -> None:
        if self._progress is not None:
            done = sum(self._by_chain.values())
            self._progress(done, done)


@dataclass(frozen=True)
class _ChainView:
    """One chain of a ledger, as a walk reads it: its events, its oldest, its head."""

    reader: LedgerReader
    chain: int
    head: tuple[int, str]
    gaps: bool  # a ledger of many chains: the numbers along a chain have gaps

    def events(self, after: int) -> Iterator[StoredEvent]:
        if not self.gaps:  # a ledger of one chain (maybe one no sidecar has migrated yet)
            return self.reader.events(after=after)
        return self.reader.events(after=after, chain=self.chain)

    def first_seq(self) -> int | None:
        return self.reader.first_seq(None if not self.gaps else self.chain)

    def walk(
        self, expected: int, prev: str | None, marks: dict[int, str], seen: Seen | None
    ) -> _Chain:
        return _Chain(expected, prev, marks=marks, seen=seen, chain=self.chain, gaps=self.gaps)


def _verify_chain(
    view: _ChainView,
    marks: Sequence[Checkpoint],
    progress: Progress | None,
    exports: Sequence[Path],
    exported: Sequence[Path],
    decisions: Seen | None,
) -> Verdict:
    """Walk one chain from its checkpoint (through ``exported``, the exports that hold any
    event, first): the verdict on it."""
    low = view.first_seq()
    forged = _forged_checkpoint(marks, low, view)
    if forged is not None:
        return forged
    after, prev = (marks[-1].seq, marks[-1].hash) if marks else (0, GENESIS_HASH)
    by_seq = {mark.seq: mark.hash for mark in marks}
    walked = _walk_exports(exported, by_seq, decisions, view) if exported else None
    if isinstance(walked, Verdict):
        return walked
    if walked is None:
        return _walk_ledger(view, after, prev, by_seq, progress, bool(exports), seen=decisions)
    chain, first = walked
    if (chain.expected - 1 if not view.gaps else after, chain.prev) != (after, prev):
        where = f"after event {after}" if after else "at the first event (never pruned)"
        return _broken(
            chain.expected,
            f"the exports end at event {chain.expected - 1} but the ledger's "
            f"chain begins {where}: an export is missing, or is not of this "
            "ledger",
            checked=chain.checked,
            after=first,
        )
    return _walk_ledger(
        view,
        after,
        prev,
        by_seq,
        progress,
        False,
        exported=chain.checked,
        first=first,
        seen=decisions,
    )


def _forged_checkpoint(
    marks: Sequence[Checkpoint], low: int | None, view: _ChainView
) -> Verdict | None:
    """The verdict on a checkpoint no prune can have recorded: one that does not follow
    the one before it, or the newest while the first event it says was removed is still
    there (a prune deletes that one in the transaction that records it)."""
    before = 0
    for mark in marks:
        if mark.after != before:
            return _broken(
                mark.after + 1,
                f"the checkpoint after event #{mark.seq} says a prune removed events "
                f"#{mark.after + 1} to #{mark.seq}, but the prune before it removed "
                f"up to #{before}: it was not recorded by a prune",
            )
        before = mark.seq
    newest = marks[-1] if marks else None
    if view.gaps and newest is not None and newest.events and low is not None:
        # The first event after the checkpoint before it is the first the prune removed:
        # the one that links to that checkpoint's hash (or the genesis).
        linked = marks[-2].hash if len(marks) > 1 else GENESIS_HASH
        first = next(view.events(newest.after), None)
        if first is None or first.seq > newest.seq or first.prev_hash != linked:
            return None
        return _broken(
            first.seq,
            f"the checkpoint after event #{newest.seq} says a prune removed the events of "
            f"chain {view.chain} after #{newest.after} to #{newest.seq}, but event "
            f"#{first.seq}, the first of them, is still in the ledger: it was not recorded "
            "by a prune",
        )
    if newest is not None and newest.events and low is not None and low <= newest.after + 1:
        return _broken(
            low,
            f"the checkpoint after event #{newest.seq} says a prune removed events "
            f"#{newest.after + 1} to #{newest.seq}, but event #{low} is still in the "
            "ledger: it was not recorded by a prune (or an earlier release's prune "
            "was cut short before it deleted anything: prune again)",
        )
    return None


def _walk_ledger(
    view: _ChainView,
    after: int,
    prev: str,
    marks: dict[int, str],
    progress: Progress | None,
    exports_empty: bool,
    *,
    exported: int = 0,
    first: int | None = None,
    seen: Seen | None = None,
) -> Verdict:
    """Walk every event the ledger holds: from the checkpoint, or from the oldest event
    left at or before it, which links to an event a prune removed."""
    low = view.first_seq()
    leftover = after - low + 1 if low is not None and low <= after else 0
    chain = view.walk(low, None, marks, seen) if low is not None and leftover else None
    chain = chain or view.walk(after + 1, prev, marks, seen)
    begin = after if first is None else first
    # What the head says is there, for the progress: counting the rows would read them all
    # a second time.
    total = view.head[0] - chain.expected + 1

    def verdict(intact: bool, first_bad: int | None = None, problem: str = "") -> Verdict:
        # Events before the checkpoint that the exports hold too are counted once.
        checked = chain.checked - (leftover if exported else 0) + exported
        return Verdict(
            intact, max(0, checked), first_bad, problem, begin, exported, leftover, exports_empty
        )

    for stored in view.events(chain.expected - 1):
        bad = chain.take(stored)
        if bad is not None:
            return verdict(False, *bad)
        if progress is not None and chain.checked % PROGRESS_EVERY == 0:
            progress(chain.checked, total)
    head_seq, head_hash = view.head
    last = chain.expected - 1
    ends = (last, chain.prev) if last > after else (after, prev)
    if (head_seq, head_hash) != ends:
        return verdict(
            False,
            chain.expected,
            f"the chain ends at event {ends[0]} but the ledger's head records "
            f"event {head_seq} (events were deleted from the end)",
        )
    if progress is not None:
        progress(chain.checked, total)
    return verdict(True)


def _walk_exports(
    exports: Sequence[Path], marks: dict[int, str], seen: Seen | None, view: _ChainView
) -> tuple[_Chain, int] | Verdict | None:
    """Walk the exports (their events of the view's chain) in the order of their first
    events: the chain they make and the event it follows, the verdict naming the first
    event that does not fit, or None when none holds an event of it."""
    starts: list[tuple[int, Path]] = []
    for path in exports:
        first = next(_read_export(path, view), None)
        if first is not None:  # a prune that removed nothing exported nothing
            starts.append((first.seq, path))
    if not starts:
        return None
    starts.sort()
    begin = next(_read_export(starts[0][1], view))
    after = begin.seq - 1
    # An export from the first event links to the genesis hash; a later one to its
    # predecessor's hash, which only an earlier export (or trust) vouches for.
    start = GENESIS_HASH if begin.seq == 1 else begin.prev_hash
    chain = view.walk(begin.seq, start, marks, seen)
    for _start, path in starts:
        try:
            for stored in _read_export(path, view):
                bad = chain.take(stored)
                if bad is not None:
                    problem = f"in the export {path}: {bad[1]}"
                    return _broken(
                        bad[0], problem, checked=chain.checked, after=after, exported=chain.checked
                    )
        except ValueError as exc:
            problem = f"the export {path} is not what `audit export` writes: {exc}"
            checked = chain.checked
            return _broken(chain.expected, problem, checked=checked, after=after, exported=checked)
    return chain, after


def list_runs(reader: LedgerReader, out: TextIO) -> int:
    runs = reader.runs()
    out.write(f"{'run':<36} {'rule':<20} {'attempts':>8} {'events':>7}  last event\n")
    for run in runs:
        out.write(
            f"{run.run_id:<36} {run.rule:<20} {run.attempts:>8} {run.events:>7}  {run.last_ts}\n"
        )
    return len(runs)


def show_run(reader: LedgerReader, run_id: str, out: TextIO) -> int:
    """A readable timeline of one run: attempts, writes, outcomes, refusals; how many
    events it shows (0, and nothing written, for a run the ledger does not hold).

    A run whose attempts have scopes (a tool call's attempts, say) is shown as
    one timeline per scope, the unscoped attempts first, then each scope in
    the order it began.
    """
    by_scope: dict[str, list[StoredEvent]] = {"": []}
    for stored in reader.events(run_id=run_id):
        by_scope.setdefault(stored.event.scope, []).append(stored)
    shown = sum(len(events) for events in by_scope.values())
    scoped = len(by_scope) > 1
    for scope, events in by_scope.items():
        if scoped and events:
            out.write(f"scope {scope!r}\n" if scope else "unscoped\n")
        for stored in events:
            out.write(_timeline_line(stored) + _trace_of(stored) + "\n")
    return shown


def _trace_of(stored: StoredEvent) -> str:
    """The trace and span of the call that wrote the event, when the sidecar traced it."""
    e = stored.event
    return f"  [trace {e.trace_id} span {e.span_id}]" if e.trace_id else ""


def _timeline_line(stored: StoredEvent) -> str:
    e = stored.event
    time = stored.ts[11:23]
    head = f"#{stored.seq:<6} {time}"
    if e.phase == Phase.ATTEMPT_BEGIN:
        scope = f", scope {e.scope!r}" if e.scope else ""
        scheme = f", id scheme {e.detail['id_scheme']}" if "id_scheme" in e.detail else ""
        return (
            f"{head} attempt {e.attempt_id} began (rule {e.rule}, checkpoint "
            f"{e.checkpoint!r}{scope}{scheme})"
        )
    if e.phase == Phase.ATTEMPT_END and "forgotten" in e.detail:
        return (
            f"{head} attempt {e.attempt_id} forgotten by its sidecar "
            f"({e.detail['forgotten']}): its later calls get UNKNOWN_ATTEMPT"
        )
    if e.phase == Phase.LEASE:
        return f"{head} attempt {e.attempt_id}'s lease extended to {e.detail.get('lease_deadline')}"
    if e.phase == Phase.ATTEMPT_END:
        d = e.detail
        return (
            f"{head} attempt {e.attempt_id} ended: applied {d.get('applied', 0)}, "
            f"already applied {d.get('already_applied', 0)}, skipped {d.get('skipped', 0)}, "
            f"failed {d.get('failed', 0)}"
        )
    if e.phase == Phase.DECISION:
        d = e.detail
        # Who the ledger authenticated, and the name they typed beside it.
        noted = f", noted as {d['by_note']}" if d.get("by_note") else ""
        return (
            f"{head}   decision on {e.derived_id}: {d.get('decision')} by {d.get('by')}{noted} "
            f"({d.get('reason')})"
        )
    what = f"{e.rpc:<12} {e.derived_id or '-'}"
    if e.occurrence >= 0:
        what += f" (occurrence {e.occurrence})"
    if e.phase in (Phase.INTENT, Phase.STEP_BEGIN):
        return f"{head}   {what}: {'began' if e.phase == Phase.STEP_BEGIN else 'intent'}"
    if e.phase == Phase.STEP_END:
        return f"{head}   {what}: step ended"
    if e.phase == Phase.STEP_ABORT:
        return f"{head}   {what}: step aborted ({e.detail.get('reason', '')!r})"
    if e.phase == Phase.STEP_FAILED:
        return (
            f"{head}   {what}: its call failed, the step did not end, it may have acted "
            f"({e.detail.get('error', '')!r})"
        )
    if e.phase == Phase.READ:
        result = f"refused {e.reason}/{e.failure_class}" if e.reason else "read"
        return f"{head}   {what}: {result}"
    if e.reason and e.detail.get("landed") == "unknown":
        return (
            f"{head}   {what}: the store was called and did not answer ({e.reason}): "
            "it may have landed, and a retry with the same id finds it"
        )
    if e.reason:
        return f"{head}   {what}: refused {e.reason} ({e.failure_class})"
    return f"{head}   {what}: {e.outcome.removeprefix('OUTCOME_')}"


def export_line(stored: StoredEvent) -> str:
    """One event as ``audit export`` writes it: a JSON line, chain fields included."""
    line = {
        "seq": stored.seq,
        "ts": stored.ts,
        **asdict(stored.event),
        "prev_hash": stored.prev_hash,
        "hash": stored.hash,
        # Chain 0 is not named, as no event was before a ledger had chains.
        **({"chain": stored.chain} if stored.chain else {}),
    }
    return json.dumps(line, sort_keys=True, separators=(",", ":")) + "\n"


def parse_export_line(line: str) -> StoredEvent:
    """An event back from its export line; ValueError if the line is not one."""
    try:
        fields_ = json.loads(line)
        event = AuditEvent(**{name: fields_[name] for name in _EVENT_FIELDS if name in fields_})
        return StoredEvent(
            int(fields_["seq"]),
            str(fields_["ts"]),
            event,
            str(fields_["prev_hash"]),
            str(fields_["hash"]),
            int(fields_.get("chain", 0)),
        )
    except (KeyError, TypeError, json.JSONDecodeError) as exc:
        raise ValueError(f"a line is not an event: {exc}") from exc


def _read_export(path: Path, view: _ChainView | None = None) -> Iterator[StoredEvent]:
    """The events of an export (of the view's chain, in a ledger of many)."""
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                stored = parse_export_line(line)
                if view is None or not view.gaps or stored.chain == view.chain:
                    yield stored


def export(reader: LedgerReader, out: TextIO, progress: Progress | None = None) -> int:
    """Every event the ledger holds as one JSON line, in sequence order: from its
    checkpoint on, for a pruned ledger (``audit prune`` exported the rest); in a ledger of
    many chains, each chain's events from its own checkpoint on."""
    written = 0
    cut = {mark.chain: mark.seq for mark in reader.checkpoints()}  # each chain's newest
    after = min((cut.get(chain, 0) for chain in reader.heads()), default=0)
    total = reader.head()[0] - after  # for the progress, without a pass to count the rows
    for stored in reader.events(after=after):
        if stored.seq <= cut.get(stored.chain, 0):
            continue  # left by a prune's deletion cut short: in its export already
        out.write(export_line(stored))
        written += 1
        if progress is not None and written % PROGRESS_EVERY == 0:
            progress(written, total)
    if progress is not None:
        progress(written, total)
    return written
