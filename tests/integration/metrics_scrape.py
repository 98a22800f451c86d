"""Reads a server's Prometheus ``/metrics`` page the way Prometheus does, for tests to look values up."""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample


@dataclass(frozen=True)
class Scrape:
    """One parsed scrape: families by name, and their samples looked up by sample name and labels."""

    text: str
    families: dict[str, Metric]

    def samples(self, name: str, **labels: str) -> list[Sample]:
        """Every sample called ``name`` whose labels include ``labels``."""
        return [
            sample
            for family in self.families.values()
            for sample in family.samples
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
        ]

    def value(self, name: str, **labels: str) -> float:
        """The value of the one sample called ``name`` with ``labels``; fails if there is not exactly one."""
        found = self.samples(name, **labels)
        assert len(found) == 1, f"expected one {name}{labels}, found {found}"
        return float(found[0].value)

    def buckets(self, histogram: str, **labels: str) -> list[tuple[float, float]]:
        """``(upper bound, cumulative count)`` of a histogram, in bound order, ending with ``+Inf``."""
        found = self.samples(f"{histogram}_bucket", **labels)
        return sorted((float(s.labels["le"]), float(s.value)) for s in found)


def scrape(url: str) -> Scrape:
    """GET ``url`` and parse it with prometheus_client's text parser; the page must be served as text."""
    with urllib.request.urlopen(url, timeout=10) as reply:
        assert reply.status == 200
        assert reply.headers["Content-Type"].startswith("text/plain")
        text = reply.read().decode()
    return Scrape(text, {family.name: family for family in text_string_to_metric_families(text)})
