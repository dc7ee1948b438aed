"""Every case of docs/status-cases.json, answered for real, gives its typed result.

The stand-in sidecar (clients/testkit/status_sidecar.py) sends each case's
status code, message and raw grpc-status-details-bin trailer, or a response with
its outcome number; the other three clients read the same file.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from testkit import REPO, run_testkit

from actonce_client import ActonceError, Client, FailureClass, Outcome, new_request_id

CASES = json.loads((REPO / "docs" / "status-cases.json").read_text())["cases"]


@pytest.fixture(scope="module")
def status_sidecar() -> Iterator[str]:
    with run_testkit("status_sidecar.py") as program:
        yield program.target


def test_the_cases_cover_the_table() -> None:
    names = {case["name"] for case in CASES}
    assert {"bare CANCELLED", "lowercase class", "details code mismatched"} <= names
    assert any("outcome" in case["answer"] for case in CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case["name"])
def test_status_case(status_sidecar: str, case: dict[str, Any]) -> None:
    with Client(status_sidecar, timeout=10) as client:
        attempt = client.begin("run-status-cases", "rule")
        request_id = new_request_id()
        expect = case["expect"]
        if "outcome" in expect:
            written = attempt.create(case["name"], {}, request_id=request_id)
            assert written.outcome is Outcome[expect["outcome"]]
            return
        with pytest.raises(ActonceError) as raised:
            attempt.create(case["name"], {}, request_id=request_id)
        error, want = raised.value, expect["error"]
        assert type(error) is ActonceError
        assert error.code is grpc.StatusCode[want["code"]]
        assert error.reason == want["reason"]
        assert error.failure_class is FailureClass[want["failure_class"]]
        assert [v.field for v in error.violations] == want["violations"]
        assert error.request_id == request_id


def test_a_cancellation_of_the_callers_own_is_not_retryable(status_sidecar: str) -> None:
    """Closing the client cancels the call it is making: that CANCELLED says nothing of the
    sidecar, and is UNKNOWN, not the RETRYABLE of a bare CANCELLED the caller did not cause."""
    with run_testkit("holding_proxy.py", status_sidecar) as proxy:
        client = Client(proxy.target, timeout=30)
        attempt = client.begin("run-status-cases", "rule")
        assert proxy.command("hold") == "held"
        closing = threading.Timer(0.5, client.close)
        closing.start()
        with pytest.raises(ActonceError) as raised:
            attempt.create("outcome applied", {})
        closing.join()
    error = raised.value
    assert (error.code, error.reason, error.failure_class) == (
        grpc.StatusCode.CANCELLED, "CANCELLED", FailureClass.UNKNOWN,
    )  # fmt: skip
