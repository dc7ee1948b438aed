"""The Helm chart isolates the pods it adds the sidecar to, as the kustomize base does: rendered
by the real helm, validated strictly, and held to the base's own NetworkPolicy."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.deploy.render import (
    HELM_CHARTS,
    KUBE,
    Object,
    find,
    helm_template,
    pod_of,
    validate_strict,
)

AGENT = HELM_CHARTS / "examples" / "agent"


@pytest.fixture(scope="module")
def by_chart(tmp_path_factory: pytest.TempPathFactory) -> list[Object]:
    return helm_template(AGENT, tmp_path_factory.mktemp("chart"))


def _policies(objects: list[Object]) -> list[Object]:
    return [o for o in objects if o["kind"] == "NetworkPolicy"]


def test_the_chart_renders_a_network_policy_by_default(by_chart: list[Object]) -> None:
    (policy,) = _policies(by_chart)
    assert policy["metadata"]["name"] == "agent-actonce"
    spec = policy["spec"]
    # It selects the pods that carry the sidecar: the workload's.
    workload = find(by_chart, "Deployment", "agent")
    labels = workload["spec"]["template"]["metadata"]["labels"]
    assert spec["podSelector"]["matchLabels"].items() <= labels.items()
    assert spec["policyTypes"] == ["Ingress"]
    (rule,) = spec["ingress"]
    sidecar = next(c for c in pod_of(workload)["initContainers"] if c["name"] == "actonce")
    ports = {p["name"]: p["containerPort"] for p in sidecar["ports"]}
    # Prometheus to the metrics port, and nothing to the probes' port (the kubelet is on the
    # pod's own node, which a policy never isolates the pod from).
    assert [p["port"] for p in rule["ports"]] == [ports["metrics"]]
    assert ports["probes"] not in {p["port"] for p in rule["ports"]}
    # The same rule as the kustomize base's policy.
    base = yaml.safe_load((KUBE / "base" / "networkpolicy.yaml").read_text())
    assert spec["ingress"] == base["spec"]["ingress"]
    validate_strict([policy])


def test_the_policy_can_be_widened_or_left_out(tmp_path: Path) -> None:
    webhook = {"from": [{"podSelector": {"matchLabels": {"app": "webhook"}}}]}
    widened = helm_template(
        AGENT,
        tmp_path / "widened",
        values={"actonce": {"networkPolicy": {"extraIngress": [webhook]}}},
    )
    (policy,) = _policies(widened)
    assert policy["spec"]["ingress"][1:] == [webhook]
    validate_strict([policy])
    left_out = helm_template(
        AGENT, tmp_path / "off", values={"actonce": {"networkPolicy": {"enabled": False}}}
    )
    assert _policies(left_out) == []
