"""The monitoring objects read as their tools read them, and a real sidecar with traffic that
touches every series they ask for: shared by test_monitoring.py and the screenshot script."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import yaml
from actonce_api.v1 import run_actions_pb2 as pb

from tests.deploy.render import KUBE
from tests.harness import RunningSidecar, sidecar_config, start_sidecar, start_store

MONITORING = KUBE / "monitoring"
DASHBOARD = MONITORING / "dashboard.json"
# The labels the PodMonitor's targets carry in a cluster (the operator sets them), given to
# the test's one target so that the dashboard's selectors find it.
TARGET_LABELS = {"namespace": "agents", "pod": "agent-7d9f-x2k4q", "container": "actonce"}
# What Grafana puts in place of the dashboard's variables before a query leaves it: the
# namespace and pod chosen, and the rate interval (4 scrapes; the test scrapes every second).
VARIABLES = {
    "namespace": TARGET_LABELS["namespace"],
    "pod": TARGET_LABELS["pod"],
    "__rate_interval": "4s",
}


def rule_groups() -> dict[str, Any]:
    """The PrometheusRule's groups, as a Prometheus rule file."""
    rule = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    return {"groups": rule["spec"]["groups"]}


def write_rule_file(folder: Path) -> Path:
    path = folder / "rules.yaml"
    path.write_text(yaml.safe_dump(rule_groups()))
    return path


@dataclass(frozen=True)
class Query:
    panel: str
    legend: str
    expr: str


def interpolate(expr: str, values: dict[str, str] | None = None) -> str:
    """``expr`` with Grafana's ``$name`` and ``${name}`` replaced, as Grafana does."""
    chosen = values if values is not None else VARIABLES

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        assert name in chosen, f"{name}: a variable the dashboard does not define"
        return chosen[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, expr)


def dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def dashboard_queries() -> list[Query]:
    """Every panel's every query, interpolated."""
    queries = []
    for panel in dashboard()["panels"]:
        for target in panel.get("targets", []):
            queries.append(
                Query(panel["title"], target["legendFormat"], interpolate(target["expr"]))
            )
    return queries


def variable_queries() -> list[tuple[str, str]]:
    """The query variables' ``label_values(SELECTOR, LABEL)``, interpolated: (selector, label)."""
    found = []
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["query"]["query"])
        assert match is not None, variable["name"]
        found.append((interpolate(match.group(1)), match.group(2)))
    return found


@contextlib.contextmanager
def metered_sidecar(folder: Path) -> Iterator[RunningSidecar]:
    """A sidecar serving its metrics, before a reference store of its own (so that store
    calls are counted), holding one live attempt at most (so that attempts are forgotten)."""
    store = start_store(folder / "store")
    running = start_sidecar(
        sidecar_config(
            folder / "data",
            store_target=store.target,
            metrics_listen="127.0.0.1:0",
            attempt_max_count=1,
        )
    )
    try:
        yield running
    finally:
        running.stop()
        store.stop()


def metrics_port(running: RunningSidecar) -> int:
    endpoint = running.sidecar.metrics_endpoint
    assert endpoint is not None, "the sidecar serves no metrics"
    return endpoint.port


def traffic(running: RunningSidecar, rounds: int = 1, *, first: int = 0) -> None:
    """Writes applied, repeated and skipped, a refusal, a read, and an attempt forgotten for
    want of room: every series the dashboard and the alerts select gets a sample. Runs are
    numbered from ``first``: a run seen before makes its writes again, found already applied."""
    for n in range(first, first + rounds):
        attempt = running.begin(f"run-{n}", checkpoint="c")
        created = running.stub.Create(
            pb.CreateRequest(attempt_id=attempt, kind="ticket", data_json=json.dumps({"n": n}))
        )
        running.stub.Edit(
            pb.EditRequest(
                attempt_id=attempt, artifact_id=created.id, path="/n", value_json=json.dumps(n + 1)
            )
        )
        running.stub.Read(pb.ReadRequest(attempt_id=attempt, artifact_id=created.id))
        with contextlib.suppress(grpc.RpcError):
            running.stub.Create(pb.CreateRequest(attempt_id=attempt, kind="ticket", data_json="{"))
        # The run retried: its create is found already applied, its edit already there.
        retried = running.begin(f"run-{n}", checkpoint="c")
        running.stub.Create(
            pb.CreateRequest(attempt_id=retried, kind="ticket", data_json=json.dumps({"n": n}))
        )
        running.stub.Edit(
            pb.EditRequest(
                attempt_id=retried, artifact_id=created.id, path="/n", value_json=json.dumps(n + 1)
            )
        )
        # A second live attempt past --attempt-max-count 1: the least recent is forgotten.
        running.begin(f"other-{n}", checkpoint="c")
