"""Under a steady load, the store is killed and comes back; attempts nobody ends expire.

The load is ghz (from .tools/, as ``make ghz`` builds it, or $GHZ) making Create calls through
server reflection, with a Python load generator instead when ghz is not built. A probe beside
it decodes each answer's ErrorInfo. While the store is gone every write is refused as
RETRYABLE (STORE_UNAVAILABLE), never UNKNOWN or INTERNAL; once it is back, the same sidecar
process takes writes again. Memory: a sidecar's attempts live in its memory only, and an
attempt nobody called for ``--attempt-idle-ttl`` seconds is forgotten when the next attempt
begins; under a stream of attempts that are never ended, the sidecar's resident memory levels
off instead of growing with them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import grpc
import pytest
from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import run_actions_pb2_grpc as pb_grpc

from tests.faults.support import data, spawn_store
from tests.harness import begin, refusal, sidecar_config, spawn_sidecar

ROOT = Path(__file__).resolve().parents[2]
LOAD_SECONDS = 16


def _ghz() -> str | None:
    candidates = [os.environ.get("GHZ", ""), str(ROOT / ".tools" / "bin" / "ghz"),
                  *map(str, sorted((ROOT / ".tools").glob("ghz-*/ghz"))), shutil.which("ghz") or ""]  # fmt: skip
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _python_load(target: str, attempt: str, seconds: float, codes: Counter[str]) -> None:
    # The fallback load generator: four callers, as fast as the sidecar answers.
    def caller(worker: int) -> None:
        with grpc.insecure_channel(target) as channel:
            stub = pb_grpc.RunActionsServiceStub(channel)
            n, end = 0, time.monotonic() + seconds
            while time.monotonic() < end:
                n += 1
                try:
                    stub.Create(pb.CreateRequest(attempt_id=attempt, kind="load",
                                                 data_json=json.dumps({"w": worker, "n": n})),
                                timeout=5)  # fmt: skip
                    codes["OK"] += 1
                except grpc.RpcError as error:
                    codes[error.code().name] += 1

    workers = [threading.Thread(target=caller, args=(w,)) for w in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


def test_under_load_a_killed_store_is_retryable_and_the_sidecar_recovers_without_restart(
    tmp_path: Path,
) -> None:
    store = spawn_store(tmp_path / "store", tmp_path / "store.log")
    port = store.port
    config = sidecar_config(tmp_path / "sidecar", store_target=store.target)
    sidecar = spawn_sidecar(config, tmp_path / "sidecar.log", "--store-timeout", "2")
    channel = grpc.insecure_channel(sidecar.target)
    stub = pb_grpc.RunActionsServiceStub(channel)
    try:
        attempt = begin(stub, "load", "r", "c")
        codes: Counter[str] = Counter()
        ghz = _ghz()
        if ghz is not None:
            report = tmp_path / "ghz.json"
            load = subprocess.Popen(
                [ghz, "--insecure", "--call", "actonce.v1.RunActionsService.Create",
                 "-d", json.dumps({"attempt_id": attempt, "kind": "load",
                                   "data_json": '{"n":{{.RequestNumber}}}'}),
                 "--concurrency", "4", "--rps", "150", "--duration", f"{LOAD_SECONDS}s",
                 "--timeout", "5s", "--format", "json", "-o", str(report), sidecar.target],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            )  # fmt: skip
        else:
            load_thread = threading.Thread(
                target=_python_load, args=(sidecar.target, attempt, LOAD_SECONDS, codes)
            )
            load_thread.start()

        probe_attempt = begin(stub, "probe", "r", "c")
        probes: list[tuple[float, str]] = []  # (when, "ok" or reason/class)
        stop = threading.Event()

        def probe() -> None:
            n = 0
            while not stop.is_set():
                n += 1
                try:
                    stub.Create(
                        pb.CreateRequest(attempt_id=probe_attempt, kind="probe", data_json=data(n)),
                        timeout=5,
                    )
                    probes.append((time.monotonic(), "ok"))
                except grpc.RpcError as error:
                    got = refusal(error)
                    probes.append(
                        (time.monotonic(), f"{got.reason}/{got.failure_class}/{got.code.name}")
                    )
                time.sleep(0.05)

        prober = threading.Thread(target=probe)
        prober.start()
        time.sleep(4)
        store.process.send_signal(signal.SIGKILL)
        store.process.wait(10)
        killed = time.monotonic()
        time.sleep(4)
        restarting = time.monotonic()
        store = spawn_store(tmp_path / "store", tmp_path / "store.log", port=port)
        back = time.monotonic()
        if ghz is not None:
            _, err = load.communicate(timeout=LOAD_SECONDS + 60)
            assert load.returncode == 0, err
            result = json.loads(report.read_text())
            codes.update(result.get("statusCodeDistribution", {}))
        else:
            load_thread.join()
        stop.set()
        prober.join()

        assert sidecar.process.poll() is None  # the same process throughout
        assert set(codes) <= {"OK", "Unavailable", "UNAVAILABLE"}, codes
        assert codes["OK"] > 0 and (codes["Unavailable"] + codes["UNAVAILABLE"]) > 0, codes
        during = {what for when, what in probes if killed + 0.2 < when < restarting}
        assert during == {"STORE_UNAVAILABLE/RETRYABLE/UNAVAILABLE"}, during
        recovered = [when for when, what in probes if when > back and what == "ok"]
        assert recovered, probes[-5:]
        print(f"\nload: {dict(codes)}; first write after the store came back: "
              f"{recovered[0] - back:.2f}s")  # fmt: skip
        assert recovered[0] - back < 10
        assert all(what == "ok" for when, what in probes if when > recovered[0])
    finally:
        channel.close()
        sidecar.stop()
        store.stop()


@pytest.mark.parametrize("ttl", [1, 3600])
def test_attempts_nobody_ends_expire_and_memory_levels_off(tmp_path: Path, ttl: int) -> None:
    config = sidecar_config(tmp_path / "sidecar")
    sidecar = spawn_sidecar(config, tmp_path / "sidecar.log", "--attempt-idle-ttl", str(ttl))
    channel = grpc.insecure_channel(sidecar.target)
    stub = pb_grpc.RunActionsServiceStub(channel)

    def abandon(run: int) -> None:
        # An agent that dies after a few writes: its attempt is never ended, and holds its
        # occurrence counts and request_id answers until it expires.
        # A 48 KiB checkpoint: 150 kept attempts hold 7 MiB, far above the allocator's noise.
        attempt = stub.BeginAttempt(
            pb.BeginAttemptRequest(run_id=f"run-{run}", rule="r", checkpoint="c" * 49152)
        ).attempt_id
        for n in range(2):
            stub.Create(pb.CreateRequest(attempt_id=attempt, kind="k", request_id=f"rq-{n}" * 40,
                                         data_json=json.dumps({"run": run, "n": n, "pad": "p" * 500})))  # fmt: skip

    try:
        samples = []
        for batch in range(4):
            started = time.monotonic()
            for run in range(batch * 150, (batch + 1) * 150):
                abandon(run)
            samples.append(_rss_kib(sidecar.process.pid))
            # Each batch's attempts are idle past the TTL before the next batch begins.
            time.sleep(max(0.0, 1.2 - (time.monotonic() - started)))
        print(f"\nttl {ttl}s: sidecar RSS after each 150 abandoned attempts (KiB): {samples}")
        growth = samples[-1] - samples[1]
        if ttl == 1:
            # Past the first batches (imports warm, caches filled), memory does not grow
            # with the attempts: they are forgotten a second after their last call.
            assert growth < 3 * 1024, samples
        else:
            # The control: kept for an hour, the same attempts hold their memory.
            assert growth > 3 * 1024, samples
    finally:
        channel.close()
        sidecar.stop()


def test_the_registry_forgets_idle_attempts_when_the_next_begins() -> None:
    from sidecar.core.attempts import AttemptRegistry

    # The 100 begins take about a millisecond, but a process paused longer than the TTL
    # between two of them (a loaded CI machine's scheduler, a full garbage collection)
    # rightly forgets the ones begun before the pause: with a TTL of 0.2 s one run kept
    # 51. A second leaves a margin no such pause reaches.
    registry = AttemptRegistry(idle_ttl_seconds=1.0)
    began = time.monotonic()
    for n in range(100):
        registry.begin(run_id=f"r{n}", rule="r", checkpoint="", lease_deadline=None)
    assert len(registry) == 100, f"100 begins took {time.monotonic() - began:.3f} s"
    time.sleep(1.2)
    registry.begin(run_id="late", rule="r", checkpoint="", lease_deadline=None)
    assert len(registry) == 1


def test_after_a_long_store_outage_the_sidecar_reconnects_within_a_second_or_so(
    tmp_path: Path,
) -> None:
    # gRPC's default reconnect backoff grows to two minutes: after a long outage the sidecar
    # kept answering STORE_UNAVAILABLE for seconds to minutes after the store was back. Its
    # channel to the store now retries at least every second.
    store = spawn_store(tmp_path / "store", tmp_path / "store.log")
    port = store.port
    sidecar = spawn_sidecar(sidecar_config(tmp_path / "sidecar", store_target=store.target),
                            tmp_path / "sidecar.log")  # fmt: skip
    channel = grpc.insecure_channel(sidecar.target)
    stub = pb_grpc.RunActionsServiceStub(channel)
    try:
        attempt = begin(stub, "long", "r", "c")
        store.process.send_signal(signal.SIGKILL)
        store.process.wait(10)
        n, down = 0, time.monotonic()
        while time.monotonic() - down < 10:  # an agent retrying all along
            n += 1
            with contextlib.suppress(grpc.RpcError):
                stub.Create(
                    pb.CreateRequest(attempt_id=attempt, kind="k", data_json=data(n)), timeout=5
                )
            time.sleep(0.2)
        store = spawn_store(tmp_path / "store", tmp_path / "store.log", port=port)
        back = time.monotonic()
        while True:
            n += 1
            try:
                stub.Create(
                    pb.CreateRequest(attempt_id=attempt, kind="k", data_json=data(n)), timeout=5
                )
                break
            except grpc.RpcError:
                time.sleep(0.05)
        lag = time.monotonic() - back
        print(f"\nfirst write {lag:.2f}s after a 10s store outage ended")
        assert lag < 2.5
    finally:
        channel.close()
        sidecar.stop()
        store.stop()
