"""A write whose store call may have reached the store is audited as such, never as failed.

The standalone store commits each write, then its answer is lost: the connection is reset
as the answer comes back. The caller is told to retry (STORE_UNAVAILABLE, RETRYABLE: the
derived id makes it safe). The store holds every write; the ledger, which cannot know,
says each may have landed, and ``audit show`` says so in words. The retry finds them all.
"""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import types_pb2

from sidecar.ledger.base import Phase
from tests.faults.support import spawn_store
from tests.harness import refusal, sidecar_config, start_sidecar
from tests.helpers.cutting_proxy import cutting_proxy
from tests.server.processes import run_cli

KIND = b"cut-off-ticket"


def test_writes_whose_answers_were_lost_after_the_store_committed_may_have_landed(
    tmp_path: Path,
) -> None:
    store = spawn_store(tmp_path / "store", tmp_path / "store.log")
    try:
        with cutting_proxy(store.port, marker=KIND, answer_marker=KIND) as proxy:
            config = sidecar_config(
                tmp_path / "data", store_target=f"127.0.0.1:{proxy.port}", store_timeout_seconds=5
            )
            sidecar = start_sidecar(config)
            try:
                attempt = sidecar.begin("run-lost")
                for n in range(4):
                    proxy.armed.set()
                    with pytest.raises(grpc.RpcError) as lost:
                        sidecar.stub.Create(
                            pb.CreateRequest(
                                attempt_id=attempt,
                                kind=KIND.decode(),
                                data_json=json.dumps({"n": n}),
                            )
                        )
                    said = refusal(lost.value)
                    assert (said.reason, said.failure_class) == ("STORE_UNAVAILABLE", "RETRYABLE")
                assert proxy.cuts == 4
                assert len(sidecar.artifacts(KIND.decode())) == 4  # the store holds them all
                outcomes = [
                    e.event for e in sidecar.audit("run-lost") if e.event.phase == Phase.OUTCOME
                ]
                assert [e.detail.get("landed") for e in outcomes] == ["unknown"] * 4
                # The run retried: each write is found made, none is made again.
                retry = sidecar.begin("run-lost")
                for n in range(4):
                    again = sidecar.stub.Create(
                        pb.CreateRequest(
                            attempt_id=retry, kind=KIND.decode(), data_json=json.dumps({"n": n})
                        )
                    )
                    assert again.outcome == types_pb2.OUTCOME_ALREADY_APPLIED
                assert len(sidecar.artifacts(KIND.decode())) == 4
            finally:
                sidecar.stop()
    finally:
        store.stop()
    shown = run_cli("audit", "show", "run-lost", "--audit-db", str(config.audit_path))
    assert shown.stdout.count("it may have landed") == 4, shown.stdout
    assert "refused STORE_UNAVAILABLE" not in shown.stdout
