"""The sidecar's metrics count what its ledger leaves to a person."""

from __future__ import annotations

from pathlib import Path

from actonce_api.v1 import run_actions_pb2 as pb
from actonce_api.v1 import types_pb2

from tests.harness import sidecar_config, start_sidecar
from tests.server.scrape import scrape, value


def test_a_step_in_doubt_shows_on_the_pending_gauge(tmp_path: Path) -> None:
    running = start_sidecar(sidecar_config(tmp_path / "data", metrics_listen="127.0.0.1:0"))
    try:
        endpoint = running.sidecar.metrics_endpoint
        assert endpoint is not None
        attempt = running.begin("run-g", checkpoint="c")
        running.stub.BeginStep(
            pb.BeginStepRequest(
                attempt_id=attempt,
                tool="charge_card",
                effect=types_pb2.TOOL_EFFECT_NON_IDEMPOTENT_WRITE,
                args_json="{}",
            )
        )
        # Ended without ending its step: in doubt (while the attempt was live, the step was
        # in flight, nobody's to decide, and not counted).
        running.stub.EndAttempt(pb.EndAttemptRequest(attempt_id=attempt))
        samples = scrape(endpoint.port)
        assert value(samples, "actonce_pending_items", kind="step_in_doubt") == 1
        assert value(samples, "actonce_pending_items", kind="write_without_outcome") == 0
        assert value(samples, "actonce_pending_scrape_errors_total") == 0
    finally:
        running.stop()
