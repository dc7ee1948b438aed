"""The floors the speed goals are ratios to: a bare grpcio aio server that makes N SQLite
commits per write and nothing else.

It serves the sidecar's own calls (``actonce.v1.RunActionsService``: BeginAttempt,
CreateThread, Create, Notice; ``grpc.health.v1.Health/Check``; server reflection), so the
same ghz scenarios and the same setup (bench/setup.py) drive it as drive ``actonce serve``.
A write is ``--commits`` transactions, one after another, on one SQLite file in WAL mode with
``synchronous=FULL``, each one row and its own sync, made in the handler itself: no thread
hand-off, no batching, no id derivation, no validation. floor1 is one commit per write,
floor3 three (as an audited write's intent, the store's row and its outcome are).

    python -m bench.floor --listen 127.0.0.1:50061 --data-dir /tmp/floor --commits 3
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sqlite3
from pathlib import Path

import grpc
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from sidecar.ops import reflection

SCHEMA = "CREATE TABLE IF NOT EXISTS rows (n INTEGER PRIMARY KEY, part INTEGER, body TEXT)"


class Floor(pb_grpc.RunActionsServiceServicer):
    """Each write: ``commits`` one-row transactions one after another, each synced before the
    next."""

    def __init__(self, path: Path, commits: int) -> None:
        self._db = sqlite3.connect(path, isolation_level=None)
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute("PRAGMA synchronous = FULL")
        self._db.execute(SCHEMA)
        self._commits = commits
        self._n = 0

    def _write(self, body: str) -> str:
        for part in range(self._commits):
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute("INSERT INTO rows (part, body) VALUES (?, ?)", (part, body))
            self._db.execute("COMMIT")
        self._n += 1
        return f"w{self._n}"

    async def BeginAttempt(
        self, request: pb.BeginAttemptRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> pb.BeginAttemptResponse:
        return pb.BeginAttemptResponse(attempt_id=self._write(request.run_id))

    async def CreateThread(
        self, request: pb.CreateThreadRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> pb.CreateThreadResponse:
        return pb.CreateThreadResponse(thread_id=self._write(request.title))

    async def Create(
        self, request: pb.CreateRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> pb.CreateResponse:
        return pb.CreateResponse(id=self._write(request.data_json))

    async def Notice(
        self, request: pb.NoticeRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> pb.NoticeResponse:
        return pb.NoticeResponse(message_id=self._write(request.text))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", required=True)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--commits", type=int, default=1)
    args = parser.parse_args()
    args.data_dir.mkdir(parents=True, exist_ok=True)
    server = grpc.aio.server()
    # It serves the calls the bench makes; the stubs' other methods stay abstract.
    floor = Floor(args.data_dir / "floor.db", args.commits)  # type: ignore[abstract]
    pb_grpc.add_RunActionsServiceServicer_to_server(floor, server)
    checks = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checks, server)
    reflection.enable(server, [pb.DESCRIPTOR.services_by_name["RunActionsService"].full_name,
                               health.SERVICE_NAME])  # fmt: skip
    server.add_insecure_port(args.listen)
    await server.start()
    await checks.set("", health_pb2.HealthCheckResponse.SERVING)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    await server.stop(0.5)


if __name__ == "__main__":
    asyncio.run(main())
