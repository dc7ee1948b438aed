"""Draw the Grafana dashboard's queries with a real Prometheus, and take a screenshot of it.

    python scripts/monitoring_screenshot.py docs/images/monitoring-prometheus.png

Grafana is neither in Debian nor to be had from the registries this project builds from, so
the picture is the closest honest one: Prometheus's own console page (its console templates
and graph library, from Debian's `prometheus`), laid out as the dashboard's rows and panels,
each graph drawing that panel's PromQL exactly as the dashboard holds it (the variables set
as Grafana sets them). Prometheus scrapes a real sidecar in front of a real reference store,
under a few minutes of varied traffic. `make monitoring-screenshot` runs this.
"""

from __future__ import annotations

import argparse
import html
import json
import random
import re
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from tests.deploy.monitoring import (
    TARGET_LABELS,
    VARIABLES,
    dashboard,
    interpolate,
    metered_sidecar,
    metrics_port,
    traffic,
    write_rule_file,
)
from tests.harness import RunningSidecar
from tests.helpers.prometheus import Prometheus

# The rate interval Grafana would pick for a 5 minute view of a 1 s scrape.
RATE_INTERVAL = "15s"
# The dashboard's variables as Grafana would set them for this one sidecar.
VALUES = {**VARIABLES, "__rate_interval": RATE_INTERVAL}
FORMATTERS = {"s": "humanizeNoSmallPrefix", "bytes": "humanize1024"}


def _unit(panel: dict[str, Any]) -> str:
    return str(panel.get("fieldConfig", {}).get("defaults", {}).get("unit", ""))


def graph(panel: dict[str, Any], index: int) -> str:
    """One panel as a graph of the console library, drawing each of its queries."""
    targets = panel["targets"]
    exprs = [interpolate(t["expr"], VALUES) for t in targets]
    # Grafana's {{label}} legends are the console library's [[label]].
    names = [re.sub(r"\{\{\s*(\w+)\s*\}\}", r"[[\1]]", t["legendFormat"]) for t in targets]
    unit = _unit(panel)
    formatter = FORMATTERS.get(unit, "humanizeNoSmallPrefix")
    return f"""
<div class="panel"><h4>{html.escape(str(panel["title"]))}</h4><div id="g{index}"></div>
<script>new PromConsole.Graph({{node: document.querySelector("#g{index}"),
  expr: {json.dumps(exprs)}, name: {json.dumps(names)}, duration: 240, width: 380, height: 140,
  yAxisFormatter: PromConsole.NumberFormatter.{formatter},
  yHoverFormatter: PromConsole.NumberFormatter.{formatter}, yTitle: {json.dumps(unit)}}});
</script></div>"""


def console_page() -> str:
    body = []
    for index, panel in enumerate(dashboard()["panels"]):
        if panel["type"] == "row":
            body.append(f'<h3 class="row-title">{html.escape(panel["title"])}</h3>')
        else:
            body.append(graph(panel, index))
    return """<!doctype html><html><head>
<link rel="stylesheet" href="/classic/static/rickshaw/rickshaw.min.css">
<link rel="stylesheet" href="/classic/static/bootstrap4/css/bootstrap.min.css">
<link rel="stylesheet" href="/classic/static/css/prom_console.css">
<script src="/classic/static/d3/d3.min.js"></script>
<script src="/classic/static/rickshaw/rickshaw.min.js"></script>
<script src="/classic/static/jquery/jquery.min.js"></script>
<script>var PATH_PREFIX = "";</script>
<script src="/classic/static/js/prom_console.js"></script>
<style>body{margin:12px;font-size:12px} .grid{display:flex;flex-wrap:wrap}
.panel{width:460px;margin:4px 8px 10px 0} h4{font-size:13px;margin:0 0 2px}
.row-title{width:100%;font-size:15px;margin:10px 0 2px;border-bottom:1px solid #ccc}
.prom_graph_chart{width:380px}</style></head><body>
<h2>actonce: the Grafana dashboard's queries, drawn by Prometheus's console page</h2>
<p>deploy/kubernetes/monitoring/dashboard.json, each panel's PromQL as Grafana sends it
(namespace and pod chosen, rate interval RATE_INTERVAL); one real sidecar, 1 s scrapes.</p>
<div class="grid">BODY</div></body></html>""".replace("RATE_INTERVAL", RATE_INTERVAL).replace(
        "BODY", "\n".join(body)
    )


def load(running: RunningSidecar, stop: threading.Event) -> None:
    rounds = 0
    while not stop.is_set():
        # Bursts and lulls, so that the graphs show a shape.
        burst = random.choice((1, 2, 4, 8))
        traffic(running, rounds=burst, first=rounds)
        rounds += burst
        stop.wait(random.uniform(0.2, 1.5))


def shoot(url: str, out: Path) -> None:
    driver_path = shutil.which("chromedriver")
    assert driver_path, "chromedriver is missing: run `make browser`"
    options = webdriver.ChromeOptions()
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1460,1200",
        "--force-device-scale-factor=1",
    ):
        options.add_argument(flag)
    chromium = shutil.which("chromium")
    if chromium:
        options.binary_location = chromium
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    try:
        driver.get(url)
        time.sleep(5)  # every graph asks Prometheus for its range, then draws
        height = driver.execute_script("return document.documentElement.scrollHeight")
        # The window's height beyond the page's: headless chromium keeps some of it for itself.
        driver.set_window_size(1460, int(height) + 160)
        time.sleep(1)
        driver.save_screenshot(str(out))
    finally:
        driver.quit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seconds", type=float, default=240, help="of traffic before the shot")
    args = parser.parse_args()
    work = Path("build") / "monitoring-screenshot"
    shutil.rmtree(work, ignore_errors=True)
    consoles = work / "consoles"
    consoles.mkdir(parents=True)
    (consoles / "actonce.html").write_text(console_page())
    with metered_sidecar(work) as running:
        server = Prometheus(
            work / "prometheus",
            {f"127.0.0.1:{metrics_port(running)}": TARGET_LABELS},
            rule_files=[write_rule_file(work)],
            extra_flags=[f"--web.console.templates={consoles.resolve()}"],
        )
        stop = threading.Event()
        loader = threading.Thread(target=load, args=(running, stop), daemon=True)
        loader.start()
        try:
            time.sleep(args.seconds)
            shoot(f"{server.url}/consoles/actonce.html", args.out)
        finally:
            stop.set()
            loader.join(30)
            server.stop()
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
