"""What the webhook adds to a pod, read from the kustomize Component that adds it to a
workload (deploy/kubernetes/components/sidecar): its patch (``sidecar.yaml``) for the
container, the volumes, the pod's labels and annotations, and its settings file
(``settings.env``) for the defaults of the settings each pod may set by annotation.

The folder ships inside the package (``sidecar/inject/component`` links to it in the
repository; the wheel and the image hold its files), so the webhook and the Component add the
same sidecar, field for field, from one text.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

COMPONENT = Path(__file__).resolve().parent / "component"

Object = dict[str, Any]


class TemplateError(Exception):
    """The Component's files are missing or hold no sidecar: the webhook cannot start."""


@dataclass(frozen=True)
class Template:
    """The sidecar as the Component adds it. ``container`` reads its settings from a
    ConfigMap (``envFrom``); the webhook writes them into each pod's own env instead."""

    container: Object
    volumes: tuple[Object, ...]
    labels: dict[str, str]
    annotations: dict[str, str]
    defaults: dict[str, str]

    def sidecar(self) -> Object:
        """A fresh copy of the container, free for one pod to change."""
        return copy.deepcopy(self.container)

    def pod_volumes(self) -> list[Object]:
        return copy.deepcopy(list(self.volumes))


def read_settings(text: str) -> dict[str, str]:
    """A kustomize env file: ``NAME=VALUE`` lines, ``#`` comments and blank lines, a value
    taken as written (kustomize neither unquotes nor expands it)."""
    settings: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        name, equals, value = stripped.partition("=")
        if not equals or not name:
            raise TemplateError(f"settings.env line {number}: expected NAME=VALUE")
        settings[name] = value
    return settings


def load(folder: Path = COMPONENT) -> Template:
    """The Component in ``folder``, as the webhook adds it."""
    try:
        patch = yaml.safe_load((folder / "sidecar.yaml").read_text())
        defaults = read_settings((folder / "settings.env").read_text())
    except OSError as exc:
        raise TemplateError(f"the sidecar's Component cannot be read: {exc}") from exc
    try:
        template = patch["spec"]["template"]
        (container,) = [c for c in template["spec"]["initContainers"] if c["name"] == "actonce"]
        volumes = template["spec"]["volumes"]
        labels = template["metadata"]["labels"]
        annotations = template["metadata"]["annotations"]
    except (KeyError, TypeError, ValueError) as exc:
        raise TemplateError(f"{folder / 'sidecar.yaml'} holds no actonce sidecar") from exc
    return Template(
        container=container,
        volumes=tuple(volumes),
        labels={str(k): str(v) for k, v in labels.items()},
        annotations={str(k): str(v) for k, v in annotations.items()},
        defaults=defaults,
    )
