"""The SQLite ledger's disk full: a small tmpfs of its own, filled to the last byte.

Writes fail closed (AUDIT_PERSISTENCE_FAILED, UNKNOWN); one whose intent could not be stored
never reaches the store; every write that was acknowledged has its audit outcome; reads keep
answering. When space comes back the same sidecar, with the same attempt, goes on.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import types_pb2

from sidecar.ledger.sqlite import SqliteLedgerReader
from tests.faults.support import applied_in, data, outcome_of
from tests.harness import Refusal, sidecar_config, start_sidecar


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "ledgerfs"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}); needs root")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@contextlib.contextmanager
def disk_filled(mount: Path) -> Iterator[None]:
    filler = mount / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        for size in (1 << 16, 1 << 10, 1):  # big chunks first, then the last few bytes
            with contextlib.suppress(OSError):  # ENOSPC: as full as this chunk size gets it
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)
    try:
        yield
    finally:
        os.unlink(filler)


def test_a_full_ledger_disk_fails_writes_closed_and_the_sidecar_recovers(
    small_disk: Path, tmp_path: Path
) -> None:
    sc = start_sidecar(sidecar_config(tmp_path / "data", audit_db=small_disk / "audit.db"))
    try:
        attempt = sc.begin("run-full")
        kept = sc.stub.Create(pb.CreateRequest(attempt_id=attempt, kind="k", data_json=data(-1)))
        acknowledged: dict[int, str] = {}
        refused: dict[int, Refusal] = {}
        with disk_filled(small_disk):
            # Until the ledger's files need a page they cannot get, writes still fit in
            # space they already hold; write until they do not.
            for n in range(2000):
                answer = outcome_of(
                    sc.stub.Create,
                    pb.CreateRequest(attempt_id=attempt, kind="k", data_json=data(n)),
                )
                if isinstance(answer, Refusal):
                    refused[n] = answer
                    if len(refused) >= 3:
                        break
                else:
                    acknowledged[n] = answer.id
            read = outcome_of(sc.stub.Read, pb.ReadRequest(attempt_id=attempt, artifact_id=kept.id))
            begun = outcome_of(
                sc.stub.BeginAttempt, pb.BeginAttemptRequest(run_id="r2", rule="r", checkpoint="")
            )
        assert len(refused) >= 3, "the disk never filled"
        for got in refused.values():
            assert (got.code, got.reason, got.failure_class) == (
                grpc.StatusCode.INTERNAL,
                "AUDIT_PERSISTENCE_FAILED",
                "UNKNOWN",
            )
        assert any("the store was not called" in got.message for got in refused.values())
        stored = {a.id: a for a in sc.artifacts("k")}
        for n, got in refused.items():
            if "store was not called" in got.message:
                assert all(json.loads(a.data_json) != {"n": n} for a in stored.values())
        assert not isinstance(read, Refusal) and read.artifact.id == kept.id  # fail-soft
        assert isinstance(begun, Refusal) and begun.reason == "AUDIT_PERSISTENCE_FAILED"

        # Space is back: the same sidecar and attempt go on, each refused write lands once.
        for n in refused:
            again = sc.stub.Create(
                pb.CreateRequest(attempt_id=attempt, kind="k", data_json=data(n))
            )
            assert again.outcome in (types_pb2.OUTCOME_APPLIED, types_pb2.OUTCOME_ALREADY_APPLIED)
        assert len(sc.artifacts("k")) == 1 + len(acknowledged) + len(refused)
        outcomes = applied_in(SqliteLedgerReader(small_disk / "audit.db"))
        assert set(acknowledged.values()) <= outcomes
    finally:
        sc.stop()
