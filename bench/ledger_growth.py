"""How many bytes the audit ledger grows by per event and per write, on SQLite and PostgreSQL.

A real sidecar (embedded store) serves runs as an agent makes them: each run begins an
attempt, creates a thread, posts notices and ends. The ledger's size on disk is read
before and after (SQLite: the file once the sidecar closed it, its log folded in;
PostgreSQL: ``pg_total_relation_size`` of the events and runs tables, indexes included),
and the growth is divided by the events and by the writes the runs made. The size of
what ``audit export`` (and ``audit prune``) writes for the same events is printed too.

    .venv/bin/python -m bench.ledger_growth --runs 1000
    .venv/bin/python -m bench.ledger_growth --runs 1000 --dsn postgresql://...

The figures in docs/ledger.md's "Keeping the ledger's size" come from this script.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import sqlite3
import tempfile
import uuid
from dataclasses import replace
from pathlib import Path

import grpc
import psycopg
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc

from sidecar.assembly.server import create_server
from sidecar.config import Config
from sidecar.ledger import inspect
from sidecar.ledger.audit_command import open_reader

NOTICES = 8  # per run; with its thread, the run makes NOTICES + 1 writes


def ledger_bytes(db: Path | None, dsn: str | None) -> int:
    if dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT pg_total_relation_size('audit_events') + "
                "pg_total_relation_size('audit_runs')"
            ).fetchone()
            return int(row[0]) if row else 0
    assert db is not None
    lite = sqlite3.connect(db)
    try:
        lite.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        # Pages in use: a file that grew and has free pages would overstate the growth.
        pages = lite.execute("PRAGMA page_count").fetchone()[0]
        free = lite.execute("PRAGMA freelist_count").fetchone()[0]
        size = lite.execute("PRAGMA page_size").fetchone()[0]
        return int((pages - free) * size)
    finally:
        lite.close()


def export_bytes(db: Path | None, dsn: str | None) -> int:
    """What `audit export` (and so `audit prune`) writes for every event, in bytes."""
    out = io.StringIO()
    reader = open_reader({"audit_db": db, "audit_dsn": dsn})
    try:
        inspect.export(reader, out)
    finally:
        reader.close()
    return len(out.getvalue().encode("utf-8"))


def event_count(db: Path | None, dsn: str | None) -> int:
    if dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute("SELECT COUNT(*) FROM audit_events").fetchone()
            return int(row[0]) if row else 0
    assert db is not None
    lite = sqlite3.connect(db)
    try:
        return int(lite.execute("SELECT COUNT(*) FROM audit_events").fetchone()[0])
    finally:
        lite.close()


async def make_runs(config: Config, runs: int) -> int:
    sidecar, port = await create_server(config)
    await sidecar.start()
    writes = 0
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.RunActionsServiceStub(channel)
            for n in range(runs):
                run_id = f"run-{uuid.uuid4()}"
                begun = await stub.BeginAttempt(
                    pb.BeginAttemptRequest(run_id=run_id, rule="triage", checkpoint="cp-0")
                )
                attempt = begun.attempt_id
                thread = await stub.CreateThread(
                    pb.CreateThreadRequest(attempt_id=attempt, title=f"ticket {n}")
                )
                writes += 1
                for i in range(NOTICES):
                    await stub.Notice(pb.NoticeRequest(
                        attempt_id=attempt, thread_id=thread.thread_id,
                        text=f"step {i}: looked at the ticket and wrote what was found",
                        request_id=str(uuid.uuid4())))  # fmt: skip
                    writes += 1
                await stub.EndAttempt(pb.EndAttemptRequest(attempt_id=attempt))
    finally:
        await sidecar.stop(0)
    return writes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--dsn", help="a PostgreSQL ledger (an empty database) instead of SQLite")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        db = None if args.dsn else data / "audit.db"
        config = replace(Config(listen="127.0.0.1:0", data_dir=data), audit_db=db,
                         audit_dsn=args.dsn)  # fmt: skip
        # A first run creates the schema: what grows after it is the events alone.
        asyncio.run(make_runs(config, 1))
        size0, events0 = ledger_bytes(db, args.dsn), event_count(db, args.dsn)
        exported0 = export_bytes(db, args.dsn)
        writes = asyncio.run(make_runs(config, args.runs))
        grown, events = ledger_bytes(db, args.dsn) - size0, event_count(db, args.dsn) - events0
        exported = export_bytes(db, args.dsn) - exported0
    backend = "PostgreSQL" if args.dsn else "SQLite"
    print(f"{backend}: {args.runs} runs, {writes} writes, {events} events, "
          f"{grown / 1e6:.2f} MB: {grown / events:.0f} bytes per event, "
          f"{grown / writes:.0f} bytes per write (its run's begin and end included); "
          f"exported, {exported / events:.0f} bytes per event")  # fmt: skip


if __name__ == "__main__":
    main()
