"""Two agents in one namespace, each with the sidecar and its own settings: by the kustomize
Component (each agent its own kustomization) and by the Helm library chart (each agent its
own release). Neither may take the other's ConfigMap, so each sidecar keeps its own rules."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.render import (
    HELM_CHARTS,
    KUBE,
    Object,
    container,
    environment,
    find,
    helm_template,
    kustomize,
    pod_of,
    validate_strict,
)

NAMESPACE = "agents"


def _agent(name: str) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "annotations": {"actonce/inject": "true"}},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "agent", "image": f"{name}:1"}]},
            },
        },
    }


def _by_component(folder: Path, name: str, rules: str) -> list[Object]:
    """An agent's own kustomization, as its owner writes it: the Component, and its rules."""
    folder.mkdir()
    (folder / "agent.yaml").write_text(yaml.safe_dump(_agent(name)))
    component = os.path.relpath(KUBE / "components" / "sidecar", folder)
    kustomization = {
        "namespace": NAMESPACE,
        "resources": ["agent.yaml"],
        "components": [component],
        "patches": [
            {
                "patch": yaml.safe_dump(
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {"name": "actonce"},
                        "data": {"ACTONCE_RULES": rules},
                    }
                )
            }
        ],
    }
    (folder / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return kustomize(folder)


def _one_namespace(*renders: list[Object]) -> list[Object]:
    """What a namespace holds once each render is applied: an object of a kind and name
    another render also applies is applied twice, and the second wins (`kubectl apply`
    takes it over; `helm install` refuses it): neither may happen."""
    held: dict[tuple[str, str], Object] = {}
    for objects in renders:
        for obj in objects:
            key = (obj["kind"], obj["metadata"]["name"])
            assert key not in held, f"{key} is applied by two agents: the second overwrites it"
            held[key] = obj
    return list(held.values())


def _rules(objects: list[Object], workload: str) -> str:
    pod = pod_of(find(objects, "Deployment", workload))
    env = environment(container(pod, "actonce"), objects, field_values={"status.podIP": "10.0.0.1"})
    return env["ACTONCE_RULES"]


def test_two_agents_by_the_component_keep_their_own_rules(tmp_path: Path) -> None:
    support = _by_component(tmp_path / "support", "support-agent", "support")
    billing = _by_component(tmp_path / "billing", "billing-agent", "billing")
    namespace = _one_namespace(support, billing)
    assert _rules(namespace, "support-agent") == "support"
    assert _rules(namespace, "billing-agent") == "billing"
    validate_strict(namespace)


def test_a_changed_setting_of_the_component_rolls_the_pods(tmp_path: Path) -> None:
    # The ConfigMap's name is its values' hash, and the pod template names it: a new value
    # is a new pod template, so the pods restart and read it, instead of a later restart
    # finding a value nobody rolled out.
    before = _by_component(tmp_path / "before", "agent", "triage")
    after = _by_component(tmp_path / "after", "agent", "triage,billing")
    templates = [find(r, "Deployment", "agent")["spec"]["template"] for r in (before, after)]
    assert templates[0] != templates[1]


def _by_chart(scratch: Path, release: str, rules: str) -> list[Object]:
    scratch.mkdir()
    return helm_template(
        HELM_CHARTS / "examples" / "agent",
        scratch,
        release=release,
        values={"actonce": {"settings": {"ACTONCE_RULES": rules}}},
    )


def test_two_releases_of_the_chart_keep_their_own_rules(tmp_path: Path) -> None:
    # A second `helm install` of another agent in the same namespace: every object it
    # renders is its own, so helm does not refuse one the first release owns.
    support = _by_chart(tmp_path / "support", "support", "support")
    billing = _by_chart(tmp_path / "billing", "billing", "billing")
    namespace = _one_namespace(support, billing)
    assert _rules(namespace, "support") == "support"
    assert _rules(namespace, "billing") == "billing"
    validate_strict(namespace)


def test_a_changed_setting_of_the_chart_rolls_the_pods(tmp_path: Path) -> None:
    before = _by_chart(tmp_path / "before", "agent", "triage")
    after = _by_chart(tmp_path / "after", "agent", "triage,billing")
    annotations = [
        find(r, "Deployment", "agent")["spec"]["template"]["metadata"]["annotations"]
        for r in (before, after)
    ]
    key = "checksum/actonce-settings"
    assert annotations[0][key] != annotations[1][key]
