"""What the README and docs/guarantees.md promise of a gateway call's send permit, and the
window they say it leaves, read against the code that keeps (or bounds) each promise."""

from __future__ import annotations

import re

from sidecar import errors
from sidecar.cli import build_parser
from sidecar.ledger.liveness import STALE_SECONDS
from sidecar.ledger.pending import Kind
from tests.docs.pages import ROOT, page_text


def _readme_section(heading: str) -> str:
    return page_text("README.md").split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]


def _bullet(text: str, starting: str) -> str:
    """The list item of ``text`` whose bold lead starts with ``starting``, joined into one line."""
    for item in re.split(r"\n- ", text):
        if item.startswith(f"**{starting}"):
            return " ".join(item.split())
    raise AssertionError(f"no bullet starting **{starting}")


def _guarantee(starting: str) -> str:
    return _bullet(page_text("guarantees.md"), starting)


def _seconds_without_heartbeat(text: str) -> float:
    found = re.search(r"(\d+) s (?:after its sidecar's last heartbeat|without a heartbeat)", text)
    assert found, text
    return float(found.group(1))


def test_the_readme_promises_the_permit_and_names_the_window_it_leaves() -> None:
    promised = _bullet(_readme_section("Guarantees"), "A gateway call is sent only under")
    for words in (
        "by the ledger's clock",
        "nobody decides it while it may be",
        "never sends again",
    ):
        assert words in promised, promised
    window = _bullet(_readme_section("Not promised"), "A send permit leaves a window")
    assert "python -m bench.permit_window" in window
    assert (ROOT / "bench" / "permit_window.py").is_file()
    assert _seconds_without_heartbeat(window) == STALE_SECONDS
    assert "idempotency key" in window


def test_a_refused_permit_answers_reasons_that_exist_and_are_retryable() -> None:
    refused = _guarantee("A gateway call is sent only under the ledger's send permit")
    found = re.search(r"\(`(\w+)`, `(\w+)` or `(\w+)`, all `(\w+)`\)", refused)
    assert found, refused
    *reasons, failure_class = found.groups()
    classes = {
        kind.reason: kind.failure_class
        for kind in vars(errors).values()
        if isinstance(kind, type) and issubclass(kind, errors.ActonceError)
    }
    assert {reason: classes.get(reason) for reason in reasons} == dict.fromkeys(
        reasons, errors.FailureClass(failure_class)
    )


def test_when_a_call_becomes_decidable_is_what_the_ledger_and_the_cli_do() -> None:
    decidable = _guarantee("Nobody decides a call that may still be under way")
    assert _seconds_without_heartbeat(decidable) == STALE_SECONDS
    assert f"as a `{Kind.STEP_CONFLICT.value}` (exit 3)" in decidable
    assert "`actonce audit pending --in-flight`" in decidable
    pending = build_parser().parse_args(["audit", "pending", "--in-flight"])
    assert pending.in_flight is True


def test_the_calls_deadline_is_made_of_a_setting_that_exists() -> None:
    deadline = _guarantee("A call has one deadline, and it bounds everything")
    assert "`--mcp-upstream-timeout`" in deadline
    serve = build_parser().parse_args(["serve", "--mcp-upstream-timeout", "3"])
    assert serve.mcp_upstream_timeout_seconds == "3"


def test_the_window_is_measured_not_guessed() -> None:
    window = _bullet(
        page_text("guarantees.md").split("## Not promised", 1)[1], "The permit leaves a window"
    )
    figures = re.findall(r"(\d+(?:\.\d+)?) (µs|ms)", window)
    assert len(figures) >= 4, window
    assert "python -m bench.permit_window" in window
