"""The ports the tests start servers on: never one a port-0 bind or an outgoing connection
can take in between, and never one another pytest-xdist worker picks."""

from __future__ import annotations

import pytest

from tests import harness


def test_a_free_port_is_below_the_ephemeral_range_and_bindable() -> None:
    ports = [harness.free_port() for _ in range(20)]
    assert all(harness._FIRST_PORT <= port < harness._ephemeral_low() for port in ports)
    assert len(set(ports)) == len(ports)


def test_two_workers_pick_from_slices_that_do_not_meet(monkeypatch: pytest.MonkeyPatch) -> None:
    picked: dict[str, set[int]] = {}
    for worker in ("gw0", "gw1", "gw2"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        picked[worker] = {harness.free_port() for _ in range(50)}
    assert not picked["gw0"] & picked["gw1"]
    assert not picked["gw1"] & picked["gw2"]
    assert max(picked["gw0"]) < min(picked["gw1"]) and max(picked["gw1"]) < min(picked["gw2"])
