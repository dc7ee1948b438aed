"""Many edits of one artifact at once, through one sidecar: they patch one at a time.

The store refuses a patch made against a version someone else has just replaced
(VERSION_CONFLICT); an edit refused that way reads the artifact again, at most three times in
its attempt, and then fails RETRYABLE. Edits that race only each other, inside one sidecar,
need not lose that race: they all land, each once.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import types_pb2

from tests.harness import RunningSidecar

EDITS = 24


def test_edits_of_one_artifact_made_at_once_all_land_without_a_conflict(
    sidecar: RunningSidecar,
) -> None:
    attempt = sidecar.begin()
    artifact = sidecar.stub.Create(
        pb.CreateRequest(attempt_id=attempt, kind="ticket", data_json="{}")
    )
    start = threading.Barrier(EDITS)

    def edit(n: int) -> object:
        request = pb.EditRequest(
            attempt_id=attempt, artifact_id=artifact.id, path=f"/slot{n}", value_json=str(n)
        )
        start.wait()
        try:
            return sidecar.stub.Edit(request, timeout=30).outcome
        except grpc.RpcError as error:
            return error.code()

    with ThreadPoolExecutor(EDITS) as pool:
        answers = list(pool.map(edit, range(EDITS)))

    assert answers == [types_pb2.OUTCOME_APPLIED] * EDITS
    read = sidecar.stub.Read(pb.ReadRequest(attempt_id=attempt, artifact_id=artifact.id))
    assert json.loads(read.artifact.data_json) == {f"slot{n}": n for n in range(EDITS)}
    assert read.artifact.version == artifact.version + EDITS  # each edit patched it once
