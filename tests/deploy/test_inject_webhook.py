"""`actonce inject`, the admission webhook, fed AdmissionReview (admission.k8s.io/v1) objects as
the API server sends them for a pod a ReplicaSet creates. What it answers is held to the
admission API's types and to Kubernetes' own schemas (the response's Status); the pod, once
its patch is applied by a real JSON Patch implementation, validates strict for every
Kubernetes version the manifests are validated for, and carries the sidecar the kustomize
Component adds, with its own settings."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import jsonpatch
import jsonschema  # type: ignore[import-untyped]  # ships no types; mcp depends on it
import pytest
import yaml
from referencing import Registry, Resource

from sidecar.inject.review import KNOWN, Malformed, answer
from sidecar.inject.template import COMPONENT, Template, load
from tests.deploy.render import (
    KUBE,
    Object,
    container,
    environment,
    find,
    kubernetes_versions,
    kustomize,
    pod_of,
    validate_strict,
)

SAMPLE = KUBE / "examples" / "add-to-a-deployment"
POD_IP = "10.1.2.3"
IMAGE = "registry.example.com/actonce:0.1.0"


@pytest.fixture(scope="module")
def template() -> Template:
    return load()


@pytest.fixture(scope="module")
def by_component() -> list[Object]:
    return kustomize(SAMPLE)


def replica_pod(annotations: dict[str, str] | None = None) -> Object:
    """The pod a ReplicaSet of the sample's support-agent creates: its template, named by
    generateName, owned by the ReplicaSet, with ``annotations`` of its own."""
    source = {
        d["metadata"]["name"]: d
        for d in yaml.safe_load_all((SAMPLE / "workloads.yaml").read_text())
    }
    template = copy.deepcopy(source["support-agent"]["spec"]["template"])
    metadata = template["metadata"]
    metadata["labels"]["pod-template-hash"] = "5d8f7c9b6"
    metadata.update(
        {
            "generateName": "support-agent-5d8f7c9b6-",
            "namespace": "agents",
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "support-agent-5d8f7c9b6",
                    "uid": "6c0b8a42-3f35-4f8e-9b1a-2d7f5e3c9a10",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        }
    )
    if annotations is not None:
        metadata["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]}


def admission_review(pod: Object, *, operation: str = "CREATE", uid: str = "") -> Object:
    """The AdmissionReview the API server sends a mutating webhook for ``pod``."""
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid or "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "agents",
            "operation": operation,
            "userInfo": {
                "username": "system:serviceaccount:kube-system:replicaset-controller",
                "uid": "2a9e6c41-1b7e-4f0e-8f0a-7d3c2b1a0e9f",
                "groups": ["system:serviceaccounts", "system:authenticated"],
            },
            "object": pod,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


# admission.k8s.io/v1's AdmissionReview and AdmissionResponse (k8s.io/api/admission/v1
# types.go): no schema of Kubernetes' OpenAPI holds them (no resource is served as one), so
# their fields are written here; the response's Status is held to Kubernetes' own schema.
RESPONSE_SCHEMA: Object = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "response"],
    "properties": {
        "apiVersion": {"const": "admission.k8s.io/v1"},
        "kind": {"const": "AdmissionReview"},
        "response": {
            "type": "object",
            "additionalProperties": False,
            "required": ["uid", "allowed"],
            "properties": {
                "uid": {"type": "string", "minLength": 1},
                "allowed": {"type": "boolean"},
                "status": {"type": "object"},
                "patch": {"type": "string", "contentEncoding": "base64"},
                "patchType": {"const": "JSONPatch"},
                "auditAnnotations": {"type": "object"},
                "warnings": {"type": "array", "items": {"type": "string"}},
            },
            "dependentRequired": {"patch": ["patchType"], "patchType": ["patch"]},
        },
    },
}


def validate_status(status: Object) -> None:
    """``status`` against Kubernetes' schema of a meta/v1 Status, strict, for each version
    (kubernetes-validate's files, read as it reads them)."""
    from importlib import resources

    root = resources.files("kubernetes_validate") / "kubernetes-json-schema"
    for version in kubernetes_versions():
        folder = root / f"v{version}-local-strict"
        schema = json.loads((folder / "status-meta-v1.json").read_text())
        definitions = json.loads((folder / "_definitions.json").read_text())
        registry: Registry[Any] = Resource.from_contents(schema) @ Registry()
        registry = Resource.from_contents(definitions) @ registry
        jsonschema.Draft202012Validator(schema, registry=registry).validate(status)


def respond(review: Object, template: Template) -> Object:
    """The webhook's answer, through JSON both ways as over the wire, held to the types."""
    reply = json.loads(json.dumps(answer(json.loads(json.dumps(review)), template, image=IMAGE)))
    jsonschema.Draft202012Validator(RESPONSE_SCHEMA).validate(reply)
    response = reply["response"]
    assert response["uid"] == review["request"]["uid"]
    if "patch" in response:
        base64.b64decode(response["patch"], validate=True)
    if "status" in response:
        validate_status(response["status"])
    return dict(response)


def patched(pod: Object, response: Object) -> Object:
    assert response["allowed"] is True and response["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(response["patch"]))
    result: Object = jsonpatch.apply_patch(pod, patch)
    return result


def _key(item: Object) -> str:
    return json.dumps(item, sort_keys=True)


def sidecar_env(pod: Object) -> dict[str, str]:
    return environment(container(pod["spec"], "actonce"), [], field_values={"status.podIP": POD_IP})


def test_an_annotated_pod_gets_the_sidecar_with_its_own_settings(template: Template) -> None:
    pod = replica_pod({"actonce.dev/inject": "true", "actonce.dev/rules": "support,refunds"})
    result = patched(pod, respond(admission_review(pod), template))
    validate_strict([result])
    spec = result["spec"]
    sidecar = container(spec, "actonce")
    assert sidecar["restartPolicy"] == "Always" and "startupProbe" in sidecar
    assert [c["name"] for c in spec["initContainers"]] == ["actonce"]
    assert [c["name"] for c in spec["containers"]] == ["worker"]
    # Its settings are its own env: no ConfigMap another pod could share or overwrite.
    assert "envFrom" not in sidecar
    env = sidecar_env(result)
    assert env["ACTONCE_RULES"] == "support,refunds"
    assert env["ACTONCE_HEALTH_LISTEN"] == f"{POD_IP}:50053"
    assert result["metadata"]["labels"]["actonce/sidecar"] == "true"
    assert result["metadata"]["labels"]["app"] == "support-agent"
    assert result["metadata"]["annotations"]["prometheus.io/port"] == "9464"
    # What the pod had is kept.
    assert pod["spec"]["volumes"][0] in spec["volumes"]
    assert pod["spec"]["securityContext"] == spec["securityContext"]


def test_the_sidecar_is_the_components_field_for_field(
    template: Template, by_component: list[Object]
) -> None:
    # One text, two ways to add it: the container and volumes the Component renders onto a
    # workload are the webhook's, and the environment the kubelet hands the process is the
    # same (the Component's from its ConfigMap, the webhook's from the container's env).
    pod = replica_pod({"actonce.dev/inject": "true"})
    result = patched(pod, respond(admission_review(pod), template))
    component_pod = pod_of(find(by_component, "Deployment", "support-agent"))
    ours, theirs = container(result["spec"], "actonce"), container(component_pod, "actonce")
    assert sidecar_env(result) == environment(
        theirs, by_component, field_values={"status.podIP": POD_IP}
    )
    for spec in (ours, theirs):
        spec.pop("env")
        spec.pop("envFrom", None)
    assert ours == theirs
    assert [v for v in result["spec"]["volumes"] if v["name"].startswith("actonce-")] == [
        v for v in component_pod["volumes"] if v["name"].startswith("actonce-")
    ]
    worker = container(result["spec"], "worker")
    component_worker = container(component_pod, "worker")
    # The agent's own patch in the sample puts them first; the webhook appends them.
    for field in ("env", "volumeMounts"):
        assert sorted(worker[field], key=_key) == sorted(component_worker[field], key=_key)


def test_two_pods_keep_their_own_settings(template: Template) -> None:
    support = replica_pod({"actonce.dev/inject": "true", "actonce.dev/rules": "support"})
    billing = replica_pod(
        {
            "actonce.dev/inject": "true",
            "actonce.dev/rules": "billing",
            "actonce.dev/send-allowlist": "billing",
        }
    )
    envs = [
        sidecar_env(patched(pod, respond(admission_review(pod), template)))
        for pod in (support, billing)
    ]
    assert (envs[0]["ACTONCE_RULES"], envs[0]["ACTONCE_SEND_ALLOWLIST"]) == ("support", "")
    assert (envs[1]["ACTONCE_RULES"], envs[1]["ACTONCE_SEND_ALLOWLIST"]) == ("billing", "billing")


def test_the_agent_container_is_pointed_at_the_sidecar(template: Template) -> None:
    pod = replica_pod({"actonce.dev/inject": "true", "actonce.dev/listen": "127.0.0.1:6000"})
    result = patched(pod, respond(admission_review(pod), template))
    worker = environment(container(result["spec"], "worker"), [], field_values={})
    sidecar = sidecar_env(result)
    assert worker["ACTONCE_TARGET"] == sidecar["ACTONCE_LISTEN"] == "127.0.0.1:6000"
    assert worker["ACTONCE_API_TOKEN_FILE"] == sidecar["ACTONCE_API_TOKEN_FILE"]
    assert worker["QUEUE_URL"].startswith("amqp://"), "its own variables are kept"


def test_a_pod_local_ledger_drops_the_ledgers_secret(template: Template) -> None:
    pod = replica_pod({"actonce.dev/inject": "true", "actonce.dev/ledger": "pod"})
    result = patched(pod, respond(admission_review(pod), template))
    validate_strict([result])
    env = sidecar_env(result)
    assert "ACTONCE_AUDIT_DSN_FILE" not in env
    assert "actonce-audit-dsn" not in {v["name"] for v in result["spec"]["volumes"]}
    assert "/var/run/secrets/actonce/audit" not in {
        m["mountPath"] for m in container(result["spec"], "actonce")["volumeMounts"]
    }


def test_a_pod_with_init_containers_and_no_labels_gets_the_sidecar_after_them(
    template: Template,
) -> None:
    pod = replica_pod({"actonce.dev/inject": "true"})
    del pod["metadata"]["labels"]
    pod["spec"]["initContainers"] = [{"name": "migrate", "image": "migrate:1"}]
    result = patched(pod, respond(admission_review(pod), template))
    validate_strict([result])
    assert [c["name"] for c in result["spec"]["initContainers"]] == ["migrate", "actonce"]
    assert result["metadata"]["labels"] == {"actonce/sidecar": "true"}


@pytest.mark.parametrize(
    "annotations",
    [
        None,
        {"team": "support"},
        {"actonce/inject": "true"},  # the Component's workload annotation, not the webhook's
        {"actonce.dev/inject": "false", "actonce.dev/rules": "support"},
    ],
    ids=["none", "others", "component-annotation", "inject-false"],
)
def test_every_other_pod_is_allowed_unchanged(
    template: Template, annotations: dict[str, str] | None
) -> None:
    pod = replica_pod(annotations)
    response = respond(admission_review(pod), template)
    assert response == {"uid": response["uid"], "allowed": True}


def test_a_pod_that_has_the_sidecar_already_is_left_alone(
    template: Template, by_component: list[Object]
) -> None:
    pod = replica_pod({"actonce.dev/inject": "true"})
    pod["spec"] = pod_of(find(by_component, "Deployment", "support-agent"))
    response = respond(admission_review(pod), template)
    assert response == {"uid": response["uid"], "allowed": True}


def test_only_the_creation_of_a_pod_is_changed(template: Template) -> None:
    pod = replica_pod({"actonce.dev/inject": "true"})
    response = respond(admission_review(pod, operation="UPDATE"), template)
    assert response == {"uid": response["uid"], "allowed": True}


@pytest.mark.parametrize(
    ("annotations", "field", "words"),
    [
        (
            {"actonce.dev/inject": "true", "actonce.dev/rule": "support"},
            "actonce.dev/rule",
            "unknown annotation actonce.dev/rule",
        ),
        (
            {"actonce.dev/inject": "yes"},
            "actonce.dev/inject",
            'expected "true" or "false"',
        ),
        ({"actonce.dev/rules": "support"}, "actonce.dev/rules", "but not actonce.dev/inject"),
        (
            {"actonce.dev/inject": "true", "actonce.dev/rules": " , "},
            "actonce.dev/rules",
            "names no rule",
        ),
        (
            {"actonce.dev/inject": "true", "actonce.dev/store-timeout": "-1"},
            "actonce.dev/store-timeout",
            "must be greater than 0",
        ),
        (
            {"actonce.dev/inject": "true", "actonce.dev/listen": "0.0.0.0:50051"},
            "actonce.dev/listen",
            "stays on loopback",
        ),
        (
            {"actonce.dev/inject": "true", "actonce.dev/ledger": "sqlite"},
            "actonce.dev/ledger",
            "expected postgres or pod",
        ),
    ],
    ids=["unknown", "inject-typo", "no-inject", "rules", "timeout", "listen", "ledger"],
)
def test_annotations_that_cannot_be_meant_refuse_the_pod_naming_the_annotation(
    template: Template, annotations: dict[str, str], field: str, words: str
) -> None:
    pod = replica_pod(annotations)
    response = respond(admission_review(pod), template)
    assert response["allowed"] is False and "patch" not in response
    status = response["status"]
    assert status["code"] == 400 and status["reason"] == "BadRequest"
    assert words in status["message"] and field in status["message"]
    (cause,) = status["details"]["causes"]
    assert cause["field"] == f"metadata.annotations[{field}]"


def test_an_unknown_key_is_answered_with_every_known_one(template: Template) -> None:
    pod = replica_pod({"actonce.dev/inject": "true", "actonce.dev/rulez": "x"})
    message = respond(admission_review(pod), template)["status"]["message"]
    assert all(key in message for key in KNOWN)


@pytest.mark.parametrize(
    "review",
    [
        {},
        {
            "apiVersion": "admission.k8s.io/v1beta1",
            "kind": "AdmissionReview",
            "request": {"uid": "u"},
        },
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"},
        [],
    ],
)
def test_what_is_no_admission_review_is_malformed(template: Template, review: Any) -> None:
    with pytest.raises(Malformed):
        answer(review, template)


def test_the_template_is_the_components_files() -> None:
    # The package's copy is the repository's Component itself (a link), so the wheel and
    # the image carry the files the Component renders.
    assert COMPONENT.resolve() == (KUBE / "components" / "sidecar").resolve()
    template = load()
    patch = yaml.safe_load((KUBE / "components" / "sidecar" / "sidecar.yaml").read_text())
    (sidecar,) = patch["spec"]["template"]["spec"]["initContainers"]
    assert template.sidecar() == sidecar
