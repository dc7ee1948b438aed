"""What the pod promises: a native sidecar, probes on the port that answers them, a locked-down
container, settings the sidecar accepts, secrets as files, the ledger's two roles, a network
policy, and an image that matches.

`make test-deploy` checks the manifests against Kubernetes' schemas; these tests check what a
schema cannot: that the pieces agree with each other and with the sidecar's own settings. The
base is read as kustomize renders it (the sidecar comes from components/sidecar).
"""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from sidecar.cli import build_parser
from sidecar.config.commands import SERVE as SERVE_SETTINGS
from tests.deploy.render import (
    KUBE,
    REPO,
    Object,
    container,
    environment,
    find,
    kustomize,
    pod_of,
)

POD_IP = "10.1.2.3"


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="module")
def base() -> list[Object]:
    return kustomize(KUBE / "base")


@pytest.fixture(scope="module")
def pod(base: list[Object]) -> dict[str, Any]:
    return pod_of(find(base, "Deployment", "agent"))


@pytest.fixture(scope="module")
def sidecar(pod: dict[str, Any]) -> dict[str, Any]:
    return container(pod, "actonce")


@pytest.fixture(scope="module")
def settings(base: list[Object], sidecar: dict[str, Any]) -> dict[str, str]:
    """The sidecar's environment as the kubelet hands it over: the ConfigMap, then its env."""
    return environment(sidecar, base, field_values={"status.podIP": POD_IP})


def port_of(listen: str) -> int:
    return int(listen.rpartition(":")[2])


def test_actonce_is_a_native_sidecar_that_starts_before_the_agent(
    pod: dict[str, Any], sidecar: dict[str, Any]
) -> None:
    assert sidecar["restartPolicy"] == "Always"
    assert "startupProbe" in sidecar, "without it the agent may start before actonce serves"
    assert [c["name"] for c in pod["containers"]] == ["agent"]


def test_the_probes_ask_grpc_health_on_the_pods_address(
    sidecar: dict[str, Any], settings: dict[str, str]
) -> None:
    # The kubelet probes the pod's address from the node: neither loopback nor every interface.
    assert settings["ACTONCE_HEALTH_LISTEN"] == f"{POD_IP}:50053"
    assert settings["ACTONCE_METRICS_LISTEN"] == f"{POD_IP}:9464"
    health_port = port_of(settings["ACTONCE_HEALTH_LISTEN"])
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert sidecar[probe]["grpc"]["port"] == health_port, probe
    declared = {p["containerPort"] for p in sidecar["ports"]}
    assert {health_port, port_of(settings["ACTONCE_METRICS_LISTEN"])} == declared


def test_the_agent_api_stays_on_loopback_and_the_agent_is_pointed_at_it(
    pod: dict[str, Any], settings: dict[str, str]
) -> None:
    assert settings["ACTONCE_LISTEN"].startswith("127.0.0.1:")
    (agent,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in agent["env"]}
    assert env["ACTONCE_TARGET"] == settings["ACTONCE_LISTEN"]
    api_port = port_of(settings["ACTONCE_LISTEN"])
    assert api_port not in {p["containerPort"] for p in agent.get("ports", [])}


def test_the_agent_and_the_sidecar_read_the_same_api_token(
    pod: dict[str, Any], sidecar: dict[str, Any], settings: dict[str, str]
) -> None:
    (agent,) = pod["containers"]
    agent_env = {e["name"]: e.get("value") for e in agent["env"]}
    assert agent_env["ACTONCE_API_TOKEN_FILE"] == settings["ACTONCE_API_TOKEN_FILE"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    for spec in (agent, sidecar):
        (mount,) = [m for m in spec["volumeMounts"] if m["name"] == "actonce-api-token"]
        assert mount["readOnly"] is True
        assert Path(settings["ACTONCE_API_TOKEN_FILE"]).parent == Path(mount["mountPath"])
    assert volumes["actonce-api-token"]["secret"]["secretName"] == "actonce-api-token"
    example = load(KUBE / "examples" / "api-token-secret.yaml")
    assert example["metadata"]["name"] == "actonce-api-token" and "token" in example["stringData"]


@pytest.mark.parametrize("name", ["actonce", "agent"])
def test_every_container_is_locked_down(pod: dict[str, Any], name: str) -> None:
    spec = container(pod, name)
    context = spec["securityContext"]
    assert context["runAsNonRoot"] is True
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"]["drop"] == ["ALL"]
    assert context["seccompProfile"]["type"] == "RuntimeDefault"
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(spec["resources"][kind]), (name, kind)
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert pod["automountServiceAccountToken"] is False


def test_every_setting_the_sidecar_is_given_is_one_it_accepts(
    sidecar: dict[str, Any], settings: dict[str, str]
) -> None:
    # The sidecar stops at start on an unknown or malformed ACTONCE_* variable; this finds
    # such a typo before a pod does. The only other variable is the pod's address.
    by_env = {setting.env: setting.parse for setting in SERVE_SETTINGS.values()}
    others = {name for name in settings if not name.startswith("ACTONCE_")}
    assert others == {"POD_IP"}
    for name, raw in settings.items():
        if name in others:
            continue
        assert name in by_env, f"{name} is no actonce setting (`actonce serve --help`)"
        if raw and not name.endswith(("_FILE", "_CA", "_CERT", "_KEY")):
            by_env[name](raw)  # raises ValueError on a malformed value


def test_the_operator_pins_the_rules_the_sidecar_serves(settings: dict[str, str]) -> None:
    # Unset, the agent names its own rule, and with it what the send allowlist grants.
    rules = SERVE_SETTINGS["--rules"].parse(settings["ACTONCE_RULES"])
    assert rules, "ACTONCE_RULES names no rule"
    allowed = {r.strip() for r in settings["ACTONCE_SEND_ALLOWLIST"].split(",") if r.strip()}
    assert allowed <= rules, "a rule allowed to Send that the sidecar does not serve"


def test_the_data_volume_is_where_the_image_keeps_its_data(
    pod: dict[str, Any], sidecar: dict[str, Any]
) -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    image_data_dir = re.search(r"ACTONCE_DATA_DIR=(\S+)", dockerfile)
    assert image_data_dir is not None
    (data,) = [m for m in sidecar["volumeMounts"] if m["name"] == "actonce-data"]
    assert data["mountPath"] == image_data_dir.group(1)
    assert f'VOLUME ["{data["mountPath"]}"]' in dockerfile
    assert "emptyDir" in {v["name"]: v for v in pod["volumes"]}["actonce-data"]


def test_the_pod_runs_as_the_user_the_image_declares(
    pod: dict[str, Any], sidecar: dict[str, Any]
) -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    user = re.search(r"^USER (\d+):(\d+)$", dockerfile, re.MULTILINE)
    assert user is not None, "the image's user must be numeric for runAsNonRoot"
    for context in (pod["securityContext"], sidecar["securityContext"]):
        assert context["runAsUser"] == int(user.group(1))
        assert context["runAsGroup"] == int(user.group(2))
    assert 'ENTRYPOINT ["actonce", "serve"]' in dockerfile


def test_the_drain_fits_in_the_termination_grace_period(
    pod: dict[str, Any], settings: dict[str, str]
) -> None:
    assert float(settings["ACTONCE_GRACE_PERIOD"]) < pod["terminationGracePeriodSeconds"]


def test_the_network_policy_admits_prometheus_to_the_metrics_port_alone(
    base: list[Object], pod: dict[str, Any], settings: dict[str, str]
) -> None:
    policy = find(base, "NetworkPolicy", "agent")["spec"]
    template_labels = find(base, "Deployment", "agent")["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= template_labels.items()
    assert policy["policyTypes"] == ["Ingress"]
    (rule,) = policy["ingress"]
    assert [p["port"] for p in rule["ports"]] == [port_of(settings["ACTONCE_METRICS_LISTEN"])]
    (peer,) = rule["from"]
    # Prometheus's pods in Prometheus's namespace, not the whole cluster.
    assert peer["namespaceSelector"]["matchLabels"] and peer["podSelector"]["matchLabels"]
    # The probes' port is in no rule: only the pod's own node (the kubelet) reaches it.
    assert port_of(settings["ACTONCE_HEALTH_LISTEN"]) not in {p["port"] for p in rule["ports"]}


def dsn_user(dsn: str) -> str:
    return str(urlsplit(dsn).username)


def test_the_sidecars_read_the_ledger_as_the_writer_role_from_a_secret_file(
    pod: dict[str, Any], sidecar: dict[str, Any], settings: dict[str, str]
) -> None:
    # At most once for a non-idempotent step is decided from the ledger: every sidecar that can
    # run an attempt of the run (another replica, this pod's replacement) must read the same
    # one. By default that is PostgreSQL, its DSN (which holds a password) a Secret's file.
    assert not {"ACTONCE_AUDIT_DSN", "ACTONCE_AUDIT_DB"} & set(settings)
    path = Path(settings["ACTONCE_AUDIT_DSN_FILE"])
    (mount,) = [m for m in sidecar["volumeMounts"] if Path(m["mountPath"]) == path.parent]
    volume = {v["name"]: v for v in pod["volumes"]}[mount["name"]]
    assert volume["secret"]["secretName"] == "actonce-audit-dsn"
    example = load(KUBE / "examples" / "audit-dsn-secret.yaml")
    assert example["metadata"]["name"] == "actonce-audit-dsn"
    dsn = example["stringData"]["dsn"]
    assert dsn_user(dsn) == "actonce_writer"
    # The DSN's CA is the one the same Secret mounts beside it.
    (root_cert,) = parse_qs(urlsplit(dsn).query)["sslrootcert"]
    assert Path(root_cert) == path.parent / "ca.crt"
    assert "ca.crt" in {i["key"] for i in volume["secret"]["items"]}


@pytest.fixture(scope="module")
def migrate_job(base: list[Object]) -> Object:
    return find(base, "Job", "actonce-audit-migrate")


def owner_dsn_file(pod: Object, spec: Object) -> str:
    """The owner's DSN file a job's container reads, checked to come from the owner's Secret."""
    env = {e["name"]: e for e in spec["env"]}
    path = Path(env["ACTONCE_AUDIT_DSN_FILE"]["value"])
    (mount,) = [m for m in spec["volumeMounts"] if Path(m["mountPath"]) == path.parent]
    volume = {v["name"]: v for v in pod["volumes"]}[mount["name"]]
    assert volume["secret"]["secretName"] == "actonce-audit-owner-dsn"
    assert mount["readOnly"] is True
    return str(path)


def test_the_migration_job_runs_audit_migrate_as_the_owner_granting_the_writer(
    migrate_job: Object,
) -> None:
    pod = pod_of(migrate_job)
    (spec,) = pod["containers"]
    owner_dsn_file(pod, spec)
    words = spec["command"]
    assert words[0] == "actonce"
    try:
        args = build_parser().parse_args(words[1:])
    except (SystemExit, argparse.ArgumentError):
        pytest.fail(f"`{shlex.join(words)}` is not a command the CLI takes")
    assert (args.command, args.audit_command) == ("audit", "migrate")
    # The writer the Job grants is the role the sidecars' DSN names; the owner is the other.
    writer = load(KUBE / "examples" / "audit-dsn-secret.yaml")["stringData"]["dsn"]
    owner = load(KUBE / "examples" / "audit-owner-dsn-secret.yaml")["stringData"]["dsn"]
    assert args.writer_role == dsn_user(writer) != dsn_user(owner)
    # The roles' SQL makes both, under those names.
    roles = (KUBE / "examples" / "ledger-roles.sql").read_text()
    for role in (dsn_user(writer), dsn_user(owner)):
        assert f"CREATE ROLE {role} LOGIN" in roles, role
    # Migrating twice changes nothing, so the Job may run on every apply.
    assert pod["restartPolicy"] == "OnFailure"
    assert migrate_job["spec"]["ttlSecondsAfterFinished"] > 0


def test_every_example_dsn_names_its_sslmode() -> None:
    # libpq's default, prefer, falls back to plaintext without a word.
    texts = [
        p.read_text()
        for p in (REPO / "deploy").rglob("*")
        if p.suffix in {".yaml", ".sql", ".tpl", ".md", ".txt"}
    ]
    texts += [p.read_text() for p in [REPO / "README.md", *(REPO / "docs").rglob("*.md")]]
    dsns = [m for text in texts for m in re.findall(r"postgres(?:ql)?://[^\s'\"`]+", text)]
    assert dsns, "no example DSN found"
    for dsn in dsns:
        if dsn.endswith("..."):
            continue  # a placeholder, not a DSN to copy
        assert "sslmode=verify-full" in dsn, dsn


def test_a_ledger_that_goes_with_the_pod_is_an_overlay_that_says_it_is_not_for_steps() -> None:
    overlay = KUBE / "overlays" / "pod-local-ledger"
    kustomization = load(overlay / "kustomization.yaml")
    assert "../../base" in kustomization["resources"]
    warning = (overlay / "kustomization.yaml").read_text().splitlines()[0]
    assert (
        warning
        == "# ONLY FOR AGENTS THAT USE NO STEPS (BeginStep/EndStep, or the MCP gateway's tools)."
    )
    objects = kustomize(overlay)
    pod = pod_of(find(objects, "Deployment", "agent"))
    env = environment(container(pod, "actonce"), objects, field_values={"status.podIP": POD_IP})
    assert not {"ACTONCE_AUDIT_DSN_FILE", "ACTONCE_AUDIT_DSN", "ACTONCE_AUDIT_DB"} & set(env)
    assert env["ACTONCE_DATA_DIR"] == "/var/lib/actonce"
    assert "actonce-audit-dsn" not in {v["name"] for v in pod["volumes"]}
    # No PostgreSQL schema to migrate.
    assert "Job" not in {o["kind"] for o in objects}


@pytest.fixture(scope="module")
def prune_job() -> dict[str, Any]:
    folder = KUBE / "audit-prune"
    kustomization = load(folder / "kustomization.yaml")
    assert kustomization["resources"] == ["exports-pvc.yaml", "cronjob.yaml"]
    return find(kustomize(folder), "CronJob", "actonce-audit-prune")


def test_the_prune_cronjob_runs_audit_prune_against_the_shared_ledger(
    prune_job: dict[str, Any],
) -> None:
    pod = pod_of(prune_job)
    (spec,) = pod["containers"]
    # The same ledger as the sidecars, as its owner: the writer role cannot DELETE.
    owner_dsn_file(pod, spec)
    # The command is one the CLI takes, and it exports onto the exports volume.
    shell, flag, script = spec["command"]
    assert (shell, flag) == ("/bin/sh", "-c")
    words = shlex.split(script.replace("$(date -u +%Y%m%dT%H%M%SZ)", "20261130T031700Z"))
    assert words[:2] == ["exec", "actonce"]
    args = build_parser().parse_args(words[2:])
    assert (args.command, args.audit_command) == ("audit", "prune")
    from sidecar.ledger.retention import parse_before

    parse_before(args.before)
    (mount,) = [m for m in spec["volumeMounts"] if m["name"] == "exports"]
    assert args.export.parent == Path(mount["mountPath"])
    volume = {v["name"]: v for v in pod["volumes"]}["exports"]
    claim = load(KUBE / "audit-prune" / "exports-pvc.yaml")
    assert volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    # A second prune never overlaps a running one, and a failed one is not retried blindly.
    assert prune_job["spec"]["concurrencyPolicy"] == "Forbid"
    assert prune_job["spec"]["jobTemplate"]["spec"]["backoffLimit"] == 0
    assert pod["restartPolicy"] == "Never"


@pytest.mark.parametrize("job", ["prune", "migrate"])
def test_the_ledger_jobs_are_locked_down(
    job: str, prune_job: dict[str, Any], migrate_job: Object
) -> None:
    pod = pod_of(prune_job if job == "prune" else migrate_job)
    (spec,) = pod["containers"]
    context = spec["securityContext"]
    assert context["runAsNonRoot"] is True
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"]["drop"] == ["ALL"]
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert pod["automountServiceAccountToken"] is False
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(spec["resources"][kind])


def test_traces_are_an_overlay_of_standard_otel_variables_sent_over_tls(
    settings: dict[str, str],
) -> None:
    from sidecar.ops import tracing_settings

    # The base asks for no traces: the sidecar does no tracing work there.
    assert not [name for name in settings if name.startswith("OTEL_")]
    objects = kustomize(KUBE / "overlays" / "tracing")
    pod = pod_of(find(objects, "Deployment", "agent"))
    spec = container(pod, "actonce")
    env = environment(spec, objects, field_values={"status.podIP": POD_IP})
    otel = {name: value for name, value in env.items() if name.startswith("OTEL_")}
    assert all(name in tracing_settings.READ for name in otel), otel
    assert tracing_settings.requested(otel)
    tracing_settings.check(otel)  # an exporter and protocol the sidecar offers
    endpoint = urlsplit(otel["OTEL_EXPORTER_OTLP_ENDPOINT"])
    assert (endpoint.scheme, endpoint.port) == ("https", 4317)
    assert otel["OTEL_EXPORTER_OTLP_INSECURE"] == "false"
    # The CA that signed the collector's certificate is a file the overlay mounts.
    ca = Path(otel["OTEL_EXPORTER_OTLP_CERTIFICATE"])
    (mount,) = [m for m in spec["volumeMounts"] if Path(m["mountPath"]) == ca.parent]
    volume = {v["name"]: v for v in pod["volumes"]}[mount["name"]]
    assert [i["path"] for i in volume["configMap"]["items"]] == [ca.name]


def test_the_readme_names_the_kubernetes_versions_the_manifests_are_validated_for() -> None:
    from tests.deploy.render import kubernetes_versions

    readme = (REPO / "docs" / "deploy.md").read_text()
    oldest, newest = kubernetes_versions()
    assert f"for Kubernetes {oldest} and {newest}" in readme
    assert f"Kubernetes {oldest.rpartition('.')[0]} or later" in readme
