"""Group commit in the SQLite store: calls share transactions, never an unkept answer.

Threads start together at a barrier so that their calls meet in one transaction; what
must hold is what each caller was told: every write that answered is stored (also after
the file is reopened), nothing that failed is, and a refusal rolls back only its own call.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path

from sidecar.refstore.backend import NewMessage, StoredArtifact, StoredMessage
from sidecar.refstore.sqlite import SqliteStoreBackend
from sidecar.store_contract import ID_USED, RefusalCode, StoreRefusal

DATA = '{"n":1}'


def together(calls: list[Callable[[], object]]) -> list[object]:
    """Run every call in a thread of its own, all released at once; answers or exceptions."""
    barrier = threading.Barrier(len(calls))
    answers: list[object] = [None] * len(calls)

    def run(i: int) -> None:
        barrier.wait()
        try:
            answers[i] = calls[i]()
        except Exception as exc:
            answers[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return answers


def test_racing_creates_of_one_id_land_once(tmp_path: Path) -> None:
    store = SqliteStoreBackend(tmp_path / "store.db")
    for round_ in range(5):
        answers = together(
            [partial(store.create_artifact, f"id-{round_}", "k", DATA) for _ in range(12)]
        )
        landed = [a for a in answers if not isinstance(a, Exception)]
        refused = [a for a in answers if isinstance(a, StoreRefusal)]
        assert len(landed) == 1
        assert len(refused) == 11
        assert all(r.code is RefusalCode.INVALID_STATE and r.states == {ID_USED} for r in refused)
    store.close()
    reopened = SqliteStoreBackend(tmp_path / "store.db")
    assert len(reopened.list_artifacts("k").artifacts) == 5
    reopened.close()


def test_a_refusal_rolls_back_only_its_own_call(tmp_path: Path) -> None:
    store = SqliteStoreBackend(tmp_path / "store.db")
    store.create_artifact("used", "k", DATA)
    store.create_thread("t", "title")
    calls: list[Callable[[], object]] = []
    for i in range(16):
        calls.append(partial(store.create_artifact, f"new-{i}", "k", DATA))
        calls.append(lambda: store.create_artifact("used", "k", DATA))
        calls.append(partial(store.post_message, NewMessage(f"m-{i}", "t", "notice", "hi")))
        calls.append(
            partial(
                store.post_message,
                NewMessage(f"x-{i}", "no-such-thread", "notice", "hi"),
            )
        )
    answers = together(calls)
    for i in range(16):
        assert not isinstance(answers[4 * i], Exception)
        assert isinstance(answers[4 * i + 1], StoreRefusal)
        assert not isinstance(answers[4 * i + 2], Exception)
        refused = answers[4 * i + 3]
        assert isinstance(refused, StoreRefusal) and refused.code is RefusalCode.NOT_FOUND
    store.close()
    reopened = SqliteStoreBackend(tmp_path / "store.db")
    assert len(reopened.list_artifacts("k").artifacts) == 17
    # A thread's messages are numbered 1..n with no gap, whatever the order they committed in.
    assert sorted(m.seq for m in reopened.list_messages("t")) == list(range(1, 17))
    reopened.close()


def _poisoned(path: Path) -> SqliteStoreBackend:
    """A store with a thread "t" whose every request for a turn (a message posted with
    request_turn) ends the whole transaction it is in."""
    store = SqliteStoreBackend(path)
    store.create_thread("t", "title")
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TRIGGER poison BEFORE INSERT ON turn_requests"
            " BEGIN SELECT RAISE(ROLLBACK, 'poisoned'); END"
        )
    return store


def test_a_transaction_that_dies_fails_every_call_in_it(tmp_path: Path) -> None:
    """RAISE(ROLLBACK) ends the whole transaction, as a real fault of SQLite's would: the
    calls that shared it lose their changes too, so none of them may answer as landed."""
    store = _poisoned(tmp_path / "store.db")
    reported: dict[str, bool] = {}
    for round_ in range(10):
        ids = [f"a-{round_}-{i}" for i in range(8)]
        calls: list[Callable[[], object]] = [
            partial(store.create_artifact, a, "k", DATA) for a in ids
        ]
        calls.append(
            partial(
                store.post_message,
                NewMessage(f"m-{round_}", "t", "message", "hi", request_turn=True),
            )
        )
        answers = together(calls)
        assert isinstance(answers[-1], Exception)
        for artifact_id, answer in zip(ids, answers, strict=False):
            reported[artifact_id] = not isinstance(answer, Exception)
    store.close()
    reopened = SqliteStoreBackend(tmp_path / "store.db")
    stored = {a.id for a in reopened.list_artifacts("k", page_size=1000).artifacts}
    assert stored == {a for a, landed in reported.items() if landed}
    assert reopened.list_messages("t") == ()
    reopened.close()


def test_close_waits_for_the_open_transaction(tmp_path: Path) -> None:
    store = SqliteStoreBackend(tmp_path / "store.db")
    answers = together(
        [lambda i=i: store.create_artifact(f"id-{i}", "k", DATA) for i in range(8)] + [store.close]
    )
    landed = {f"id-{i}" for i in range(8) if not isinstance(answers[i], Exception)}
    reopened = SqliteStoreBackend(tmp_path / "store.db")
    assert {a.id for a in reopened.list_artifacts("k").artifacts} == landed
    reopened.close()


def test_a_batch_answers_each_call_in_order_after_one_commit(tmp_path: Path) -> None:
    store = SqliteStoreBackend(tmp_path / "store.db")
    store.create_thread("t", "title")
    answers = store.run_batch(
        [
            lambda: store.create_artifact("a", "k", DATA),
            lambda: store.create_artifact("a", "k", DATA),
            lambda: store.post_message(NewMessage("m", "t", "notice", "hi")),
            lambda: store.create_artifact("", "k", DATA),
            lambda: store.get_artifact("a"),
        ]
    )
    made, used, posted, invalid, read = answers
    assert isinstance(made, StoredArtifact) and made.version == 1
    assert isinstance(used, StoreRefusal) and used.states == {ID_USED}
    assert isinstance(posted, StoredMessage) and posted.seq == 1
    assert isinstance(invalid, StoreRefusal) and invalid.code is RefusalCode.VALIDATION_FAILED
    assert read == made
    store.close()
    reopened = SqliteStoreBackend(tmp_path / "store.db")
    assert reopened.get_artifact("a").version == 1
    assert [m.id for m in reopened.list_messages("t")] == ["m"]
    reopened.close()


def test_a_batch_whose_transaction_dies_answers_every_call_with_the_failure(
    tmp_path: Path,
) -> None:
    store = _poisoned(tmp_path / "store.db")
    answers = store.run_batch(
        [
            lambda: store.create_artifact("before", "k", DATA),
            lambda: store.post_message(NewMessage("m", "t", "message", "hi", request_turn=True)),
            lambda: store.create_artifact("after", "k", DATA),
        ]
    )
    before, poisoned, after = answers
    assert isinstance(before, Exception) and isinstance(poisoned, Exception)
    # The call after the failure ran in a transaction of its own, which committed.
    assert not isinstance(after, Exception)
    stored = {a.id for a in store.list_artifacts("k").artifacts}
    assert stored == {"after"}
    store.close()


def test_batches_and_callers_of_their_own_share_the_store(tmp_path: Path) -> None:
    store = SqliteStoreBackend(tmp_path / "store.db")
    batch_answers: list[object] = []
    calls: list[Callable[[], object]] = [
        partial(store.create_artifact, f"own-{i}", "k", DATA) for i in range(8)
    ]
    calls.append(
        lambda: batch_answers.extend(
            store.run_batch(
                [partial(store.create_artifact, f"batch-{i}", "k", DATA) for i in range(20)]
            )
        )
    )
    answers = together(calls)
    assert not any(isinstance(a, Exception) for a in answers)
    assert not any(isinstance(a, Exception) for a in batch_answers) and len(batch_answers) == 20
    store.close()
    reopened = SqliteStoreBackend(tmp_path / "store.db")
    assert len(reopened.list_artifacts("k").artifacts) == 28
    reopened.close()
