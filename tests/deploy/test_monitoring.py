"""The monitoring objects (deploy/kubernetes/monitoring) checked by Prometheus's own tools:
promtool on the alert rules and on a real sidecar's /metrics, and a real Prometheus server
scraping a real sidecar that answers every query of the Grafana dashboard and evaluates every
rule without an error."""

from __future__ import annotations

import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

import yaml

from tests.deploy.monitoring import (
    DASHBOARD,
    MONITORING,
    TARGET_LABELS,
    dashboard,
    dashboard_queries,
    metered_sidecar,
    metrics_port,
    rule_groups,
    traffic,
    variable_queries,
    write_rule_file,
)
from tests.deploy.render import REPO, find, kustomize
from tests.helpers.prometheus import Prometheus

HERE = Path(__file__).parent


def promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    assert binary is not None, "promtool is missing: run `make deploy-tools`"
    return subprocess.run([binary, *args], input=stdin, capture_output=True, text=True, timeout=60)


def test_promtool_checks_the_alert_rules(tmp_path: Path) -> None:
    checked = promtool("check", "rules", str(write_rule_file(tmp_path)))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 5 rules found" in checked.stdout


def test_the_alerts_fire_when_they_should_and_not_before(tmp_path: Path) -> None:
    write_rule_file(tmp_path)
    shutil.copy(HERE / "alerts_test.yaml", tmp_path)
    tested = promtool("test", "rules", str(tmp_path / "alerts_test.yaml"))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    # Every alert has a case of its own.
    cases = yaml.safe_load((HERE / "alerts_test.yaml").read_text())["tests"]
    named = {t["alertname"] for case in cases for t in case["alert_rule_test"]}
    assert named == {rule["alert"] for group in rule_groups()["groups"] for rule in group["rules"]}


def test_the_readme_alert_is_the_rule_the_prometheusrule_ships() -> None:
    readme = (REPO / "docs" / "operate.md").read_text()
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(- alert: .*?)```", readme, re.S)]
    assert blocks, "docs/operate.md shows no alert"
    shipped = {r["alert"]: r for group in rule_groups()["groups"] for r in group["rules"]}
    for (rule,) in blocks:
        assert rule["expr"] == shipped[rule["alert"]]["expr"], rule["alert"]
        assert rule["for"] == shipped[rule["alert"]]["for"], rule["alert"]


def test_the_dashboard_ships_as_the_configmap_grafana_loads(tmp_path: Path) -> None:
    config_map = find(kustomize(MONITORING), "ConfigMap", "actonce-grafana-dashboard")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["data"]["actonce.json"] == DASHBOARD.read_text()
    assert dashboard()["uid"] == "actonce-sidecar"


def test_promtool_checks_a_real_sidecars_metrics(tmp_path: Path) -> None:
    with metered_sidecar(tmp_path) as running:
        traffic(running)
        port = metrics_port(running)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
    checked = promtool("check", "metrics", stdin=text)
    # Lint problems print a line each, and fail.
    assert checked.returncode == 0 and not checked.stdout.strip(), checked.stdout + checked.stderr
    names = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line[:1] != "#"}
    assert not [n for n in names if n.endswith("_created")], "a _created series doubles each"
    assert {"process_cpu_seconds_total", "process_resident_memory_bytes"} <= names


def test_a_real_prometheus_answers_every_dashboard_query_and_evaluates_every_rule(
    tmp_path: Path,
) -> None:
    with metered_sidecar(tmp_path) as running:
        target = f"127.0.0.1:{metrics_port(running)}"
        server = Prometheus(
            tmp_path / "prometheus", {target: TARGET_LABELS}, rule_files=[write_rule_file(tmp_path)]
        )
        try:
            server.wait_for_scrapes(1)
            traffic(running, rounds=2)
            server.wait_for_scrapes(4)
            traffic(running, rounds=2)
            server.wait_for_scrapes(6)
            failures = []
            for query in dashboard_queries():
                answer = server.query(query.expr)
                if answer["status"] != "success":
                    failures.append(f"{query.panel} / {query.legend}: {answer.get('error')}")
                elif not answer["data"]["result"]:
                    # Every series the dashboard selects has samples here: none is a typo.
                    failures.append(f"{query.panel} / {query.legend}: no series: {query.expr}")
            for selector, label in variable_queries():
                values = server.api(f"label/{label}/values", **{"match[]": selector})
                if values["data"] != [TARGET_LABELS[label]]:
                    failures.append(f"variable {label}: {values}")
            rules = server.api("rules")["data"]["groups"]
            evaluated = [r for group in rules for r in group["rules"]]
            assert len(evaluated) == 5
            failures += [
                f"rule {r['name']}: {r.get('lastError')}" for r in evaluated if r["health"] != "ok"
            ]
            # What the check above tells from a good query: one that parses but selects
            # nothing (a misspelt metric), and one that does not parse.
            assert server.query("sum(rate(actonce_write_total[4s]))")["data"]["result"] == []
            assert server.query("sum(rate(actonce_writes_total[4s])")["status"] == "error"
        finally:
            server.stop()
    assert not failures, "\n".join(failures)
