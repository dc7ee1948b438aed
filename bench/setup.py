"""What the ghz scenarios in bench/ghz/ need before they run, as environment variables.

Every scenario writes inside an attempt, to a thread or an artifact that must exist first;
ghz cannot make them, so this makes them and prints ``export`` lines its templates read
(``{{env `BENCH_ATTEMPT_ID`}}``, ...). By hand, with a sidecar serving on 50051::

    eval "$(.venv/bin/python -m bench.setup sidecar 127.0.0.1:50051)"
    .tools/bin/ghz --config bench/ghz/create.json
    eval "$(.venv/bin/python -m bench.setup retry 127.0.0.1:50051)"   # a second attempt
    .tools/bin/ghz --config bench/ghz/storm.json                      # all ALREADY_APPLIED

and with ``actonce store`` on 50052, ``bench.setup store 127.0.0.1:50052`` for the
``store-*.json`` scenarios.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shlex

import grpc
from actonce_api.store.v1 import artifact_store_pb2 as spb
from actonce_api.store.v1 import artifact_store_pb2_grpc as spb_grpc
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc

# The rule every bench attempt runs under; bench/serve.py puts it on the send allowlist.
RULE = "bench"
CHECKPOINT = "cp-bench"
# The hot artifact's members: the Edit scenario writes one of these at a time.
HOT_SLOTS = 8
HOT_DATA = "{" + ",".join(f'"n{i}":-1' for i in range(HOT_SLOTS)) + "}"


def sidecar(target: str, nonce: str | None = None) -> dict[str, str]:
    """A fresh run's first attempt, a thread and a hot artifact, made through the sidecar."""
    nonce = nonce or secrets.token_hex(6)
    run_id = f"bench-{nonce}"
    with grpc.insecure_channel(target) as channel:
        stub = pb_grpc.RunActionsServiceStub(channel)
        attempt = stub.BeginAttempt(
            pb.BeginAttemptRequest(run_id=run_id, rule=RULE, checkpoint=CHECKPOINT), timeout=10
        ).attempt_id
        thread = stub.CreateThread(
            pb.CreateThreadRequest(attempt_id=attempt, title="bench"), timeout=10
        ).thread_id
        artifact = stub.Create(
            pb.CreateRequest(attempt_id=attempt, kind="bench-hot", data_json=HOT_DATA),
            timeout=10,
        ).id
    return {
        "BENCH_NONCE": nonce,
        "BENCH_RUN_ID": run_id,
        "BENCH_ATTEMPT_ID": attempt,
        "BENCH_THREAD_ID": thread,
        "BENCH_ARTIFACT_ID": artifact,
    }


def retry(target: str, run_id: str) -> dict[str, str]:
    """The run's next attempt, from the same checkpoint: it makes the same writes again."""
    with grpc.insecure_channel(target) as channel:
        stub = pb_grpc.RunActionsServiceStub(channel)
        attempt = stub.BeginAttempt(
            pb.BeginAttemptRequest(run_id=run_id, rule=RULE, checkpoint=CHECKPOINT), timeout=10
        ).attempt_id
    return {"BENCH_ATTEMPT_ID": attempt}


def end_attempt(target: str, attempt_id: str) -> pb.EndAttemptResponse:
    """End an attempt: its writes counted by outcome."""
    with grpc.insecure_channel(target) as channel:
        stub = pb_grpc.RunActionsServiceStub(channel)
        answer: pb.EndAttemptResponse = stub.EndAttempt(
            pb.EndAttemptRequest(attempt_id=attempt_id), timeout=10
        )
    return answer


def store(target: str, nonce: str | None = None) -> dict[str, str]:
    """A thread and an artifact made on the store directly, with ids of our own choosing."""
    nonce = nonce or secrets.token_hex(6)
    thread, artifact = f"thread-{nonce}", f"hot-{nonce}"
    with grpc.insecure_channel(target) as channel:
        stub = spb_grpc.ArtifactStoreServiceStub(channel)
        stub.CreateThread(spb.CreateThreadRequest(thread_id=thread, title="bench"), timeout=10)
        stub.CreateArtifact(
            spb.CreateArtifactRequest(artifact_id=artifact, kind="bench-hot", data_json=HOT_DATA),
            timeout=10,
        )
    return {"BENCH_NONCE": nonce, "BENCH_THREAD_ID": thread, "BENCH_ARTIFACT_ID": artifact}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("sidecar", "retry", "store"))
    parser.add_argument("target", help="HOST:PORT of the sidecar or the store")
    parser.add_argument("--run-id", default=os.environ.get("BENCH_RUN_ID"))
    args = parser.parse_args()
    if args.what == "sidecar":
        values = sidecar(args.target)
    elif args.what == "store":
        values = store(args.target)
    else:
        if not args.run_id:
            parser.error("retry needs --run-id or BENCH_RUN_ID from an earlier 'sidecar'")
        values = retry(args.target, args.run_id)
    for key, value in values.items():
        print(f"export {key}={shlex.quote(value)}")


if __name__ == "__main__":
    main()
