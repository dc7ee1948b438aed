"""A freeze stops the sidecar's whole process group and wakes it: under faketime, which forks
the sidecar as its child, stopping the wrapper alone would leave the sidecar serving."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

from chaos.processes import Service, group_members, seed_ports, sidecar_command
from tests.helpers.health import health_answer, wait_for_health


def test_a_frozen_sidecar_under_faketime_is_stopped_whole_and_wakes(tmp_path: Path) -> None:
    assert shutil.which("faketime"), "faketime is missing: `make faketime` installs it"
    port = seed_ports(0, int(time.time()) % 997).sidecar
    sidecar = Service("sidecar", [], port, tmp_path / "sidecar.log", needs_serving=False)
    sidecar.command = sidecar_command(port, tmp_path / "data", prefix=("faketime", "-f", "-10m"))
    sidecar.start()
    try:
        assert sidecar.process is not None
        pgid = sidecar.process.pid
        assert len(group_members(pgid)) >= 2  # the wrapper and the sidecar it forked
        freezing = threading.Thread(target=sidecar.freeze, args=(3.0,))
        freezing.start()
        time.sleep(0.5)
        assert set(group_members(pgid).values()) == {"T"}
        # Frozen, it answers nothing: a health check runs out of time.
        assert health_answer(sidecar.target, timeout=1.0) == "error:DEADLINE_EXCEEDED"
        freezing.join()
        assert "T" not in set(group_members(pgid).values())
        wait_for_health(sidecar.target, "SERVING", timeout=30.0)
    finally:
        sidecar.stop()
    assert group_members(pgid) == {}  # stopped whole: nothing of the group is left
