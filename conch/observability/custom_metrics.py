"""Metrics that Python models define themselves (``pb_utils.MetricFamily``), on the ``/metrics`` page.

A model's process creates a family (counter, gauge or histogram) and metrics in it by their labels,
and sends each change here; the families are summed over every process and instance, and exposed
beside Triton's own: a counter under its bare name as Triton does (``requests_total`` stays
``requests_total``, nothing is appended), a gauge and a histogram as Prometheus writes them.

A family name used again with another kind or description is refused in the model's process; one
that differs between two models' processes keeps the first definition, and the later change is
logged and dropped, so one model cannot corrupt another's figures.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric

from conch.observability.exposition import TritonCounter

log = logging.getLogger(__name__)

COUNTER, GAUGE, HISTOGRAM = 0, 1, 2
Labels = tuple[tuple[str, str], ...]


@dataclass
class _Histogram:
    buckets: tuple[float, ...]
    counts: list[int]
    total: float = 0.0
    count: int = 0

    def observe(self, value: float) -> None:
        for index, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[index] += 1
        self.total += value
        self.count += 1


@dataclass
class _Family:
    kind: int
    description: str
    values: dict[Labels, float] = field(default_factory=dict)
    histograms: dict[Labels, _Histogram] = field(default_factory=dict)


class CustomMetrics:
    """Every model-defined family, and the collector that writes them at each scrape."""

    def __init__(self) -> None:
        self._families: dict[str, _Family] = {}
        self._lock = threading.Lock()

    def change(
        self,
        name: str,
        description: str,
        kind: int,
        labels: Labels,
        action: str,
        value: float,
        buckets: tuple[float, ...] = (),
    ) -> None:
        """Apply one change a model's process sent: ``increment``, ``set`` or ``observe``."""
        with self._lock:
            family = self._families.setdefault(name, _Family(kind, description))
            if family.kind != kind:
                log.error("metric family '%s' is already defined with another kind; change dropped", name)
                return
            if action == "observe":
                histogram = family.histograms.setdefault(labels, _Histogram(buckets, [0] * len(buckets)))
                histogram.observe(value)
            elif action == "set":
                family.values[labels] = value
            elif action == "increment":
                family.values[labels] = family.values.get(labels, 0.0) + value
            elif action == "create":
                if kind == HISTOGRAM:
                    family.histograms.setdefault(labels, _Histogram(buckets, [0] * len(buckets)))
                else:
                    family.values.setdefault(labels, 0.0)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            families = {
                name: (f.kind, f.description, dict(f.values), dict(f.histograms))
                for name, f in self._families.items()
            }
        for name, (kind, description, values, histograms) in sorted(families.items()):
            label_names = sorted({k for labels in [*values, *histograms] for k, _ in labels})
            if kind == COUNTER:
                counter = TritonCounter(name, description, label_names)
                for labels, value in values.items():
                    counter.add_metric(_ordered(labels, label_names), value)
                yield counter
            elif kind == GAUGE:
                gauge = GaugeMetricFamily(name, description, labels=label_names)
                for labels, value in values.items():
                    gauge.add_metric(_ordered(labels, label_names), value)
                yield gauge
            else:
                histogram_family = HistogramMetricFamily(name, description, labels=label_names)
                for labels, histogram in histograms.items():
                    bounds = [
                        (_bound(b), float(c))
                        for b, c in zip(histogram.buckets, histogram.counts, strict=True)
                    ]
                    bounds.append(("+Inf", float(histogram.count)))
                    histogram_family.add_metric(_ordered(labels, label_names), bounds, histogram.total)
                yield histogram_family


def _ordered(labels: Labels, names: list[str]) -> list[str]:
    given = dict(labels)
    return [given.get(name, "") for name in names]


def _bound(value: float) -> str:
    return "+Inf" if math.isinf(value) else repr(float(value))


#: The server's one store (the Python backend reports into it, the metrics page reads it).
CUSTOM_METRICS = CustomMetrics()
