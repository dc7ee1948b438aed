"""DBOS behind the sidecar's own call shape: a bare grpcio aio server whose Create and Notice
each run a DBOS workflow of one step, durably recorded in DBOS's system database (SQLite or
PostgreSQL) before the call answers.

Run in the peers' environment (`make bench-peers-env`), never the project's:

    .venv-peers/bin/python -m bench.peers.dbos_server --listen 127.0.0.1:50071 \\
        --database sqlite:////tmp/dbos/bench.sqlite
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import uuid

import grpc
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc
from dbos import DBOS, DBOSConfig
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection


@DBOS.step()
async def record(kind: str, body: str) -> str:
    # The step's answer is what DBOS makes durable: a retried workflow gets it back.
    return f"{kind}-{uuid.uuid4().hex[:16]}"


@DBOS.workflow()
async def write(kind: str, body: str) -> str:
    return await record(kind, body)


class Writes(pb_grpc.RunActionsServiceServicer):
    """Each write: one workflow of one step, its id the call's own."""

    async def BeginAttempt(self, request, context):  # type: ignore[no-untyped-def]
        return pb.BeginAttemptResponse(attempt_id=await write("attempt", request.run_id))

    async def CreateThread(self, request, context):  # type: ignore[no-untyped-def]
        return pb.CreateThreadResponse(thread_id=await write("thread", request.title))

    async def Create(self, request, context):  # type: ignore[no-untyped-def]
        return pb.CreateResponse(id=await write("create", request.data_json))

    async def Notice(self, request, context):  # type: ignore[no-untyped-def]
        return pb.NoticeResponse(message_id=await write("notice", request.text))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", required=True)
    parser.add_argument("--database", required=True, help="DBOS's system database URL")
    args = parser.parse_args()
    config: DBOSConfig = {"name": "bench", "system_database_url": args.database,
                          "log_level": "WARNING"}  # fmt: skip
    DBOS(config=config)
    DBOS.launch()
    server = grpc.aio.server()
    # It serves the calls the bench makes; the stubs' other methods stay abstract.
    pb_grpc.add_RunActionsServiceServicer_to_server(Writes(), server)  # type: ignore[abstract]
    checks = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checks, server)
    service = pb.DESCRIPTOR.services_by_name["RunActionsService"].full_name
    reflection.enable_server_reflection([service, health.SERVICE_NAME, reflection.SERVICE_NAME],
                                        server)  # fmt: skip
    server.add_insecure_port(args.listen)
    await server.start()
    await checks.set("", health_pb2.HealthCheckResponse.SERVING)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    await server.stop(0.5)
    DBOS.destroy()


if __name__ == "__main__":
    asyncio.run(main())
