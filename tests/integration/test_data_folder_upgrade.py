"""A data folder made before the embedded store joined the ledger's file keeps working.

The release before kept the embedded store in a file of its own (store.db beside audit.db).
Its `actonce serve`, unpacked from that commit of this repository, makes a folder; this
tree's `actonce serve` then serves the same folder: the earlier writes are there and
repeat as already applied, new writes land, the folder keeps its two files, and
`actonce audit verify` passes on the whole chain. A folder made now has one file.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc
from actonce_api.v1 import types_pb2

from tests.harness import ServerProcess, free_port, sidecar_config, spawn_sidecar
from tests.helpers.env import scrubbed_env
from tests.helpers.health import NeverAnswered, wait_serving

ROOT = Path(__file__).resolve().parents[2]
# The last commit whose embedded store kept a file of its own.
RELEASE_BEFORE = "1bb115c338680079ef36847b7743506d0345de88"


def _git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, check=False)


@pytest.fixture(scope="module")
def release_before(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """That commit's sidecar and generated stubs, unpacked into a folder of their own."""
    if _git("cat-file", "-e", f"{RELEASE_BEFORE}^{{commit}}").returncode != 0:
        shallow = _git("rev-parse", "--is-shallow-repository").stdout.strip() == b"true"
        if shallow:
            pytest.skip(f"a shallow clone lacks {RELEASE_BEFORE[:12]}, the release to upgrade from")
        pytest.fail(f"this repository lacks {RELEASE_BEFORE[:12]}, the release to upgrade from")
    code = tmp_path_factory.mktemp("release-before")
    archive = _git("archive", RELEASE_BEFORE, "sidecar", "clients/python/src/actonce_api")
    assert archive.returncode == 0, archive.stderr.decode()
    subprocess.run(["tar", "-x", "-C", str(code)], input=archive.stdout, check=True)
    return code


def _serve_before(code: Path, data_dir: Path, log: Path) -> ServerProcess:
    port = free_port()
    env = scrubbed_env()
    env["PYTHONPATH"] = f"{code}:{code / 'clients' / 'python' / 'src'}"
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "sidecar.cli", "serve", "--listen", f"127.0.0.1:{port}",
             "--data-dir", str(data_dir), "--log-format", "json"],
            stdout=out, stderr=out, env=env, cwd=code,
        )  # fmt: skip
    running = ServerProcess(process, port, log)
    try:
        wait_serving(running.target, process)
    except NeverAnswered as never:
        running.stop()
        raise RuntimeError(f"the release before: {never}: {log.read_text()[-2000:]}") from None
    return running


@pytest.fixture
def stub_of() -> Iterator[type[_Stub]]:
    yield _Stub


class _Stub:
    def __init__(self, target: str) -> None:
        self.channel = grpc.insecure_channel(target)
        self.stub = pb_grpc.RunActionsServiceStub(self.channel)

    def __enter__(self) -> pb_grpc.RunActionsServiceStub:
        return self.stub

    def __exit__(self, *_: object) -> None:
        self.channel.close()


def _writes(stub: pb_grpc.RunActionsServiceStub, run_id: str) -> tuple[str, list[int]]:
    """One attempt's writes: a thread, a notice, two creates; their id and outcomes."""
    attempt = stub.BeginAttempt(
        pb.BeginAttemptRequest(run_id=run_id, rule="triage", checkpoint="cp-0")
    ).attempt_id
    thread = stub.CreateThread(pb.CreateThreadRequest(attempt_id=attempt, title="upgrade"))
    notice = stub.Notice(pb.NoticeRequest(attempt_id=attempt, thread_id=thread.thread_id,
                                          text="made before"))  # fmt: skip
    creates = [stub.Create(pb.CreateRequest(attempt_id=attempt, kind="ticket",
                                            data_json=f'{{"n":{n}}}')) for n in range(2)]  # fmt: skip
    outcomes = [thread.outcome, notice.outcome, *(c.outcome for c in creates)]
    return creates[0].id, [int(o) for o in outcomes]


def _tables(path: Path) -> set[str]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _verify(data_dir: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "sidecar.cli", "audit", "verify", "--audit-db",
         str(data_dir / "audit.db")],
        capture_output=True, text=True, env=scrubbed_env(), check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_folder_of_the_release_before_serves_and_verifies_after_the_upgrade(
    release_before: Path, tmp_path: Path, stub_of: type[_Stub]
) -> None:
    data_dir = tmp_path / "data"
    before = _serve_before(release_before, data_dir, tmp_path / "before.log")
    try:
        with stub_of(before.target) as stub:
            made, outcomes = _writes(stub, "run-upgrade")
    finally:
        before.stop()
    assert set(outcomes) == {types_pb2.OUTCOME_APPLIED}
    assert (data_dir / "store.db").exists()
    assert "artifacts" not in _tables(data_dir / "audit.db")

    after = spawn_sidecar(sidecar_config(data_dir), tmp_path / "after.log")
    try:
        with stub_of(after.target) as stub:
            # The run's next attempt makes the same writes: the store made before knows them.
            again, repeated = _writes(stub, "run-upgrade")
            _, fresh = _writes(stub, "run-after")
            attempt = stub.BeginAttempt(
                pb.BeginAttemptRequest(run_id="run-read", rule="triage", checkpoint="cp-0")
            ).attempt_id
            read = stub.Read(pb.ReadRequest(attempt_id=attempt, artifact_id=made))
    finally:
        after.stop()
    assert again == made
    assert set(repeated) == {types_pb2.OUTCOME_ALREADY_APPLIED}
    assert set(fresh) == {types_pb2.OUTCOME_APPLIED}
    assert read.artifact.data_json == '{"n":0}'
    # The folder keeps its layout: the store's rows stay in their own file.
    assert "artifacts" not in _tables(data_dir / "audit.db")
    assert "artifacts" in _tables(data_dir / "store.db")
    assert "hash chain verified" in _verify(data_dir)


def test_a_new_folder_keeps_the_store_in_the_ledger_s_file(
    tmp_path: Path, stub_of: type[_Stub]
) -> None:
    data_dir = tmp_path / "data"
    sidecar = spawn_sidecar(sidecar_config(data_dir), tmp_path / "serve.log")
    try:
        with stub_of(sidecar.target) as stub:
            _, outcomes = _writes(stub, "run-new")
    finally:
        sidecar.stop()
    assert set(outcomes) == {types_pb2.OUTCOME_APPLIED}
    assert not (data_dir / "store.db").exists()
    assert {"artifacts", "messages", "audit_events"} <= _tables(data_dir / "audit.db")
    assert "hash chain verified" in _verify(data_dir)
