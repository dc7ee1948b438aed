"""The webhook's answer to one AdmissionReview (admission.k8s.io/v1): pure functions, a dict
in and a dict out, no I/O.

A pod annotated ``actonce.dev/inject: "true"`` gets the sidecar (the Component's container,
volumes, labels and annotations: :mod:`sidecar.inject.template`) as a JSON Patch, with its
settings in the container's own env: the Component's defaults, overridden by the pod's
``actonce.dev/*`` annotations, each checked by its setting's own parser. Each of the pod's
containers gets ``ACTONCE_TARGET`` and the API token's file, as an agent needs them.

Every other pod is allowed unchanged: one without any ``actonce.dev/*`` annotation, one
annotated ``actonce.dev/inject: "false"``, one that already has a container named actonce.
A pod whose annotations cannot be what its author meant (an unknown ``actonce.dev/*`` key, a
value its setting refuses, settings without ``actonce.dev/inject``) is refused with a message
that names the annotation: created without the sidecar, its writes would land with no
guarantee, and silently.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping
from pathlib import PurePosixPath
from typing import Any

from sidecar.config.commands import SERVE
from sidecar.config.setting import Setting
from sidecar.inject.template import Object, Template
from sidecar.ops.http_guard import is_loopback_listen

PREFIX = "actonce.dev/"
INJECT = PREFIX + "inject"
LEDGER = PREFIX + "ledger"
# Where the ledger is: the Component's PostgreSQL ledger (the Secret actonce-audit-dsn), or
# a SQLite file in the pod's data volume, which goes with the pod: only for agents that use
# no steps (deploy/kubernetes/overlays/pod-local-ledger says why).
LEDGERS = ("postgres", "pod")

# The `actonce serve` settings a pod may set, each as actonce.dev/<its flag>: its variable
# and its parser are the settings table's. Left out: the addresses and files the injection
# itself wires (probes, metrics, the data folder, the Secrets' files), and anything secret (a
# DSN is a Secret's, never an annotation's, which anyone who may read the pod reads).
ANNOTATED_FLAGS = (
    "--rules",
    "--send-allowlist",
    "--listen",
    "--store-target",
    "--store-timeout",
    "--grace-period",
    "--id-scheme",
    "--attempt-idle-ttl",
    "--attempt-max-count",
    "--attempt-max-mib",
    "--audit-busy-timeout-ms",
    "--api-token-exempt",
    "--log-level",
    "--log-format",
)
SETTINGS: dict[str, Setting] = {PREFIX + flag[2:]: SERVE[flag] for flag in ANNOTATED_FLAGS}
KNOWN = frozenset({INJECT, LEDGER, *SETTINGS})

# What an agent reads (every client): the sidecar's address, and the API token's file.
TARGET = "ACTONCE_TARGET"
LISTEN = "ACTONCE_LISTEN"
API_TOKEN_FILE = "ACTONCE_API_TOKEN_FILE"
AUDIT_DSN_FILE = "ACTONCE_AUDIT_DSN_FILE"
SIDECAR = "actonce"


class Malformed(Exception):
    """The request is no AdmissionReview the webhook can answer (the server's 400)."""


class Refusal(Exception):
    """The pod is refused: ``message`` for its author, ``field`` the annotation at fault."""

    def __init__(self, message: str, field: str = "metadata.annotations") -> None:
        super().__init__(message)
        self.message = message
        self.field = field


def answer(review: Any, template: Template, *, image: str | None = None) -> Object:
    """The AdmissionReview that answers ``review``: the pod allowed with the sidecar added (a
    JSON Patch), allowed unchanged, or refused with a message naming the annotation."""
    request = review.get("request") if isinstance(review, dict) else None
    if (
        not isinstance(review, dict)
        or review.get("apiVersion") != "admission.k8s.io/v1"
        or review.get("kind") != "AdmissionReview"
        or not isinstance(request, dict)
        or not isinstance(request.get("uid"), str)
    ):
        raise Malformed("expected an admission.k8s.io/v1 AdmissionReview with a request uid")
    uid = request["uid"]
    kind = request.get("kind") or {}
    pod = request.get("object")
    if (
        kind.get("group", "") != ""
        or kind.get("kind") != "Pod"
        or request.get("operation") != "CREATE"
        or request.get("subResource")
        or not isinstance(pod, dict)
    ):
        # Only the creation of a pod is ours to change; the configuration asks for no other.
        return _response(uid, allowed=True)
    try:
        patch = pod_patch(pod, template, image=image)
    except Refusal as refusal:
        return _response(uid, allowed=False, refusal=refusal)
    return _response(uid, allowed=True, patch=patch)


def _response(
    uid: str,
    *,
    allowed: bool,
    patch: list[Object] | None = None,
    refusal: Refusal | None = None,
) -> Object:
    response: Object = {"uid": uid, "allowed": allowed}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode("ascii")
    if refusal is not None:
        response["status"] = {
            "status": "Failure",
            "code": 400,
            "reason": "BadRequest",
            "message": f"actonce: {refusal.message}",
            "details": {
                "causes": [
                    {"reason": "FieldValueInvalid", "field": refusal.field, "message": str(refusal)}
                ]
            },
        }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


def pod_patch(pod: Object, template: Template, *, image: str | None = None) -> list[Object]:
    """The JSON Patch (RFC 6902) that adds the sidecar to ``pod``; empty for a pod that did
    not ask for it or already has it. Raises :class:`Refusal` for annotations that cannot
    be what their author meant."""
    metadata = pod.get("metadata") or {}
    annotations: Mapping[str, str] = metadata.get("annotations") or {}
    ours = {key: value for key, value in annotations.items() if key.startswith(PREFIX)}
    if not ours:
        return []
    _check_keys(ours)
    inject = ours.get(INJECT)
    if inject is None:
        raise Refusal(
            f"{', '.join(sorted(ours))} set, but not {INJECT}: annotate the pod "
            f'{INJECT}: "true" for the sidecar, or remove them',
            _field(sorted(ours)[0]),
        )
    if inject == "false":
        return []
    if inject != "true":
        raise Refusal(f'{INJECT} is {inject!r}: expected "true" or "false"', _field(INJECT))
    spec = pod.get("spec") or {}
    init_containers: list[Object] = spec.get("initContainers") or []
    containers: list[Object] = spec.get("containers") or []
    if SIDECAR in {c.get("name") for c in init_containers + containers}:
        # Added already: by the Component or the chart, or by an earlier pass of this webhook.
        return []
    settings = sidecar_settings(ours, template)
    sidecar, volumes = _sidecar(template, settings, ours.get(LEDGER, LEDGERS[0]), image)
    taken = {v.get("name") for v in spec.get("volumes") or []}
    clash = sorted(taken & {v["name"] for v in volumes})
    if clash:
        raise Refusal(
            f"the pod already has a volume named {', '.join(clash)}, which the sidecar adds",
            "spec.volumes",
        )
    patch = _add_map(metadata.get("labels"), "/metadata/labels", template.labels)
    patch += _add_map(annotations, "/metadata/annotations", template.annotations)
    patch += _append(spec.get("initContainers"), "/spec/initContainers", [sidecar])
    patch += _append(spec.get("volumes"), "/spec/volumes", volumes)
    for index, container in enumerate(containers):
        patch += _agent(container, f"/spec/containers/{index}", sidecar, settings)
    return patch


def _check_keys(ours: Mapping[str, str]) -> None:
    unknown = sorted(set(ours) - KNOWN)
    if unknown:
        raise Refusal(
            f"unknown annotation {', '.join(unknown)}: the actonce.dev/ annotations are "
            f"{', '.join(sorted(KNOWN))}",
            _field(unknown[0]),
        )
    ledger = ours.get(LEDGER)
    if ledger is not None and ledger not in LEDGERS:
        raise Refusal(f"{LEDGER} is {ledger!r}: expected {' or '.join(LEDGERS)}", _field(LEDGER))


def sidecar_settings(ours: Mapping[str, str], template: Template) -> dict[str, str]:
    """The sidecar's ``ACTONCE_*`` settings for one pod: the Component's defaults, then the
    pod's annotations, each checked by its setting's parser as the sidecar would check it
    at start (a refusal now, not a sidecar that stops in a loop once scheduled)."""
    settings = dict(template.defaults)
    for key, setting in SETTINGS.items():
        if key not in ours:
            continue
        value = ours[key]
        try:
            setting.parse(value)
        except ValueError as exc:
            raise Refusal(f"{key}: {value!r}: {exc}", _field(key)) from None
        settings[setting.env] = value
    listen = settings[LISTEN]
    if listen.startswith("unix:") or not is_loopback_listen(listen.rpartition(":")[0]):
        # The agent API stays on loopback, which only the pod's own containers reach.
        raise Refusal(
            f"{PREFIX}listen: {listen!r}: the agent API of an injected sidecar stays on "
            "loopback: write 127.0.0.1:PORT",
            _field(PREFIX + "listen"),
        )
    return settings


def _sidecar(
    template: Template, settings: Mapping[str, str], ledger: str, image: str | None
) -> tuple[Object, list[Object]]:
    """The container and its volumes, the settings in its env instead of a ConfigMap."""
    sidecar = template.sidecar()
    volumes = template.pod_volumes()
    if image:
        sidecar["image"] = image
    sidecar.pop("envFrom", None)
    wired: list[Object] = sidecar.get("env", [])
    if ledger == "pod":
        # The DSN's file, its mount and its volume go; the ledger is DATA_DIR/audit.db.
        (dsn,) = [e for e in wired if e["name"] == AUDIT_DSN_FILE]
        wired.remove(dsn)
        mount = _mount_of(sidecar, dsn["value"])
        sidecar["volumeMounts"].remove(mount)
        volumes = [v for v in volumes if v["name"] != mount["name"]]
    own = {e["name"] for e in wired}
    # The settings first: the wired entries after them may name one as $(NAME).
    sidecar["env"] = [
        {"name": name, "value": value}
        for name, value in sorted(settings.items())
        if name not in own
    ] + wired
    return sidecar, volumes


def _mount_of(container: Object, path: str) -> Object:
    """The container's mount that holds the file ``path``."""
    parent = PurePosixPath(path).parent
    (mount,) = [m for m in container["volumeMounts"] if PurePosixPath(m["mountPath"]) == parent]
    return dict(mount)


def _agent(
    container: Object, pointer: str, sidecar: Object, settings: Mapping[str, str]
) -> list[Object]:
    """What one of the pod's containers needs to call the sidecar: its address and the API
    token's file as every client reads them, and the token's volume. A variable or a mount
    the container has already is its own and stays."""
    token_file = next(e["value"] for e in sidecar["env"] if e["name"] == API_TOKEN_FILE)
    mount = _mount_of(sidecar, token_file)
    env = [
        {"name": TARGET, "value": settings[LISTEN]},
        {"name": API_TOKEN_FILE, "value": token_file},
    ]
    has_env = {e.get("name") for e in container.get("env") or []}
    has_mounts = container.get("volumeMounts") or []
    patch = _append(
        container.get("env"), f"{pointer}/env", [e for e in env if e["name"] not in has_env]
    )
    if not any(
        m.get("name") == mount["name"] or m.get("mountPath") == mount["mountPath"]
        for m in has_mounts
    ):
        patch += _append(container.get("volumeMounts"), f"{pointer}/volumeMounts", [mount])
    return patch


def _add_map(
    current: Mapping[str, str] | None, pointer: str, added: Mapping[str, str]
) -> list[Object]:
    """Ops that set ``added``'s keys in the map at ``pointer`` (created when absent)."""
    if not added:
        return []
    if current is None:
        return [{"op": "add", "path": pointer, "value": dict(added)}]
    return [
        {"op": "add", "path": f"{pointer}/{_escape(key)}", "value": value}
        for key, value in added.items()
    ]


def _append(current: list[Object] | None, pointer: str, items: Iterable[Object]) -> list[Object]:
    """Ops that append ``items`` to the list at ``pointer`` (created when absent)."""
    items = list(items)
    if not items:
        return []
    if current is None:
        return [{"op": "add", "path": pointer, "value": items}]
    return [{"op": "add", "path": f"{pointer}/-", "value": item} for item in items]


def _escape(key: str) -> str:
    """A map key as one JSON Pointer token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def _field(annotation: str) -> str:
    return f"metadata.annotations[{annotation}]"
