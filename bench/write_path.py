"""One warm Create's route through the sidecar's code, in each layout: the functions and the
modules of ``sidecar/`` it runs, every thread counted (the event loop's, the ledger's writer,
the store's batches), as a profiler sees them.

    python -m bench.write_path [--layouts one-file,ledger-of-its-own,external-store]

The layouts: ``one-file``, the default, the store in the ledger's file; ``ledger-of-its-own``,
a data folder whose store has a file of its own (made before the store moved into the
ledger's); ``external-store``, ``actonce store`` as a process of its own (its code runs there
and is not counted). The sidecar runs in this process, served over loopback gRPC; after warm
Creates, a profile hook records each function of ``sidecar/`` that one more Create calls,
from the call to its answer. docs/architecture.md keeps the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import grpc
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc

from bench.processes import ROOT, free_port, wait_until_serving
from bench.processes import Target as Process
from sidecar.assembly.server import create_server
from sidecar.config import Config

LAYOUTS = ("one-file", "ledger-of-its-own", "external-store")
SIDECAR = str(ROOT / "sidecar") + "/"
WARM_CREATES = 50


@dataclass
class Route:
    """The functions of sidecar/ called while ``recording`` is set, in any thread."""

    recording: bool = False
    functions: set[tuple[str, str]] = field(default_factory=set)

    def hook(self, frame: FrameType, event: str, _arg: Any) -> None:
        if self.recording and event == "call":
            code = frame.f_code
            if code.co_filename.startswith(SIDECAR):
                self.functions.add((code.co_filename, code.co_qualname))

    def modules(self) -> list[str]:
        return sorted({f.removeprefix(SIDECAR) for f, _ in self.functions})


def _config(layout: str, data: Path, store_target: str | None) -> Config:
    if layout == "ledger-of-its-own":  # the store's file of its own, made before
        data.mkdir(parents=True)
        (data / "store.db").touch()
    return Config(listen=f"127.0.0.1:{free_port()}", data_dir=data, store_target=store_target)


def _store_process(work: Path) -> tuple[Process, str]:
    listen = f"127.0.0.1:{free_port()}"
    process = subprocess.Popen(
        [sys.executable, "-m", "sidecar.cli", "store", "--listen", listen,
         "--data-dir", str(work / "store")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT,
    )  # fmt: skip
    store = Process("store", process, listen, "store")
    wait_until_serving(store)
    return store, listen


async def _route(layout: str, work: Path) -> Route:
    store, target = _store_process(work) if layout == "external-store" else (None, None)
    route = Route()
    threading.setprofile(route.hook)  # the sidecar's threads, started from here on
    sys.setprofile(route.hook)
    try:
        config = _config(layout, work / "data", target)
        sidecar, _ = await create_server(config)
        await sidecar.start()
        try:
            await _creates(config.listen, route)
        finally:
            await sidecar.stop(1.0)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
        if store is not None:
            store.stop()
    return route


async def _creates(listen: str, route: Route) -> None:
    async with grpc.aio.insecure_channel(listen) as channel:
        stub = pb_grpc.RunActionsServiceStub(channel)
        begun = await stub.BeginAttempt(
            pb.BeginAttemptRequest(run_id="route", rule="bench", checkpoint="cp"), timeout=10
        )

        def create(n: int) -> Any:
            request = pb.CreateRequest(
                attempt_id=begun.attempt_id, kind="ticket", data_json=f'{{"n": {n}}}'
            )
            return stub.Create(request, timeout=10)

        for n in range(WARM_CREATES):
            await create(n)
        await asyncio.sleep(0.2)  # the warm writes' batches closed
        route.recording = True
        await create(WARM_CREATES)
        route.recording = False


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layouts", default=",".join(LAYOUTS))
    parser.add_argument("--list", action="store_true", help="name each module")
    args = parser.parse_args(argv)
    for layout in args.layouts.split(","):
        with tempfile.TemporaryDirectory(prefix="actonce-route-") as tmp:
            started = time.monotonic()
            route = asyncio.run(_route(layout, Path(tmp)))
        modules = route.modules()
        print(f"{layout:<18} {len(route.functions):>4} functions  {len(modules):>3} modules"
              f"  ({time.monotonic() - started:.1f} s)")  # fmt: skip
        if args.list:
            print("    " + "\n    ".join(modules))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
