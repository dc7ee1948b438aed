"""Data made before owners were recorded stays reachable, until `actonce store assign-owners`
gives it the owner the ledger names.

The release before ownership (`actonce serve`, unpacked from that commit) makes a data folder:
a payments run's thread, with a card number posted in it, and its invoice. This tree's
`actonce serve`, serving both `payments` and `chat`, upgrades the store: the chat run still
reads that thread, as before, since it has no owner. `actonce store assign-owners`, run
beside the serving sidecar, sets the owners from the ledger's creates; from then on the same
sidecar refuses the chat run FORBIDDEN, and the payments run reads its own. Run again, the
command changes nothing.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc

from tests.harness import ServerProcess, free_port, refusal, sidecar_config, spawn_sidecar
from tests.helpers.env import scrubbed_env
from tests.helpers.health import NeverAnswered, wait_serving
from tests.server.processes import run_cli

ROOT = Path(__file__).resolve().parents[2]
# A commit whose store recorded no owners (the one the data folder upgrade starts from too).
RELEASE_BEFORE = "1bb115c338680079ef36847b7743506d0345de88"
CARD = "card 4242 4242 4242 4242"


def _git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, check=False)


@pytest.fixture(scope="module")
def release_before(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if _git("cat-file", "-e", f"{RELEASE_BEFORE}^{{commit}}").returncode != 0:
        pytest.skip(f"this clone lacks {RELEASE_BEFORE[:12]}, the release to upgrade from")
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
def stub() -> Iterator[list[grpc.Channel]]:
    channels: list[grpc.Channel] = []
    yield channels
    for channel in channels:
        channel.close()


def _stub(channels: list[grpc.Channel], target: str) -> pb_grpc.RunActionsServiceStub:
    channels.append(grpc.insecure_channel(target))
    return pb_grpc.RunActionsServiceStub(channels[-1])


def _begin(stub: pb_grpc.RunActionsServiceStub, run_id: str, rule: str) -> str:
    request = pb.BeginAttemptRequest(run_id=run_id, rule=rule, checkpoint="cp-0")
    return str(stub.BeginAttempt(request, timeout=10).attempt_id)


def _assign(data_dir: Path) -> str:
    done = run_cli(
        "store", "assign-owners", "--store-db", str(data_dir / "store.db"),
        "--audit-db", str(data_dir / "audit.db"),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip()


def test_unowned_data_is_reachable_until_its_owners_are_assigned_from_the_ledger(
    release_before: Path, tmp_path: Path, stub: list[grpc.Channel]
) -> None:
    data_dir = tmp_path / "data"
    before = _serve_before(release_before, data_dir, tmp_path / "before.log")
    try:
        old = _stub(stub, before.target)
        attempt = _begin(old, "pay-1", "payments")
        thread = old.CreateThread(pb.CreateThreadRequest(attempt_id=attempt, title="invoice 1"))
        old.Notice(pb.NoticeRequest(attempt_id=attempt, thread_id=thread.thread_id, text=CARD))
        invoice = old.Create(pb.CreateRequest(attempt_id=attempt, kind="invoice", data_json="{}"))
    finally:
        before.stop()

    after = spawn_sidecar(
        sidecar_config(data_dir), tmp_path / "after.log", "--rules", "payments,chat"
    )
    try:
        new = _stub(stub, after.target)
        chat = _begin(new, "chat-1", "chat")
        # Made before owners were recorded: reachable by any rule, as it was.
        read = new.Read(pb.ReadRequest(attempt_id=chat, thread_id=thread.thread_id))
        assert [m.text for m in read.messages] == [CARD]

        said = _assign(data_dir)  # beside the serving sidecar
        assert said.startswith("2 owners assigned, 0 records had one already, 0 creates")

        for target in ({"thread_id": thread.thread_id}, {"artifact_id": invoice.id}):
            with pytest.raises(grpc.RpcError) as caught:
                new.Read(pb.ReadRequest(attempt_id=chat, **target))
            got = refusal(caught.value)
            assert (got.reason, got.failure_class, got.metadata["owner"]) == (
                "FORBIDDEN", "PERMANENT", "payments")  # fmt: skip
        payments = _begin(new, "pay-2", "payments")
        own = new.Read(pb.ReadRequest(attempt_id=payments, thread_id=thread.thread_id))
        assert [m.text for m in own.messages] == [CARD]
    finally:
        after.stop()
    assert _assign(data_dir).startswith("0 owners assigned, 2 records had one already")
    # The ledger's own file, named as the store's by mistake, is refused and left as it was.
    wrong = run_cli(
        "store", "assign-owners", "--store-db", str(data_dir / "audit.db"),
        "--audit-db", str(data_dir / "audit.db"),
    )  # fmt: skip
    assert wrong.returncode == 2, wrong.stdout + wrong.stderr
    assert "holds no store's tables" in wrong.stderr
