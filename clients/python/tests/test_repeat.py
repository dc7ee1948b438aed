"""A write whose answer is held past its deadline, repeated as the README shows, lands once.

A proxy (clients/testkit/holding_proxy.py) passes the Create to a real sidecar,
which makes the ticket, and holds the answer until the client gives up at its
deadline. The caller then has an error and an unknown outcome; repeating the
write with the request_id taken from the error gets the first answer back, and
the store holds one ticket, not two.
"""

from __future__ import annotations

import inspect
import json
import re
import uuid

import pytest
from testkit import REPO, run_testkit

from actonce_client import ActonceError, Client, FailureClass, Outcome
from actonce_client.ids import WriteType, create_identity, derive_id

README = REPO / "clients" / "python" / "README.md"


def test_a_write_held_past_its_deadline_is_repeated_as_the_readme_shows(target: str) -> None:
    run_id, checkpoint = f"run-{uuid.uuid4()}", "cp-1"
    data = {"title": "Disk full", "severity": 2}
    with (
        run_testkit("holding_proxy.py", target) as proxy,
        Client(proxy.target, timeout=1.0) as client,
    ):
        attempt = client.begin(run_id, "triage", checkpoint=checkpoint)
        assert proxy.command("hold") == "held"
        # The README's safe repeat:
        try:
            ticket = attempt.create("ticket", data)
        except ActonceError as error:
            if not (error.retryable and error.request_id):
                raise
            # The outcome is unknown: repeat the same write with the same request_id.
            ticket = attempt.create("ticket", data, request_id=error.request_id)
        # End of the README's safe repeat.
        assert proxy.command("given-up") == "1", "the first try was answered in time"

        identity = create_identity("ticket", json.dumps(data))
        first, second = (
            derive_id(WriteType.CREATE, run_id=run_id, checkpoint=checkpoint,
                      identity=identity, occurrence=occurrence)
            for occurrence in (0, 1)
        )  # fmt: skip
        assert (ticket.id, ticket.outcome) == (first, Outcome.APPLIED)
        assert attempt.read_artifact(first).data == data
        with pytest.raises(ActonceError) as missing:
            attempt.read_artifact(second)
        assert (missing.value.reason, missing.value.failure_class) == (
            "NOT_FOUND", FailureClass.REFUSED,
        )  # fmt: skip
        assert attempt.end().applied == 1


def _lines(text: str) -> str:
    return "\n".join(line.strip() for line in text.strip().splitlines())


def test_the_readme_shows_the_repeat_this_test_makes() -> None:
    source = inspect.getsource(test_a_write_held_past_its_deadline_is_repeated_as_the_readme_shows)
    example = re.search(r"# The README's safe repeat:\n(.*?)\n\s*# End of", source, re.S)
    assert example is not None
    assert _lines(example.group(1)) in _lines(README.read_text())
