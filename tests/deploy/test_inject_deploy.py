"""The webhook deployed: the kustomize base (deploy/kubernetes/inject, with cert-manager) and
the Helm chart (deploy/helm/actonce-inject, its certificate made by the chart or by
cert-manager) render objects that validate strict for every Kubernetes version the manifests
are held to, and that agree with each other as the API server would follow them: the
configuration calls the Service's name, port and /inject; the Service reaches the
container's port; the certificate names the Service and sits where the container reads it.
The chart's own certificate is then served by the real `actonce inject`, started with the
Deployment's environment, and a call checked against the configuration's caBundle for the
Service's name gets its AdmissionReview answered with the chart's image as the sidecar."""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sidecar.config.commands import INJECT
from tests.deploy.render import (
    HELM_CHARTS,
    KUBE,
    Object,
    container,
    find,
    helm_template,
    kustomize,
    pod_of,
    validate_strict,
)
from tests.deploy.test_inject_webhook import admission_review, replica_pod
from tests.harness import free_port
from tests.helpers.env import scrubbed_env

CHART = HELM_CHARTS / "actonce-inject"
NAMESPACE = "actonce-system"
# `helm template` renders into the namespace `helm install` would be given, "default" here.
RELEASE_NAMESPACE = "default"
CERT_MANAGER = "cert-manager.io/v1"


def kubernetes_objects(objects: list[Object]) -> list[Object]:
    """The objects Kubernetes' own schemas know: cert-manager's are checked by hand."""
    return [o for o in objects if o["apiVersion"] != CERT_MANAGER]


def env_of(spec: Object) -> dict[str, str]:
    return {e["name"]: e["value"] for e in spec["env"]}


def wiring(objects: list[Object], name: str, namespace: str) -> tuple[Object, Object]:
    """Check what the API server follows, from the configuration to the container's files;
    the Deployment's container and the webhook's one entry."""
    configuration = find(objects, "MutatingWebhookConfiguration", name)
    (hook,) = configuration["webhooks"]
    service_ref = hook["clientConfig"]["service"]
    service = find(objects, "Service", service_ref["name"])
    assert service_ref["namespace"] == service["metadata"]["namespace"] == namespace
    assert service_ref["path"] == "/inject"
    (port,) = service["spec"]["ports"]
    assert port["port"] == service_ref["port"] == 443
    deployment = find(objects, "Deployment", service_ref["name"])
    pod = pod_of(deployment)
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    spec = container(pod, "inject")
    assert spec["command"] == ["actonce", "inject"]
    (served,) = [p for p in spec["ports"] if p["name"] == port["targetPort"]]
    env = env_of(spec)
    assert env["ACTONCE_INJECT_LISTEN"] == f"0.0.0.0:{served['containerPort']}"
    # Every variable is a setting `actonce inject` reads (it refuses any other ACTONCE_*).
    known = {setting.env for setting in INJECT.values()}
    assert set(env) <= known, set(env) - known
    # The certificate's files are where the container reads them.
    (mount,) = spec["volumeMounts"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    for variable, key in (
        ("ACTONCE_INJECT_TLS_CERT", "tls.crt"),
        ("ACTONCE_INJECT_TLS_KEY", "tls.key"),
    ):
        assert env[variable] == f"{mount['mountPath']}/{key}"
        assert {"key": key, "path": key} in volume["secret"]["items"]
    # The sidecar it adds is the image it runs.
    assert env["ACTONCE_INJECT_IMAGE"] == spec["image"]
    # Pods are sent only from namespaces that ask, and the webhook's own never does.
    assert hook["namespaceSelector"] == {"matchLabels": {"actonce.dev/injection": "enabled"}}
    own = [o for o in objects if o["kind"] == "Namespace"]
    assert all("actonce.dev/injection" not in o["metadata"].get("labels", {}) for o in own)
    assert hook["rules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
         "resources": ["pods"], "scope": "Namespaced"}
    ]  # fmt: skip
    assert (hook["sideEffects"], hook["admissionReviewVersions"]) == ("None", ["v1"])
    return spec, hook


def certificate_by_cert_manager(
    objects: list[Object], hook_name: str, secret: str, namespace: str
) -> None:
    configuration = find(objects, "MutatingWebhookConfiguration", hook_name)
    (hook,) = configuration["webhooks"]
    service = hook["clientConfig"]["service"]
    found, name = configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].split(
        "/"
    )
    certificate = find(objects, "Certificate", name)
    assert found == certificate["metadata"]["namespace"] == namespace
    assert certificate["spec"]["secretName"] == secret
    assert f"{service['name']}.{service['namespace']}.svc" in certificate["spec"]["dnsNames"]
    issuer = find(objects, "Issuer", certificate["spec"]["issuerRef"]["name"])
    assert issuer["spec"] == {"selfSigned": {}}
    assert "caBundle" not in hook["clientConfig"]  # cert-manager's CA injector writes it


def test_the_kustomize_base_validates_and_is_wired_to_its_certificate() -> None:
    objects = kustomize(KUBE / "inject")
    validate_strict(kubernetes_objects(objects))
    spec, _hook = wiring(objects, "actonce-inject", NAMESPACE)
    (volume,) = [v for v in pod_of(find(objects, "Deployment", "actonce-inject"))["volumes"]]
    secret = volume["secret"]["secretName"]
    certificate_by_cert_manager(objects, "actonce-inject", secret, NAMESPACE)
    assert spec["image"] == "registry.example.com/actonce:0.1.0"


def test_the_chart_with_cert_manager_validates_and_is_wired(tmp_path: Path) -> None:
    objects = helm_template(CHART, tmp_path, release="web", values={"certificates": "cert-manager"})
    validate_strict(kubernetes_objects(objects))
    wiring(objects, "web-actonce-inject", RELEASE_NAMESPACE)
    secret = "web-actonce-inject-tls"
    certificate_by_cert_manager(objects, "web-actonce-inject", secret, RELEASE_NAMESPACE)


@pytest.fixture(scope="module")
def chart_objects(tmp_path_factory: pytest.TempPathFactory) -> list[Object]:
    scratch = tmp_path_factory.mktemp("chart")
    values = {"image": {"repository": "registry.example.com/actonce", "tag": "7.7.7"}}
    return helm_template(CHART, scratch, release="web", values=values)


@pytest.fixture
def served(chart_objects: list[Object], tmp_path: Path) -> Iterator[tuple[int, bytes, str]]:
    """`actonce inject` with the chart's Secret's files and the Deployment's environment, on
    loopback: its port, the configuration's caBundle and the Service's name."""
    secret = find(chart_objects, "Secret", "web-actonce-inject-tls")
    for key in ("tls.crt", "tls.key"):
        (tmp_path / key).write_bytes(base64.b64decode(secret["data"][key]))
    spec = container(pod_of(find(chart_objects, "Deployment", "web-actonce-inject")), "inject")
    port = free_port()
    env = {
        **env_of(spec),
        "ACTONCE_INJECT_LISTEN": f"127.0.0.1:{port}",
        "ACTONCE_INJECT_TLS_CERT": str(tmp_path / "tls.crt"),
        "ACTONCE_INJECT_TLS_KEY": str(tmp_path / "tls.key"),
    }
    log = tmp_path / "inject.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "sidecar.cli", *spec["command"][1:]],
            stdout=out, stderr=out, env=scrubbed_env(env),
        )  # fmt: skip
    (hook,) = find(chart_objects, "MutatingWebhookConfiguration", "web-actonce-inject")["webhooks"]
    ca = base64.b64decode(hook["clientConfig"]["caBundle"])
    host = f"web-actonce-inject.{hook['clientConfig']['service']['namespace']}.svc"
    try:
        yield port, ca, host
    finally:
        process.kill()
        process.wait(10)


def call(port: int, ca: bytes, host: str, method: str, path: str, body: bytes = b"") -> Object:
    """One HTTPS request to 127.0.0.1:``port``, its certificate checked against ``ca`` for
    ``host``, as the API server checks it; the answer's JSON."""
    context = ssl.create_default_context(cadata=ca.decode())
    deadline = time.monotonic() + 20
    while True:  # until it listens
        try:
            raw = socket.create_connection(("127.0.0.1", port), timeout=10)
            break
        except ConnectionRefusedError:
            assert time.monotonic() < deadline, "actonce inject never listened"
            time.sleep(0.05)
    connection = http.client.HTTPSConnection(host, port, context=context, timeout=10)
    connection.sock = context.wrap_socket(raw, server_hostname=host)
    try:
        headers = {"Content-Type": "application/json"} if body else {}
        connection.request(method, path, body=body or None, headers=headers)
        reply = connection.getresponse()
        assert reply.status == 200, reply.read()
        return dict(json.loads(reply.read()))
    finally:
        connection.close()


def test_the_chart_validates_and_its_own_certificate_is_served_and_trusted(
    chart_objects: list[Object], served: tuple[int, bytes, str]
) -> None:
    validate_strict(chart_objects)
    wiring(chart_objects, "web-actonce-inject", RELEASE_NAMESPACE)
    port, ca, host = served
    assert call(port, ca, host, "GET", "/healthz") == {"status": "ok"}
    pod = replica_pod({"actonce.dev/inject": "true"})
    review = call(port, ca, host, "POST", "/inject", json.dumps(admission_review(pod)).encode())
    response = review["response"]
    assert response["allowed"] is True
    patch = json.loads(base64.b64decode(response["patch"]))
    images = json.dumps(patch)
    assert "registry.example.com/actonce:7.7.7" in images
