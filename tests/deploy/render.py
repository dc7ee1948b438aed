"""The manifests as a cluster would receive them: rendered by the real kustomize and helm, and
a container's environment as the kubelet would hand it to the process.

`make deploy-tools` (a prerequisite of `make test`) installs kustomize, helm and
kubernetes-validate into .venv; a test run without them fails with the command to run.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
KUBE = REPO / "deploy" / "kubernetes"
HELM_CHARTS = REPO / "deploy" / "helm"
TOOLS = REPO / ".venv" / "bin"

Object = dict[str, Any]


def tool(name: str) -> str:
    path = TOOLS / name
    assert path.exists(), f"{path} is missing: run `make deploy-tools`"
    return str(path)


def _run(*command: str) -> str:
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stderr}"
    return done.stdout


def documents(text: str) -> list[Object]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def kustomize(folder: Path) -> list[Object]:
    """`kustomize build FOLDER`, as objects."""
    return documents(_run(tool("kustomize"), "build", str(folder)))


def helm_template(
    chart: Path, scratch: Path, *, release: str = "agent", values: Mapping[str, Any] | None = None
) -> list[Object]:
    """`helm template` of ``chart`` (a folder under deploy/helm) with its dependencies built,
    as `helm install` would render it; ``values`` as a values file of its own."""
    copy = scratch / "helm"
    shutil.copytree(HELM_CHARTS, copy)
    target = copy / chart.relative_to(HELM_CHARTS)
    _run(tool("helm"), "dependency", "build", str(target))
    extra: list[str] = []
    if values is not None:
        values_file = scratch / "values.yaml"
        values_file.write_text(yaml.safe_dump(dict(values)))
        extra = ["--values", str(values_file)]
    return documents(_run(tool("helm"), "template", release, str(target), *extra))


def find(objects: Iterable[Object], kind: str, name: str) -> Object:
    matches = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"{len(matches)} {kind} named {name}"
    return matches[0]


def pod_of(workload: Object) -> Object:
    spec = workload["spec"]
    template = (
        spec["jobTemplate"]["spec"]["template"] if "jobTemplate" in spec else spec["template"]
    )
    return dict(template["spec"])


def container(pod: Object, name: str) -> Object:
    (found,) = [c for c in pod.get("initContainers", []) + pod["containers"] if c["name"] == name]
    return dict(found)


_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def environment(
    spec: Object,
    objects: Iterable[Object],
    *,
    field_values: Mapping[str, str],
) -> dict[str, str]:
    """The variables the kubelet hands the container ``spec``: its ConfigMaps' data
    (``envFrom``) first, then its ``env`` in order, each ``$(NAME)`` in a value replaced by a
    variable defined before it, and each ``fieldRef`` by ``field_values[fieldPath]``."""
    found = list(objects)
    env: dict[str, str] = {}
    for source in spec.get("envFrom", []):
        config_map = find(found, "ConfigMap", source["configMapRef"]["name"])
        env.update({k: str(v) for k, v in config_map.get("data", {}).items()})
    for entry in spec.get("env", []):
        if "value" in entry:
            value = _REFERENCE.sub(lambda m: env.get(m.group(1), m.group(0)), entry["value"])
        else:
            source = entry["valueFrom"]
            assert "fieldRef" in source, f"{entry['name']}: only fieldRef is emulated here"
            value = field_values[source["fieldRef"]["fieldPath"]]
        env[entry["name"]] = value
    return env


def mounted(
    spec: Object,
    pod: Object,
    root: Path,
    files: Mapping[str, Mapping[str, bytes]],
    env: Mapping[str, str],
) -> dict[str, str]:
    """``env`` with every path under one of the container's mounts moved under ``root``, where
    each mounted Secret's items are written from ``files[secretName][key]`` (and every other
    volume is an empty folder): the container's file system, laid out on this machine."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    moved: dict[str, str] = {}
    for mount in spec.get("volumeMounts", []):
        folder = root / mount["name"]
        folder.mkdir(parents=True, exist_ok=True)
        # A StatefulSet's claims are no pod volume: an empty folder, as a new claim is.
        secret = volumes.get(mount["name"], {}).get("secret")
        if secret is not None:
            for item in secret["items"]:
                data = files[secret["secretName"]][item["key"]]
                (folder / item["path"]).write_bytes(data)
        moved[mount["mountPath"].rstrip("/") + "/"] = f"{folder}/"
    result = {}
    for name, value in env.items():
        # The deepest mount that holds the path, or is it (a data folder), as in the
        # container; moved once.
        prefixes = [p for p in moved if f"{value}/".startswith(p)]
        if prefixes:
            prefix = max(prefixes, key=len)
            value = (
                f"{moved[prefix]}{value[len(prefix) :]}"
                if value != prefix[:-1]
                else moved[prefix][:-1]
            )
        result[name] = value
    return result


def kubernetes_versions() -> list[str]:
    """The Kubernetes versions `make test-deploy` validates for (mk/deploy.mk)."""
    text = (REPO / "mk" / "deploy.mk").read_text()
    found = re.search(r"^KUBERNETES_VERSIONS := (.+)$", text, re.MULTILINE)
    assert found is not None
    return found.group(1).split()


def validate_strict(objects: Iterable[Object]) -> None:
    """Each object valid, strictly (no unknown field), for every Kubernetes version
    `make test-deploy` names: kubernetes-validate, as the make target runs it."""
    import kubernetes_validate  # installed by `make deploy-tools`

    for version in kubernetes_versions():
        for obj in objects:
            kubernetes_validate.validate(obj, version, strict=True)
