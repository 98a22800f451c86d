"""Reads a server's Prometheus ``/metrics`` page the way Prometheus does, for tests to look values up.

prometheus_client's parser hands a counter back in its OpenMetrics shape, its samples renamed
``<name>_total`` even where the page wrote the bare name. Prometheus keeps the names as written, so
:func:`scrape` gives a counter typed under its bare name on the page its bare name back.
"""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

#: Triton's counters, which conch types ``counter`` under these bare names.
TRITON_COUNTERS = (
    "nv_inference_request_success",
    "nv_inference_request_failure",
    "nv_inference_count",
    "nv_inference_exec_count",
    "nv_inference_request_duration_us",
    "nv_inference_queue_duration_us",
    "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us",
)
#: conch's own latency and batch-size histograms.
HISTOGRAMS = (
    "conch_inference_request_duration_seconds",
    "conch_inference_queue_duration_seconds",
    "conch_inference_batch_size",
)


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


def scrape(url: str, accept: str | None = None) -> Scrape:
    """GET ``url`` (asking for ``accept``) and parse it; whatever was asked, the page must be text 0.0.4."""
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(request, timeout=10) as reply:
        assert reply.status == 200
        assert reply.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        text = reply.read().decode()
    families = {}
    for family in text_string_to_metric_families(text):
        if family.type == "counter" and f"# TYPE {family.name} counter\n" in text:
            family.samples = [sample._replace(name=family.name) for sample in family.samples]
        families[family.name] = family
    return Scrape(text, families)
