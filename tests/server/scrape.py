"""Reading a sidecar's metrics the way Prometheus does: HTTP GET, then the text format."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int, host: str = "127.0.0.1") -> Samples:
    """Every sample at /metrics, keyed by sample name and labels."""
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as answer:
        assert answer.status == 200
        assert answer.headers["Content-Type"].startswith("text/plain")
        text = answer.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value; 0 when the series was never touched (as Prometheus reads it)."""
    return samples.get((name, frozenset(labels.items())), 0.0)
